# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # A training step on several devices
#
# A Triton kernel is a custom call: the partitioner that spreads a jitted program over devices cannot
# see into it, and left alone it gathers the kernel's inputs onto one device. workbench's ops therefore
# split themselves over the batch and the heads (docs/API.md, "Sharding"): inside your own
# `jax.shard_map`, or under `jit` on sharded inputs, where they build that `shard_map` from how the inputs
# are sharded. Nothing moves between devices: each one runs its own batch rows and heads.
#
# This notebook runs the README's layer — gated linear attention, then causal softmax attention — as a
# data-parallel training step on every device it finds: all the GPUs of a machine with two or more, compiled;
# on a machine with one GPU or none, 4 host CPU devices (an XLA flag, set before JAX starts), with the kernels
# in Triton's interpreter (`WORKBENCH_MIN_GPUS=2`, read when workbench is imported: docs/API.md). The sizes
# follow the device count.

# %%
import os
import pathlib
import re
import sys

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), "--xla_force_host_platform_device_count=4"])
os.environ.setdefault("WORKBENCH_MIN_GPUS", "2")  # fewer GPUs: the host CPU's devices, Triton interpreted

# The package is not installed: put the repository root (the folder holding workbench/) on the path.
ROOT = next(p for p in (pathlib.Path.cwd(), *pathlib.Path.cwd().parents)
            if (p / "workbench" / "__init__.py").exists())
sys.path.insert(0, str(ROOT))

import workbench  # first: decides compiled vs interpreted Triton before triton is imported
from workbench import plots

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

N = jax.device_count()
where = "GPUs" if jax.devices()[0].platform == "gpu" else "host CPU devices (this machine has fewer than 2 GPUs)"
print(f"{N} {where}; Triton {'in the interpreter' if workbench.INTERPRET else 'compiled'}")

# %% [markdown]
# ## The model and its step
#
# The README's layer, with a batch of one sequence per device.

# %%
B, T, H, D = N, 32, 2, 16
C = H * D


def layer(p, x):
    heads = lambda w: jnp.einsum("btc,chd->bthd", x, w)  # noqa: E731  [B, T, C] → [B, T, H, D]
    gk = jax.nn.log_sigmoid(heads(p["wg"]) + 2.0)
    o, _ = workbench.chunk_gla(heads(p["wq"]), heads(p["wk"]), heads(p["wv"]), gk=gk, chunk_size=16)
    x = x + o.reshape(x.shape)
    o = workbench.flash_attention(heads(p["aq"]), heads(p["ak"]), heads(p["av"]), causal=True)
    return x + o.reshape(x.shape)


def loss(p, x, y):
    return jnp.mean((layer(p, x) - y) ** 2)


step = jax.jit(jax.value_and_grad(loss))
keys = iter(jax.random.split(jax.random.key(0), 9))
params = {w: jax.random.normal(next(keys), (C, H, D)) / C**0.5 for w in ("wq", "wk", "wv", "wg", "aq", "ak", "av")}
x, y = (jax.random.normal(next(keys), (B, T, C)) for _ in range(2))
value, grads = step(params, x, y)  # on one device, for comparison
print(f"one device: loss {value:.6f}")

# %% [markdown]
# ## Data parallel on an explicit mesh
#
# With `AxisType.Explicit` axes the sharding is part of every array's type. The batch goes over the
# mesh's one axis, the parameters are replicated; the step is the same function. Each op sees its inputs
# sharded over the batch and runs per device.

# %%
mesh = jax.make_mesh((N,), ("data",), axis_types=(AxisType.Explicit,))
with jax.set_mesh(mesh):
    xs, ys = (jax.device_put(a, NamedSharding(mesh, P("data"))) for a in (x, y))
    ps = jax.device_put(params, NamedSharding(mesh, P()))
    value_dp, grads_dp = step(ps, xs, ys)
    compiled = step.lower(ps, xs, ys).compile().as_text()
print(f"{N} devices: loss {value_dp:.6f}")
worst = max(float(jnp.max(jnp.abs(grads_dp[w] - grads[w])) / jnp.max(jnp.abs(grads[w]))) for w in grads)
print(f"largest gradient difference from one device, relative: {worst:.1e}")
collectives = {c: len(re.findall(rf"\b{c}(-start)?\(", compiled))
               for c in ("all-gather", "all-to-all", "collective-permute", "all-reduce")}
print("collectives in the compiled step:", collectives)

# %% [markdown]
# The only collective is the all-reduce of the parameters' gradients — data parallelism itself: each
# device's gradient is summed over the batch shards. The attention and linear-attention kernels moved
# nothing. Where each array lives (one color per device):

# %%
with jax.set_mesh(mesh):
    q = jnp.einsum("btc,chd->bthd", xs, ps["aq"])
    o = workbench.flash_attention(q, q, q, causal=True)
plots.device_layout({"q [B, T, H, D]": q, "o": o}, rows=0, cols=2,
                    title="batch rows (dim 0) by heads (dim 2): which device holds each")

# %% [markdown]
# ## Inside your own `shard_map`
#
# The same step written per device: inside `jax.shard_map` the ops take each device's shard, and
# `jax.grad` works through them (their outputs and gradients carry the devices' varying axes). The mean
# over devices replaces the mean over the whole batch.

# %%
def local_loss(p, x, y):
    return jax.lax.pmean(jnp.mean((layer(p, x) - y) ** 2), "data")


per_device = jax.jit(jax.shard_map(jax.value_and_grad(local_loss), mesh=mesh,
                                   in_specs=(P(), P("data"), P("data")), out_specs=(P(), P())))
with jax.set_mesh(mesh):
    value_sm, grads_sm = per_device(ps, xs, ys)
worst_sm = max(float(jnp.max(jnp.abs(grads_sm[w] - grads[w])) / jnp.max(jnp.abs(grads[w]))) for w in grads)
print(f"shard_map: loss {value_sm:.6f}, largest gradient difference {worst_sm:.1e}")

# %% [markdown]
# ## Heads split on an automatic mesh (tensor parallelism)
#
# On a mesh of `AxisType.Auto` axes, XLA chooses every layout after the program is traced, so an op cannot
# read its inputs' sharding while tracing. workbench's ops then run as custom calls that XLA partitions once
# the layout is known (`jax.experimental.custom_partitioning`): arrays that arrive with their heads split stay
# split, outputs and gradients come back that way, nothing moves. Here attention with one head per device.
# With Triton in the interpreter (no GPU) the kernels' launches are host callbacks, which cannot run inside
# such calls: there the op would split the batch instead (docs/API.md), so this cell runs the pure-JAX
# reference, which takes the same layout-keeping path; on GPUs it runs the compiled kernels.

# %%
impl = "reference" if workbench.INTERPRET else "triton"
auto = jax.make_mesh((N,), ("model",), axis_types=(AxisType.Auto,))
qkv = [jax.random.normal(k, (2, T, N, D)) for k in jax.random.split(jax.random.key(1), 3)]


def attention_loss(q, k, v):
    return jnp.sum(jnp.sin(workbench.flash_attention(q, k, v, causal=True, implementation=impl)))


tp_step = jax.jit(jax.value_and_grad(attention_loss, argnums=(0, 1, 2)))
value_one, grads_one = tp_step(*qkv)
with jax.set_mesh(auto):
    heads_split = [jax.device_put(a, NamedSharding(auto, P(None, None, "model"))) for a in qkv]
    value_tp, grads_tp = tp_step(*heads_split)
    tp_collectives = {c: len(re.findall(rf"\b{c}(-start)?\(", tp_step.lower(*heads_split).compile().as_text()))
                      for c in ("all-gather", "all-to-all", "collective-permute", "all-reduce")}
worst_tp = max(float(jnp.max(jnp.abs(g - w)) / jnp.max(jnp.abs(w))) for g, w in zip(grads_tp, grads_one))
print(f"{impl} on an automatic mesh of {N}: dq sharded {grads_tp[0].sharding.spec}, collectives {tp_collectives}, "
      f"largest gradient difference {worst_tp:.1e}")

# %% [markdown]
# ## The check
#
# Both sharded steps give the one-device loss and gradients (to float32 rounding), and the explicit
# mesh's compiled step gathers nothing; on the automatic mesh the heads stay where they were (its one
# all-reduce is the loss itself, a sum over every device's heads).

# %%
assert abs(float(value_dp) - float(value)) <= 1e-6 * abs(float(value)) and worst <= 1e-5, (value_dp, worst)
assert abs(float(value_sm) - float(value)) <= 1e-6 * abs(float(value)) and worst_sm <= 1e-5, (value_sm, worst_sm)
assert collectives["all-gather"] == collectives["all-to-all"] == collectives["collective-permute"] == 0, collectives
assert abs(float(value_tp) - float(value_one)) <= 1e-5 * abs(float(value_one)) and worst_tp <= 1e-5, (value_tp, worst_tp)
assert tp_collectives["all-gather"] == tp_collectives["all-to-all"] == tp_collectives["collective-permute"] == 0
assert tp_collectives["all-reduce"] <= 1, tp_collectives  # the loss: a sum over every device's heads
assert all(tuple(g.sharding.spec)[2] == "model" for g in grads_tp), [g.sharding.spec for g in grads_tp]
print("sharded steps equal the one-device step")

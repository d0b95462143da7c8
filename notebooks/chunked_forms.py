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
# # Three forms of gated linear attention: recurrent, parallel, chunkwise
#
# `workbench.recurrent` and `workbench.chunk_gla` compute the same recurrence (gates g and gk fold
# into one per-key log-decay $a_t = g_t + g^k_t \le 0$):
#
# $$
# S_t = \exp(a_t) \odot S_{t-1} + k_t v_t^\top, \qquad o_t = S_t^\top(\text{scale}\cdot q_t).
# $$
#
# It can be evaluated three ways (`workbench/chunk_gla/NOTES.md`, (gla.1)–(gla.5)):
#
# * **recurrent**: one step per token, T dependent steps (`recurrence.ipynb` walks through it);
# * **parallel**: unrolled, $o_t = \text{scale}\sum_i q_t[i]\big(e^{B_t[i]} S_0[i,:] + \sum_{s\le t}
#   e^{B_t[i]-B_s[i]} k_s[i]\, v_s\big)$ with global prefix sums $B_t = \sum_{u \le t} a_u$:
#   attention with a decay mask, $T^2$ weights;
# * **chunkwise**: the state only at chunk boundaries (a scan over $T/C$ chunks), attention inside
#   each chunk of $C$ rows, with chunk-local prefix sums $b_r$.
#
# This notebook shows that the three agree, where the chunkwise form gets its weights, why its decay
# ratios cannot overflow, and how the cost of each form grows with T (CPU timings of the pure-JAX
# references, and GPU records from `data/bench/` where they exist). It ends with a check that fails
# if the forms or the Triton kernel disagree.

# %%
import functools
import json
import pathlib
import sys
import time

# The package is not installed: put the repository root (the folder holding workbench/) on the path.
ROOT = next(p for p in (pathlib.Path.cwd(), *pathlib.Path.cwd().parents)
            if (p / "workbench" / "__init__.py").exists())
sys.path.insert(0, str(ROOT))

import workbench  # first: decides compiled vs interpreted Triton before triton is imported
from workbench import testing
from workbench.chunk_gla import reference

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

jax.config.update("jax_enable_x64", True)
print("Triton runs", "in the interpreter (CPU)" if workbench.INTERPRET else "compiled (CUDA)")
checks = {}

# %% [markdown]
# ## 1. The three forms agree
#
# One batch of inputs (T = 40, not a multiple of any chunk size; gates g and gk; an initial state),
# evaluated in float64 by the definition (`recurrent_ref`), the parallel form (`parallel_ref`) and the
# chunkwise form (`chunk_gla_ref`) at chunk sizes 16, 32 and 64, and by the Triton kernels in float32.

# %%
B, T, H, K, V = 1, 40, 2, 8, 8
x32 = testing.recurrent_inputs(0, B, T, H, K, V, gates=("g", "gk"), strength=0.5)
x64 = testing.to_float64(x32)

# each form under jax.jit: one XLA program per form instead of op-by-op dispatch (on a CPU most of
# this cell's time would otherwise go to compiling each small operation separately)
o_def, S_def = jax.jit(reference.recurrent_ref)(**x64)
forms = {"parallel": jax.jit(reference.parallel_ref)(**x64)}
for C in (16, 32, 64):
    forms[f"chunkwise C={C}"] = jax.jit(reference.chunk_gla_ref, static_argnames="chunk_size")(**x64, chunk_size=C)
forms["Triton, float32, C=16"] = jax.jit(workbench.chunk_gla, static_argnames="chunk_size")(**x32, chunk_size=16)

print(f"{'form':>24s}   o vs definition   final state vs definition")
for name, (o, S) in forms.items():
    print(f"{name:>24s}   {testing.rms_rel(o, o_def):15.1e}   {testing.rms_rel(S, S_def):15.1e}")
    limit = 1e-12 if "Triton" not in name else 1e-6
    checks[f"{name} agrees"] = testing.rms_rel(o, o_def) < limit and testing.rms_rel(S, S_def) < limit

# %% [markdown]
# ## 2. Where the chunkwise form gets each weight
#
# The parallel form's weight of token $s$ at step $t$ is $\exp(B_t - B_s)$ (per key). Below, one key
# dimension of it for a scalar decay: the chunkwise form splits the lower triangle at the chunk
# boundaries (white lines). Blocks on the diagonal are the attention inside a chunk, $A$ in (gla.5);
# everything below them reaches step $t$ through the state at the chunk's start, $\bar q_t h$.

# %%
T_pic, C_pic = 48, 16
a = -0.15 * jnp.ones(T_pic)
Bt = jnp.cumsum(a)
w = jnp.where(jnp.tril(jnp.ones((T_pic, T_pic), bool)), jnp.exp(Bt[:, None] - Bt[None, :]), jnp.nan)
fig, ax = plt.subplots(figsize=(4.6, 4), layout="constrained")
im = ax.imshow(w, cmap="viridis")
for c in range(C_pic, T_pic, C_pic):
    ax.axhline(c - 0.5, color="w", lw=1)
    ax.axvline(c - 0.5, color="w", lw=1)
ax.set(xlabel="token s", ylabel="step t", title=r"weights $\exp(B_t - B_s)$, chunks of 16")
fig.colorbar(im, ax=ax, shrink=0.8)
plt.show()

# %% [markdown]
# ## 3. Ratios that cannot overflow
#
# With log-decays near −12 per step the prefix sums inside one chunk of 64 reach −800. Factorising
# the ratio as $e^{B_t}\cdot e^{-B_s}$ (the naive way to turn it into a matrix product) overflows
# float32 at once. The kernels use a reference row $n$ inside the chunk, the first row of a 16-row
# sub-chunk (gla.6): both factors $e^{b_r-b_n}$ and $e^{b_n-b_s}$ lie in $(0, 1]$ for $s < n \le r$;
# pairs inside one sub-chunk are formed elementwise.

# %%
rng = np.random.default_rng(1)
b = np.cumsum(-12.0 * np.logaddexp(0.0, rng.standard_normal(64))).astype(np.float32)
with np.errstate(over="ignore", invalid="ignore"):
    naive = np.exp(b)[:, None] * np.exp(-b)[None, :]
r, s = np.tril_indices(64, -1)
n = (r // 16) * 16
keep = s < n  # pairs across sub-chunks: the reference row n lies between them
r, s, n = r[keep], s[keep], n[keep]
left, right = np.exp(b[r] - b[n]), np.exp(b[n] - b[s])
exact = np.exp(b[r].astype(np.float64) - b[s])
normal = exact > np.finfo(np.float32).tiny  # below that the float32 result underflows, as it must
rel = np.abs(left.astype(np.float64) * right - exact)[normal] / exact[normal]
print(f"min b = {b.min():.0f}; naive factorisation: {np.sum(~np.isfinite(naive[np.tril_indices(64, -1)]))} "
      f"of 2016 lower-triangle entries not finite")
print(f"reference-row factors over {len(r)} pairs: max {max(left.max(), right.max()):.3g} (≤ 1); "
      f"{normal.sum()} ratios above float32's smallest normal, max relative error {rel.max():.1e}; "
      f"the rest are at most {float(np.max(left[~normal] * right[~normal])):.1e}, as in float32 they must be")
checks["reference-row factors ≤ 1"] = bool(left.max() <= 1 and right.max() <= 1 and rel.max() < 1e-4)

# %% [markdown]
# ## 4. How the cost grows with T
#
# Per head (NOTES.md, "Cost"): the recurrent form does ≈ 6TKV FLOPs in T dependent steps; the parallel
# form ≈ 3T²K + T²V with T²K/2 exponentials; the chunkwise form ≈ T(6KV + 2CK + CV), linear in T,
# mostly matrix products, in T/C dependent steps. Below: forward wall time of the three pure-JAX
# references under `jax.jit` on this machine (float32, B=1, H=2, K=V=32, C=64), the median of 3 calls
# after compilation. On a CPU none of them uses a GPU's parallelism, so this shows growth, not speed.

# %%
Ts = [256, 512, 1024]
fns = {
    "recurrent": jax.jit(lambda x: reference.recurrent_ref(**x)),
    "parallel": jax.jit(lambda x: reference.parallel_ref(**x)),
    "chunkwise (C=64)": jax.jit(lambda x: reference.chunk_gla_ref(**x, chunk_size=64)),
}
x_long = testing.recurrent_inputs(2, 1, Ts[-1], 2, 32, 32, gates=("gk",), strength=0.5)
timings = {name: [] for name in fns}
for T_cost in Ts:
    xt = {n: a if n == "initial_state" else a[:, :T_cost] for n, a in x_long.items()}  # its first T_cost steps
    for name, fn in fns.items():
        jax.block_until_ready(fn(xt))
        samples = []
        for _ in range(3):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(xt))
            samples.append(time.perf_counter() - t0)
        timings[name].append(1e3 * float(np.median(samples)))

fig, ax = plt.subplots(figsize=(5.5, 3.6), layout="constrained")
for name, ms in timings.items():
    ax.loglog(Ts, ms, "o-", label=name)
ax.loglog(Ts, [timings["parallel"][0] * (t / Ts[0]) ** 2 for t in Ts], "k:", lw=1, label=r"$\propto T^2$")
ax.loglog(Ts, [timings["chunkwise (C=64)"][0] * t / Ts[0] for t in Ts], "k--", lw=1, label=r"$\propto T$")
ax.set(xlabel="T", ylabel="forward ms (CPU, jit)", title="pure-JAX references, B=1 H=2 K=V=32")
ax.legend(fontsize=8)
plt.show()
print("ms:", {name: [f"{m:.1f}" for m in ms] for name, ms in timings.items()})

# %% [markdown]
# ## 5. GPU timings from `data/bench/`
#
# `workbench bench --op chunk_gla --shapes target --peers` on a GPU appends a record
# `data/bench/chunk_gla-<UTC time>.json` with the Triton kernels, the JAX reference and
# flash-linear-attention's `chunk_gla` timed in one run. The fused recurrent form of the same
# recurrence (`workbench.recurrent`) has records of its own; both are listed with device and date.

# %%
def device_label(device):
    return (device or {}).get("kind") or (device or {}).get("name") or "unknown device"


def rows_of(record):
    out = []
    for r in record["results"]:
        shape = " ".join(f"{k}={v}" for k, v in r["shape"].items())
        out.append(f"  {shape:28s} {r['implementation']:34s} {r['pass']:16s} {r['ms']['median']:9.3f} ms"
                   + ("  WRONG" if r.get("status") == "WRONG" else ""))
    return out


for op in ("chunk_gla", "recurrent"):
    records = []
    for path in sorted((ROOT / "data" / "bench").glob(f"{op}-*.json")):
        try:
            records.append((path.name, json.loads(path.read_text())))
        except (OSError, json.JSONDecodeError) as exc:
            print(f"skipped {path.name}: {exc}")
    gpu = [(name, rec) for name, rec in records if not rec.get("interpreted")]
    if not gpu:
        print(f"No GPU record for {op} in data/bench/ yet: no GPU timing to show for it.\n")
        continue
    name, rec = gpu[-1]  # the newest
    print(f"{op}: newest of {len(gpu)} GPU record(s): {name} — {device_label(rec.get('device'))}, "
          f"{rec.get('date', '?')}, shape set {rec.get('shape_set')}, {rec.get('dtype')}")
    print("\n".join(rows_of(rec)) + "\n")

# %% [markdown]
# ## Check
#
# The parallel and chunkwise forms equal the definition in float64 (to 10⁻¹²) at every chunk size,
# the Triton kernels agree in float32, the reference-row factors never exceed 1, and the kernel's
# forward and gradients on a small problem are within budget of the float64 oracle (kernel error ≤
# 1.5 × the chunkwise reference's error in the same dtype + atol).

# %%
cts = testing.random_cotangents(3, (jax.ShapeDtypeStruct((B, T, H, V), jnp.float32),
                                    jax.ShapeDtypeStruct((B, H, K, V), jnp.float32)))
names = ("q", "k", "v", "g", "gk", "initial_state")


@functools.partial(jax.jit, static_argnums=0)
def run(impl, inputs, cotangents):
    out, pullback = jax.vjp(lambda *a: workbench.chunk_gla(**dict(zip(names, a)), chunk_size=16,
                                                           implementation=impl), *[inputs[n] for n in names])
    return list(out) + list(pullback(cotangents))


with jax.default_matmul_precision("float32"):
    kernel, ref, oracle = run("triton", x32, cts), run("reference", x32, cts), run("reference", x64,
                                                                                   testing.to_float64(cts))
budget = [testing.compare(n, a, b_, c) for n, a, b_, c in zip(("o", "final_state", *(f"d{n}" for n in names)),
                                                                kernel, ref, oracle)]
print("\n".join(map(str, budget)))
checks["kernel within budget"] = all(c.ok for c in budget)
failed = [name for name, ok in checks.items() if not ok]
assert not failed, f"failed checks: {failed}"
print("all checks pass:", ", ".join(checks))

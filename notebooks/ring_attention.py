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
# # Ring attention: the schedule, the lse merge, work balance, scaling
#
# `workbench.ring_attention(q, k, v, axis_name=...)` runs inside `jax.shard_map` with the sequence
# sharded over n devices. Each device keeps its queries; the key/value shards travel around the ring
# with `lax.ppermute`, one hop per step, and each step's partial result over one shard merges into
# the running one by log-sum-exp (NOTES.md (ring.1)):
#
# $$
# \text{lse} = \log\big(e^{\text{lse}_a} + e^{\text{lse}_b}\big), \qquad
# o = e^{\text{lse}_a - \text{lse}}\, o_a + e^{\text{lse}_b - \text{lse}}\, o_b .
# $$
#
# The backward runs the ring again; each block's gradients come from the *merged* lse and
# $\Delta_i = dO_i \cdot o_i$ (ring.3), and the dk, dv of a shard travel with it until they are home.
#
# 1. the schedule: which block each device computes at each step, contiguous vs zigzag, causal;
# 2. the work per device that schedule implies;
# 3. the lse merge step by step on one device;
# 4. the traced ring on the notebook's devices against the float64 oracle;
# 5. measured weak scaling on GPUs, read from `data/bench/ring_attention-*.json`.
#
# The ring runs on every GPU of a machine with two or more, compiled; with one GPU or none, on 4 host CPU
# devices with Triton interpreted (`WORKBENCH_MIN_GPUS=2`, read when workbench is imported; host devices are
# requested before JAX starts, so the first cell sets both). It ends with a check that fails if the ring is
# wrong or over its error budget.

# %%
import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
os.environ.setdefault("WORKBENCH_MIN_GPUS", "2")  # fewer GPUs: the host CPU's devices, Triton interpreted

import functools
import json
import pathlib
import sys
import warnings

# The package is not installed: put the repository root (the folder holding workbench/) on the path.
ROOT = next(p for p in (pathlib.Path.cwd(), *pathlib.Path.cwd().parents)
            if (p / "workbench" / "__init__.py").exists())
sys.path.insert(0, str(ROOT))

import workbench  # first: decides compiled vs interpreted Triton before triton is imported
from workbench import plots, testing
from workbench.ring_attention import reference, schedule

import jax
import jax.numpy as jnp
import numpy as np
from IPython.display import Markdown, display
from matplotlib_inline.backend_inline import set_matplotlib_formats

set_matplotlib_formats("png")  # show the Figure objects that workbench.plots returns
jax.config.update("jax_enable_x64", True)  # the float64 oracle
warnings.filterwarnings("ignore", category=DeprecationWarning)  # the interpreter's NumPy scalar conversions
N = jax.device_count()
WHERE = "GPUs" if jax.devices()[0].platform == "gpu" else "host CPU devices"
print(f"{N} {WHERE}{'' if WHERE == 'GPUs' else ' (this machine has fewer than 2 GPUs)'}; Triton "
      f"{'in the interpreter' if workbench.INTERPRET else 'compiled'}: {jax.devices()}")

# %% [markdown]
# ## 1. The schedule
#
# At step $s$ device $r$ holds the key/value shard of device $(r - s) \bmod n$ (ring.4). Each panel is
# the $L \times L$ block of (local query, local key) pairs that device computes at that step: dark
# pairs are computed, hatched panels are skipped. With the **contiguous** layout (device $r$ holds
# chunk $r$) a causal ring has the diagonal at step 0, full blocks from earlier shards and skipped
# blocks from later ones (ring.5): device 0 idles for $n-1$ steps while device $n-1$ never does.
# With **zigzag** (device $r$ holds chunks $r$ and $2n-1-r$ of $2n$) every step is half a block on
# every device: both query chunks against the incoming front chunk, or the back query chunk against
# both incoming chunks (ring.7).

# %%
L = 8
for layout in schedule.LAYOUTS:
    cells = [[(blk.mask(L), f"{blk.name} ←{schedule.source(r, s, N)}")
              for s, blk in enumerate(row)] for r, row in enumerate(schedule.schedule(layout, True, N))]
    display(plots.block_grid(cells, title=f"causal, {layout}: block of device r at step s (←: whose keys)"))

# %% [markdown]
# ## 2. Work per device
#
# Query-key pairs each device computes over the whole ring (ring.8). The dashed line is the perfectly
# balanced share, 1/n of the causal pairs of the gathered sequence. Every step ends with a hop that all
# devices wait for, so the ring runs at the pace of its busiest device.

# %%
L_work = 1024
for n in (4, 8):
    works = {layout: schedule.work(layout, True, n, L_work).sum(1) / 1e6 for layout in schedule.LAYOUTS}
    share = schedule.per_device_share(True, n, L_work) / 1e6
    display(plots.grouped_bars(works, [f"device {r}" for r in range(n)], ylabel="pairs computed (millions)",
                               title=f"causal, n = {n}, L = {L_work} per device", reference=share,
                               reference_label="balanced share"))
    busiest = {layout: w.max() / share for layout, w in works.items()}
    print(f"n = {n}: busiest device / balanced share: " + ", ".join(f"{k} {v:.3f}" for k, v in busiest.items())
          + f"  (contiguous bound on efficiency: n/(2n−1) = {n / (2 * n - 1):.3f})")

# %% [markdown]
# ## 3. The lse merge, step by step
#
# Device 1 of a zigzag ring, float64, pure-JAX blocks (`reference.attend_block`): the running lse of a
# few of its rows after each step's merge (ring.1, ring.2), against the final lse of the gathered
# sequence (dotted). A row's lse can only grow: each step adds the mass of the keys it saw. Rows of the
# front chunk stop growing once the later shards bring nothing they may see.

# %%
n, L_merge, r = N, 8, 1
rng = np.random.default_rng(0)
q, k, v = (jnp.asarray(rng.standard_normal((1, n * L_merge, 2, 16))) for _ in range(3))
order = schedule.sequence_order(n * L_merge, n, "zigzag")
shard = lambda x, d: x[:, order][:, d * L_merge:(d + 1) * L_merge]  # noqa: E731
scale = 16 ** -0.5
o_run, lse_run, history = None, None, []
for s in range(n):
    src = schedule.source(r, s, n)
    part = reference.attend_block(schedule.block("zigzag", True, n, r, s), shard(q, r), shard(k, src),
                                  shard(v, src), scale=scale, attend=reference.reference_attend)
    o_run, lse_run = part if o_run is None else reference.merge(o_run, lse_run, *part)
    history.append(np.asarray(lse_run[0, 0]))
o_full, lse_full = reference.ring_attention_ref(q, k, v, causal=True)
rows = {f"row {i} ({'front' if i < L_merge // 2 else 'back'} chunk)": i for i in (0, 3, 4, 7)}
lse_final = np.asarray(lse_full[0, 0, order][r * L_merge:(r + 1) * L_merge])
display(plots.step_lines(list(range(n)), {name: [h[i] for h in history] for name, i in rows.items()},
                         final={name: lse_final[i] for name, i in rows.items()}, ylabel="running lse (head 0)",
                         title=f"zigzag, device {r} of {n}: lse after each merge"))
merge_error = float(jnp.abs(o_run - shard(o_full, r)).max())
print(f"max |merged o − o of the gathered sequence| on device {r}: {merge_error:.1e}")

# %% [markdown]
# ## 4. The traced ring on the notebook's devices
#
# `sharded_ring_attention` with the Triton kernels for both layouts, causal, GQA
# (4 query heads, 2 kv heads), forward and gradients under a random cotangent, against the float64
# oracle on the gathered sequence. The yardstick is `flash_attention`'s reference in the same dtype
# on one device (the project's budget: 1.5× its error + atol).

# %%
mesh = jax.make_mesh((N,), ("sp",))
x = testing.attention_inputs(3, 1, N * 8, N * 8, 4, 2, 16)
primals, do = (x["q"], x["k"], x["v"]), testing.random_cotangents(4, x["q"])
full = lambda q, k, v: reference.ring_attention_ref(q, k, v, causal=True)[0]  # noqa: E731
yardstick = jax.jit(lambda p, c: testing.vjp_all(full, p, c))(primals, do)
oracle = jax.jit(lambda p, c: testing.vjp_all(full, p, c))(testing.to_float64(primals), testing.to_float64(do))
comparisons = {}
for layout in schedule.LAYOUTS:
    ring = functools.partial(workbench.sharded_ring_attention, mesh=mesh, axis_name="sp", causal=True, layout=layout)
    got = jax.jit(lambda p, c: testing.vjp_all(ring, p, c))(primals, do)
    comparisons[layout] = [testing.compare(name, g, y, w) for name, g, y, w in
                           zip(("o", "dq", "dk", "dv"), (got[0], *got[1]), (yardstick[0], *yardstick[1]),
                               (oracle[0], *oracle[1]))]
    print(f"{layout}:\n" + "\n".join(map(str, comparisons[layout])))
display(plots.error_bars([c for cs in comparisons.values() for c in cs],
                         title=f"ring (Triton, {N} {WHERE}) vs float64 oracle: contiguous o…dv, zigzag o…dv"))

# %% [markdown]
# ## 5. Measured scaling
#
# `workbench bench --op ring_attention` on GPUs: weak scaling with L = 32k tokens per device (causal,
# bf16, H = 16, D = 128). Efficiency = (single-GPU flash time on the gathered sequence / n) / ring
# time; target ≥ 0.8. Records run in the interpreter are smoke tests and are not shown.

# %%
records = [json.loads(p.read_text()) for p in sorted((ROOT / "data" / "bench").glob("ring_attention-*.json"))]
measured = [rec for rec in records if not rec["interpreted"]]
if not measured:
    display(Markdown("**No GPU records of `ring_attention` in `data/bench/` yet**: the multi-GPU run has not "
                     "been recorded, so there is no measured scaling to show."))
for rec in measured:
    label = f"{rec['device_count']} × {rec['device']['kind']}, {rec['date'][:10]}"
    for pass_ in ("forward", "forward_backward"):
        rows = [row for row in rec["results"] if row["pass"] == pass_]
        sizes = sorted({row["devices"] for row in rows})
        eff = {layout: [next((row["efficiency"] for row in rows if row["devices"] == m and row["layout"] == layout),
                             np.nan) for m in sizes] for layout in schedule.LAYOUTS}
        display(plots.grouped_bars(eff, [f"{m} GPU" + ("s" if m > 1 else "") for m in sizes], ylabel="efficiency",
                                   title=f"{pass_}: {label}", reference=rec["target_efficiency"],
                                   reference_label="target"))
    print(f"{label}: " + "; ".join(f"{row['devices']} {row['layout']} {row['pass']} ring {row['ring_ms']['median']:.1f} ms "
                                     f"eff {row['efficiency']:.2f}" for row in rec["results"]))

# %% [markdown]
# ## Check
#
# Fails if the traced ring is over its error budget, the merge misses the gathered result, or the
# zigzag schedule is not balanced.

# %%
testing.assert_within_budget([c for cs in comparisons.values() for c in cs])
assert merge_error < 1e-12, merge_error
assert len(set(schedule.work("zigzag", True, N, L_work).sum(1))) == 1
print("ring attention: all checks passed")

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
# # Flash attention: masks, online softmax, gradient errors, dropout, speed
#
# `workbench.flash_attention(q, k, v, ...)` computes, per batch entry and query head,
#
# $$
# s_{ij} = \text{scale}\; q_i \cdot k_j + \text{bias}_{ij}, \quad s \leftarrow c \tanh(s / c), \quad
# \text{lse}_i = \log\Big(\sum_{j \in A_i} e^{s_{ij}} + e^{\sigma}\Big), \quad
# o_i = \sum_{j \in A_i} e^{s_{ij} - \text{lse}_i}\, v_j
# $$
#
# with $A_i$ the keys that query $i$ may see (the masks), $c$ the softcap and $\sigma$ the head's sink
# (NOTES.md (fa.1)). The Triton kernels never form the $[T_q, T_k]$ matrix: they stream key tiles
# through an online softmax (fa.2) and recompute the probabilities in the backward (fa.5–fa.10).
#
# 1. the masks, drawn from `reference.allowed_mask` and checked against what the kernel attends to;
# 2. the online softmax tile by tile, and the lse merge of two key blocks (fa.3);
# 3. gradient errors per mask and dtype against a float64 oracle (the project's error budget);
# 4. dropout: the keep-mask, and the kernel against the reference on the same mask;
# 5. speed, read from `data/bench/flash_attention-*.json` records.
#
# On a CPU the kernels run in Triton's interpreter, so every shape here is tiny. It ends with a
# check that fails if the kernel is wrong or over its error budget anywhere above.

# %%
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
from workbench.flash_attention.reference import allowed_mask, attention_ref

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display
from matplotlib_inline.backend_inline import set_matplotlib_formats

set_matplotlib_formats("png")  # show the Figure objects that workbench.plots returns
jax.config.update("jax_enable_x64", True)  # the float64 oracle
# The interpreter evaluates the kernel's log2 with NumPy, which warns on log2(0) = -inf (a row or
# padding lane that saw no key, fa.10): expected, not an error.
warnings.filterwarnings("ignore", message="divide by zero encountered in log2", category=RuntimeWarning)

print("Triton runs", "in the interpreter (CPU)" if workbench.INTERPRET else "compiled (CUDA)")
print(f"budget: kernel error <= {testing.RATIO} x reference error + atol {testing.ATOL}")
checks = {}  # name -> bool, asserted at the end

# %% [markdown]
# ## 1. Masks
#
# All masks intersect. Positions are those inside the (packed) sequence of a row, and the query
# diagonal is aligned **bottom-right**: key $j$ sits at query position $j - (L_k - L_q)$.
#
# | argument | keeps |
# |---|---|
# | `causal=True` | $j - (L_k - L_q) \le i$ |
# | `sliding_window=(left, right)` | $i - \text{left} \le j - (L_k - L_q) \le i + \text{right}$ |
# | `sliding_window=w` (int) | `(w, 0)` if causal, else `(w, w)` |
# | `segment_ids=(q_ids, kv_ids)` | equal ids |
# | `cu_seqlens_q/k` | same packed sequence |
#
# With $T_q > T_k$ and `causal`, the first $T_q - T_k$ rows see nothing: o = 0, lse = −∞, zero
# gradients (fa.10). Red shading marks such empty rows.

# %%
q_ids = jnp.array([[0] * 4 + [1] * 5 + [2] * 3])          # q segment 2 has no keys: empty rows
kv_ids = jnp.array([[0] * 3 + [1] * 6 + [3] * 3])
cu_q = jnp.array([0, 3, 3, 8, 12], jnp.int32)               # lengths 3, 0, 5, 4
cu_k = jnp.array([0, 5, 7, 11, 16], jnp.int32)              # lengths 5, 2, 4, 5

# name -> (Tq, Tk, keyword arguments of flash_attention, keyword arguments of allowed_mask)
MASKS = {
    "causal, Tq = Tk": (12, 12, dict(causal=True), dict(causal=True)),
    "causal, Tq < Tk": (6, 12, dict(causal=True), dict(causal=True)),
    "causal, Tq > Tk": (12, 6, dict(causal=True), dict(causal=True)),
    "sliding_window=3\n(not causal: (3, 3))": (12, 12, dict(sliding_window=3), dict(window=(3, 3))),
    "sliding_window=(4, 1)": (12, 12, dict(sliding_window=(4, 1)), dict(window=(4, 1))),
    "segment_ids": (12, 12, dict(segment_ids=(q_ids, kv_ids)), dict(segment_ids=(q_ids, kv_ids))),
    "cu_seqlens_q/k\n(q lengths 3,0,5,4; k 5,2,4,5)": (
        12, 16, dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k), dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)),
    "causal + window 2\n+ cu_seqlens_q/k": (
        12, 16, dict(causal=True, sliding_window=2, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k),
        dict(causal=True, window=(2, 0), cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)),
}
# the eight masks in one `jax.jit` program: op by op, a CPU would spend most of this cell compiling each
# small operation at each shape
masks = dict(zip(MASKS, jax.jit(lambda: [allowed_mask(1, Tq, Tk, **mask_args)[0]
                                         for Tq, Tk, _, mask_args in MASKS.values()])()))
display(plots.mask_grid(masks, ncols=4, title="allowed_mask: query i (rows) may attend to key j (dark)"))


# %% [markdown]
# The kernel draws the same masks. With $q = 0$ every allowed logit is 0, so
# $P_{ij} = A_{ij} / |A_i|$, and with one-hot values $v_j = e_j$ ($D = T_k$) the output row $o_i$
# *is* row $i$ of $P$: its support is the mask the Triton kernel applied.

# %%
@jax.jit  # the eight kernel calls in one XLA program, as in the masks above
def kernel_probabilities():
    """Per mask, P [Tq, Tk] as the Triton kernel applies it: rows o_i for q = 0 and one-hot values."""
    Ps = []
    for Tq, Tk, op_args, _ in MASKS.values():
        q0 = jnp.zeros((1, Tq, 1, Tk), jnp.float32)
        onehot = jnp.eye(Tk, dtype=jnp.float32)[None, :, None, :]  # [1, Tk, 1, D=Tk]
        Ps.append(workbench.flash_attention(q0, onehot, onehot, **op_args, implementation="triton")[0, :, 0, :])
    return Ps


for name, P in zip(MASKS, kernel_probabilities()):
    A = np.asarray(masks[name])
    expected = A / np.maximum(A.sum(1, keepdims=True), 1)
    checks[f"mask: {name}"] = same = bool(np.array_equal(np.asarray(P) > 0, A)) and np.allclose(P, expected, atol=1e-6)
    print(f"{name.replace(chr(10), ' '):>48s}: kernel support == allowed_mask: {same}, "
          f"empty rows {np.flatnonzero(~A.any(1)).tolist()}")

# %% [markdown]
# ## 2. The online softmax, tile by tile
#
# One query row, $T_k = 24$ keys in three tiles of 8. The kernel keeps a running max $m$, a running
# sum $l$ and an unnormalised output $a$; per tile $J_t$ (fa.2):
#
# $$
# m^{(t)} = \max\big(m^{(t-1)}, \max_{j \in J_t} s_j\big), \quad \alpha = e^{m^{(t-1)} - m^{(t)}}, \quad
# l^{(t)} = \alpha\, l^{(t-1)} + \sum_{j \in J_t} e^{s_j - m^{(t)}}, \quad
# a^{(t)} = \alpha\, a^{(t-1)} + \sum_{j \in J_t} e^{s_j - m^{(t)}} v_j,
# $$
#
# starting from $m = -\infty$, $l = 0$, $a = 0$ (a sink would start at $m = \sigma$, $l = 1$). After
# tile $t$, $a^{(t)} / l^{(t)}$ is the exact softmax over the keys seen so far, and
# $m + \log l$ their lse. Below in NumPy float64 (an illustration of the formula, not the kernel);
# keys 13 and 21 are pushed towards $q$ so that the max moves twice.

# %%
D, Tk, TILE = 8, 24, 8
rng = np.random.default_rng(0)
q_row = rng.standard_normal(D)
k_row, v_row = rng.standard_normal((Tk, D)), rng.standard_normal((Tk, D))
k_row[13] += 1.5 * q_row
k_row[21] += 3.0 * q_row
scale = D ** -0.5
s = scale * k_row @ q_row  # the row's logits

m, l, a = -np.inf, 0.0, np.zeros(D)
steps = []
for t in range(Tk // TILE):
    J = slice(t * TILE, (t + 1) * TILE)
    m_new = max(m, s[J].max())
    alpha = np.exp(m - m_new) if np.isfinite(m) else 0.0  # nothing seen yet: alpha multiplies l = a = 0
    p = np.exp(s[J] - m_new)
    l = alpha * l + p.sum()
    a = alpha * a + p @ v_row[J]
    m = m_new
    steps.append(dict(tile=t, keys=f"{J.start}-{J.stop - 1}", tile_max=s[J].max(), m=m, alpha=alpha, l=l,
                      lse=m + np.log(l), o=a / l))

dense_p = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
o_dense, lse_dense = dense_p @ v_row, np.log(np.exp(s).sum())
print(f"{'tile':>4s} {'keys':>6s} {'tile max':>9s} {'m':>8s} {'alpha':>8s} {'l':>9s} {'m + log l':>10s}"
      f"  ‖a/l − o_dense‖")
for st in steps:
    alpha = f"{st['alpha']:8.4f}" if st["tile"] else f"{'—':>8s}"  # first tile: l = a = 0, alpha unused
    print(f"{st['tile']:>4d} {st['keys']:>6s} {st['tile_max']:9.4f} {st['m']:8.4f} {alpha} "
          f"{st['l']:9.4f} {st['lse']:10.4f}  {np.linalg.norm(st['o'] - o_dense):.2e}")
print(f"dense: lse {lse_dense:.4f}; |online lse - dense lse| = {abs(steps[-1]['lse'] - lse_dense):.1e}, "
      f"max |online o - dense o| = {np.abs(steps[-1]['o'] - o_dense).max():.1e}")

# The same row through the Triton kernel (its own tiles, float32) and the reference:
qkv = [jnp.asarray(x)[None, :, None, :] for x in (q_row[None], k_row, v_row)]
# (each under `jax.jit` as in section 1: one XLA program, not op-by-op dispatch)
o_tri, lse_tri = jax.jit(workbench.flash_attention, static_argnames="return_lse")(
    *(x.astype(jnp.float32) for x in qkv), return_lse=True)
o_ref, lse_ref = jax.jit(attention_ref, static_argnames="scale")(*qkv, scale=scale)
print(f"Triton (float32) vs dense: o {testing.rms_rel(o_tri[0, 0, 0], o_dense):.1e}, "
      f"lse {abs(float(lse_tri[0, 0, 0]) - lse_dense):.1e};  reference (float64) vs dense: "
      f"o {testing.rms_rel(o_ref[0, 0, 0], o_dense):.1e}")
checks["online softmax == dense"] = bool(np.allclose(steps[-1]["o"], o_dense, rtol=1e-12, atol=1e-12)
                                         and abs(steps[-1]["lse"] - lse_dense) < 1e-12)
checks["kernel row == dense"] = testing.rms_rel(o_tri[0, 0, 0], o_dense) < 1e-5

# %%
fig, (ax0, ax1, ax2) = plt.subplots(1, 3, figsize=(14, 3.6), layout="constrained")
ax0.plot(np.arange(Tk), s, "o", ms=4, color="0.4", label="logit $s_j$")
for st in steps:
    J = np.arange(st["tile"] * TILE, (st["tile"] + 1) * TILE + 1) - 0.5
    ax0.plot(J, np.full(J.shape, st["m"]), "-", color="tab:red", lw=2,
             label="running max m" if st["tile"] == 0 else None)
for b in range(TILE, Tk, TILE):
    ax0.axvline(b - 0.5, color="k", lw=0.6, ls=":")
ax0.set(xlabel="key j", title="logits and the running max after each tile")
ax0.legend(fontsize="small")

tiles = [st["tile"] + 1 for st in steps]
ax1.plot(tiles, [st["l"] for st in steps], "o-", label="l (in units of $e^{m}$)")
ax1.plot(tiles, [st["lse"] for st in steps], "s-", label="m + log l")
ax1.axhline(lse_dense, color="k", ls="--", lw=1, label="dense lse")
ax1.set(xlabel="tiles seen", xticks=tiles, title="running sum and lse")
ax1.legend(fontsize="small")

partial = np.array([st["o"] for st in steps])  # [tiles, D]
for d in range(D):
    ax2.plot(tiles, partial[:, d], "o-", color=f"C{d}", ms=3)
    ax2.plot(tiles[-1] + 0.25, o_dense[d], "_", color=f"C{d}", ms=12, mew=2)
ax2.set(xlabel="tiles seen", xticks=tiles, title="partial output a/l per dim (ticks: dense o)")
plt.show()

# %% [markdown]
# When the max moves ($\alpha < 1$) the old sum and output are rescaled, not recomputed; the
# partial output jumps toward the value of the new dominant key. After the last tile both equal the
# dense softmax to float64 rounding.
#
# ### Merging two key blocks by lse (fa.3)
#
# Attention over disjoint key sets $K_a, K_b$ (ring attention: two devices' blocks) merges as
# $\text{lse} = \log(e^{\text{lse}_a} + e^{\text{lse}_b})$,
# $o = e^{\text{lse}_a - \text{lse}}\, o_a + e^{\text{lse}_b - \text{lse}}\, o_b$. Below: two Triton
# calls on the two halves of the keys (float32), the sinks counted in the first half only, merged,
# against one call on all keys and the float64 reference.

# %%
B, Tq, Tk, H, D = 1, 8, 32, 2, 16
kq, kk, kv, ks = jax.random.split(jax.random.key(1), 4)
q, k, v = (testing.normal(kx, shape) for kx, shape in ((kq, (B, Tq, H, D)), (kk, (B, Tk, H, D)), (kv, (B, Tk, H, D))))
sinks = testing.normal(ks, (H,))
half = Tk // 2


@jax.jit  # one XLA program for the three kernel calls, the merge and the reference
def merge_halves(q, k, v, sinks):
    """(o, lse) merged from the two halves, of one call on all keys, and of the float64 reference."""
    o_a, lse_a = workbench.flash_attention(q, k[:, :half], v[:, :half], sinks=sinks, return_lse=True)
    o_b, lse_b = workbench.flash_attention(q, k[:, half:], v[:, half:], return_lse=True)
    lse_m = jnp.logaddexp(lse_a, lse_b)                               # [B, H, Tq]
    weight = lambda lse_part: jnp.exp(lse_part - lse_m).transpose(0, 2, 1)[..., None]  # noqa: E731  -> [B, Tq, H, 1]
    o_m = weight(lse_a) * o_a + weight(lse_b) * o_b

    whole = workbench.flash_attention(q, k, v, sinks=sinks, return_lse=True)
    ref = attention_ref(*testing.to_float64((q, k, v)), scale=D ** -0.5, sinks=sinks.astype(jnp.float64))
    return (o_m, lse_m), whole, ref


(o_m, lse_m), (o_w, lse_w), (o_64, lse_64) = merge_halves(q, k, v, sinks)
for label, (o_x, lse_x), (o_y, lse_y) in (("merged vs whole (both Triton)", (o_m, lse_m), (o_w, lse_w)),
                                         ("merged vs float64 reference", (o_m, lse_m), (o_64, lse_64)),
                                         ("whole  vs float64 reference", (o_w, lse_w), (o_64, lse_64))):
    print(f"{label:<30s} o {testing.rms_rel(o_x, o_y):.1e}  lse max|Δ| {testing.max_abs(lse_x, lse_y):.1e}")
checks["lse merge == whole"] = testing.rms_rel(o_m, o_64) < 1e-5 and testing.max_abs(lse_m, lse_64) < 1e-5

# %% [markdown]
# ## 3. Gradient errors per mask and dtype
#
# The rule (`workbench.testing`): with the oracle the float64 reference on the same rounded inputs
# and cotangents,
# $\operatorname{err}(x) = \lVert x - x_{\text{oracle}} \rVert / \lVert x_{\text{oracle}} \rVert$ and
# $\operatorname{err}(\text{kernel}) \le 1.5\, \operatorname{err}(\text{reference, same dtype}) + \text{atol}$.
# Shapes: B = 2, Tq = 32, Tk = 40, H = 2 query heads on Hkv = 1 kv head (GQA), D = 16; random
# cotangents for both o and lse. Cases:
#
# * **none**; **causal** (bottom-right, Tq < Tk); **window** `(6, 3)`;
# * **segments**: q ids 0/1/2, kv ids 0/1/3, so the rows of q segment 2 are empty;
# * **softcap+sinks+bias**: softcap 2 (inputs × 2 so the tanh bends), sinks `[H]`, bias `[1, H, Tq, Tk]`
#   broadcast over the batch (its gradient is summed over B).

# %%
B, Tq, Tk, H, HKV, D = 2, 32, 40, 2, 1, 16
seg_q = jnp.broadcast_to(jnp.array([0] * 12 + [1] * 12 + [2] * 8), (B, Tq))
seg_k = jnp.broadcast_to(jnp.array([0] * 14 + [1] * 16 + [3] * 10), (B, Tk))
CASES = {  # name -> (static options, which extra differentiable inputs, input magnitude)
    "none": ({}, (), 1.0),
    "causal": (dict(causal=True), (), 1.0),
    "window": (dict(sliding_window=(6, 3)), (), 1.0),
    "segments": (dict(segment_ids=(seg_q, seg_k)), (), 1.0),
    "softcap+sinks+bias": (dict(softcap=2.0), ("sinks", "bias"), 2.0),
}


def inputs(seed, dtype, extras, magnitude):
    """Differentiable inputs (q, k, v and the extras), rounded to dtype."""
    kx = jax.random.split(jax.random.key(seed), 5)
    x = dict(q=magnitude * testing.normal(kx[0], (B, Tq, H, D)),
             k=magnitude * testing.normal(kx[1], (B, Tk, HKV, D)), v=testing.normal(kx[2], (B, Tk, HKV, D)))
    if "sinks" in extras:
        x["sinks"] = testing.normal(kx[3], (H,))
    if "bias" in extras:
        x["bias"] = testing.normal(kx[4], (1, H, Tq, Tk))
    return {n: a.astype(dtype) for n, a in x.items()}


def outputs_and_grads(x, cts, options, implementation):
    """{"o", "lse", "dq", "dk", "dv", ("dsinks", "dbias")} of flash_attention for cotangents (do, dlse)."""
    def fn(x):
        return workbench.flash_attention(**x, **options, return_lse=True, implementation=implementation)

    (o, lse), pullback = jax.vjp(fn, x)
    (grads,) = pullback(cts)
    return {"o": o, "lse": lse, **{"d" + n: g for n, g in grads.items()}}


@functools.partial(jax.jit, static_argnums=2)
def all_cases(xs, cts, implementation):
    """{case: outputs_and_grads} for the inputs xs[case] and cotangents cts[case] of every case, under
    `jax.jit` as one XLA program per implementation and dtype: on a CPU compiling is most of this cell's
    time, and one program holding the five cases compiles about twice as fast as five programs (and
    much faster than op-by-op dispatch)."""
    return {case: outputs_and_grads(xs[case], cts[case], options, implementation)
            for case, (options, _, _) in CASES.items()}


results, budget = {}, []
for dtype in (jnp.float32, jnp.bfloat16):
    xs, cts = {}, {}
    for seed, (case, (options, extras, magnitude)) in enumerate(CASES.items()):
        xs[case] = inputs(seed, dtype, extras, magnitude)
        o_shape, lse_shape = jax.eval_shape(lambda x: workbench.flash_attention(**x, **options, return_lse=True,
                                                                               implementation="reference"), xs[case])
        cts[case] = testing.random_cotangents(100 + seed, (o_shape, lse_shape))
    kernel = all_cases(xs, cts, "triton")
    ref = all_cases(xs, cts, "reference")
    oracle = all_cases(testing.to_float64(xs), testing.to_float64(cts), "reference")
    for case, (_, extras, _) in CASES.items():
        results[case, dtype.__name__] = kernel[case], ref[case], oracle[case]
        # lse is -inf on empty rows in all three (not an RMS); the gradients below include its cotangent.
        names = ["o", "dq", "dk", "dv", *("d" + n for n in extras)]
        budget += [testing.compare(f"{case}: {n}", kernel[case][n], ref[case][n], oracle[case][n]) for n in names]
        lse_ok = bool(jnp.array_equal(jnp.isinf(kernel[case]["lse"]), jnp.isinf(oracle[case]["lse"])))
        fin = jnp.isfinite(oracle[case]["lse"])
        checks[f"lse {case} {dtype.__name__}"] = lse_ok and testing.max_abs(
            kernel[case]["lse"][fin], oracle[case]["lse"][fin]) < (1e-5 if dtype == jnp.float32 else 5e-2)

print(f"{'case: output':>28s} {'dtype':>8s} {'kernel':>9s} {'reference':>9s} {'ratio':>6s} {'tolerance':>9s}")
for c in budget:
    print(f"{c.name:>28s} {c.dtype:>8s} {c.kernel_err:9.2e} {c.reference_err:9.2e} {c.ratio:6.2f} {c.tolerance:9.2e}"
          f"  {'PASS' if c.ok else 'FAIL'}")

# %%
for dtype_name in ("float32", "bfloat16"):
    display(plots.error_bars([c for c in budget if c.dtype == dtype_name],
                             title=f"{dtype_name}: RMS-relative error vs the float64 oracle, per case and output"))

# %% [markdown]
# The kernel (blue) should sit at or below the reference (orange); the black tick is the budget.
# In float32 both are at rounding level; in bfloat16 the error is set by rounding P and the
# outputs to 8 mantissa bits, in the kernel and the reference alike.
#
# Where the error of $\mathrm{d}q$ sits, for the softcap+sinks+bias case in bfloat16: each cell is
# $\max |\mathrm{d}q - \mathrm{d}q_{\text{oracle}}|$ over batch and heads at one query position and
# feature dim (log scale, each map its own), for the kernel and for the reference. A bug shows as a
# stripe (a tile boundary, a masked range) that the reference does not have.

# %%
kernel, ref, oracle = results["softcap+sinks+bias", "bfloat16"]
display(plots.error_map(kernel["dq"], oracle["dq"], by="dim",
                        title="dq, softcap+sinks+bias, bfloat16: |Triton − float64 oracle|"))
display(plots.error_map(ref["dq"], oracle["dq"], by="dim",
                        title="dq, softcap+sinks+bias, bfloat16: |reference (bfloat16) − float64 oracle|"))

# %% [markdown]
# ## 4. Dropout
#
# Dropout acts on the normalised probabilities, kept entries scaled by $1/(1-r)$ (fa.11). The
# keep-mask is a hash of (seed, b, h, i, j) (`dropout.py`), so the kernels recompute it per tile in
# the forward and backward, and `workbench.dropout_keep_mask(key, (B, H, Tq, Tk), rate)` returns the
# same mask for the reference. Rate 0.25, causal, B = 1, H = 2, T = 16:

# %%
B, T, H, D, RATE = 1, 16, 2, 16, 0.25
key = jax.random.key(7)
keep = workbench.dropout_keep_mask(key, (B, H, T, T), RATE)
causal = allowed_mask(B, T, T, causal=True)[0]
display(plots.mask_grid({**{f"keep-mask, head {h}": keep[0, h] for h in range(H)},
                         "causal & keep, head 0": causal & keep[0, 0]}, ncols=3,
                        title=f"dropout_keep_mask(key, {(B, H, T, T)}, {RATE})"))
print(f"fraction kept: {float(keep.mean()):.3f} (expected {1 - RATE})")

# %% [markdown]
# The kernel with `dropout_rate=0.25, dropout_key=key` against `attention_ref` given that mask
# (`dropout_mask=keep`), in float32 against the float64 oracle, outputs and gradients; a different
# key gives a different output, so agreement is not an accident of the mask. A row whose allowed
# entries are all dropped (red above) gets o = 0, while its lse (computed before dropout) stays finite.

# %%
kx = jax.random.split(jax.random.key(8), 4)
x = {n: testing.normal(kk, (B, T, H, D)) for n, kk in zip("qkv", kx)}
do = testing.normal(kx[3], (B, T, H, D))


def dropout_run(x, do, implementation=None, key=key):
    """o and (dq, dk, dv): the public op with dropout, or (implementation=None) attention_ref on `keep`."""
    if implementation is None:
        fn = lambda q, k, v: attention_ref(q, k, v, scale=D ** -0.5, causal=True, dropout_rate=RATE,  # noqa: E731
                                           dropout_mask=keep)[0]
    else:
        fn = lambda q, k, v: workbench.flash_attention(q, k, v, causal=True, dropout_rate=RATE,  # noqa: E731
                                                       dropout_key=key, implementation=implementation)
    o, pullback = jax.vjp(fn, x["q"], x["k"], x["v"])
    return dict(zip(("o", "dq", "dk", "dv"), (o, *pullback(do))))


@jax.jit  # the kernel, the reference and the float64 oracle in one XLA program
def dropout_runs(x, do):
    return (dropout_run(x, do, "triton"), dropout_run(x, do, "reference"),
            dropout_run(testing.to_float64(x), do.astype(jnp.float64)))


drop_kernel, drop_ref, drop_oracle = dropout_runs(x, do)
dropout_table = [testing.compare(f"dropout: {n}", drop_kernel[n], drop_ref[n], drop_oracle[n]) for n in drop_kernel]
print("\n".join(str(c) for c in dropout_table))
other = workbench.flash_attention(x["q"], x["k"], x["v"], causal=True, dropout_rate=RATE,
                                  dropout_key=jax.random.key(9))
no_drop = workbench.flash_attention(x["q"], x["k"], x["v"], causal=True)
print(f"o with another key vs oracle: {testing.rms_rel(other, drop_oracle['o']):.2f};  "
      f"o without dropout vs oracle: {testing.rms_rel(no_drop, drop_oracle['o']):.2f}")
checks["another dropout key differs"] = testing.rms_rel(other, drop_oracle["o"]) > 0.1
o_drop, lse_drop = workbench.flash_attention(x["q"], x["k"], x["v"], causal=True, dropout_rate=RATE,
                                             dropout_key=key, return_lse=True)
all_dropped = ~(causal & keep[0, 0]).any(-1)  # head 0
print(f"head 0, rows with every allowed entry dropped: {np.flatnonzero(all_dropped).tolist()}; there "
      f"max |o| = {float(jnp.abs(o_drop[0, all_dropped, 0]).max(initial=0.0)):.1e}, "
      f"lse = {[round(float(v), 3) for v in lse_drop[0, 0, all_dropped]]}")
checks["all-dropped rows: o = 0, lse finite"] = bool((o_drop[0, all_dropped, 0] == 0).all()
                                                     and jnp.isfinite(lse_drop[0, 0, all_dropped]).all())

# %% [markdown]
# ## 5. Speed (records from a GPU)
#
# Timings are not taken here: `workbench bench` writes them on a GPU to
# `data/bench/<op>-<UTC time>.json` (fields: `workbench/bench.py`). Per record: median ms of the
# Triton kernel, the reference and each peer (`dpa[cudnn]`, `dpa[xla]`: `jax.nn.dot_product_attention`
# with that implementation), per shape and pass, Triton's TFLOP/s, and the Triton median over the
# best peer's from the same run (< 1: faster).
# Records made in the interpreter (`"interpreted": true`) are listed but not tabulated.

# %%
def device_label(device):
    if isinstance(device, dict):
        return str(device.get("kind") or device.get("name") or "?")
    return str(device or "?")


def speed_table(record):
    """Markdown table of one bench record: median ms per implementation, per shape and pass, Triton's
    TFLOP/s, and Triton / best peer (the record's ratio_to_best_peer, else recomputed from the medians)."""
    cells, kinds = {}, {}
    for r in record.get("results", []):
        impl, status = r["implementation"], r.get("status", "ok")
        ms = (r.get("ms") or {}).get("median")
        kinds[impl] = r.get("kind", "kernel")
        cell = cells.setdefault((" ".join(f"{k}={v}" for k, v in r["shape"].items()), r["pass"]),
                                {"ms": {}, "peers": [], "ratio": None})
        cell["ms"][impl] = "—" if ms is None else f"{ms:.3f}" + ("" if status == "ok" else f" ({status})")
        if kinds[impl] == "peer" and status == "ok" and ms:
            cell["peers"].append(ms)
        if impl == "triton":
            cell["ratio"] = r.get("ratio_to_best_peer")
            cell["triton"] = ms if status == "ok" else None
            cell["tflops"] = r.get("tflops_per_s")
    impls = sorted(kinds, key=lambda i: (i != "triton", kinds[i] != "peer", i))  # triton, peers, reference
    short = lambda i: i.replace("jax.nn.dot_product_attention", "dpa")  # noqa: E731
    lines = ["| shape | pass | " + " | ".join(f"{short(i)} ms" for i in impls)
             + " | Triton TFLOP/s | Triton / best peer |", "|---" * (len(impls) + 4) + "|"]
    for (shape, pass_), c in cells.items():
        ratio = c["ratio"]
        if ratio is None and c["peers"] and c.get("triton"):
            ratio = c["triton"] / min(c["peers"])
        tflops = "—" if c.get("tflops") is None else f"{c['tflops']:.0f}"
        lines.append(f"| {shape} | {pass_} | " + " | ".join(c["ms"].get(i, "—") for i in impls)
                     + f" | {tflops} | {'—' if ratio is None else f'{ratio:.2f}'} |")
    return "\n".join(lines)


paths = sorted((ROOT / "data" / "bench").glob("flash_attention-*.json"))
records = []
for path in paths:
    try:
        records.append((path.name, json.loads(path.read_text())))
    except (OSError, json.JSONDecodeError) as exc:
        print(f"skipped {path.name}: {exc}")

if not records:
    print("No flash_attention benchmark record in data/bench/ yet: nothing to show. "
          "On a GPU, `workbench bench --op flash_attention --peers` writes one.")
for name, rec in records:
    where = (f"{device_label(rec.get('device'))}, {rec.get('date', '?')}, shape set {rec.get('shape_set')}, "
             f"dtype {rec.get('dtype')}")
    if rec.get("interpreted"):
        print(f"{name}: interpreter run ({where}): timings not meaningful, not shown")
        continue
    display(Markdown(f"**{name}**: {where}\n\n{speed_table(rec)}"))

# %% [markdown]
# ## Check
#
# Every mask drawn by the kernel equals `allowed_mask`; the online softmax and the lse merge equal
# the dense result; every output and gradient of sections 3 and 4 is finite and within budget
# (kernel ≤ 1.5 × reference error + atol against the float64 oracle); lse is −inf exactly on the
# oracle's empty rows.

# %%
failed = [name for name, ok in checks.items() if not ok]
all_budget = budget + dropout_table
over = [c for c in all_budget if not c.ok]
print(f"{len(checks)} checks, {len(failed)} failed; {len(all_budget)} budget comparisons, {len(over)} over; "
      f"worst kernel/reference ratio {max(c.ratio for c in all_budget if c.reference_err > 0):.2f}")
assert not failed, f"failed: {failed}"
testing.assert_within_budget(all_budget)

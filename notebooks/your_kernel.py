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
# # Your own kernel: retention, from the recurrence to a proven Triton kernel
#
# The other notebooks look at workbench's kernels. This one builds a new kernel the way a researcher
# would, with nothing but the public toolkit (docs/API.md, "Toolkit"):
#
# 1. the recurrence and its backward, derived by hand;
# 2. a pure-JAX reference, written to be read;
# 3. a Triton forward kernel and a Triton backward kernel, launched with `workbench.triton_call`
#    (compiled on a GPU, run in Triton's interpreter on a CPU: this notebook runs in CI on a CPU);
# 4. a `jax.custom_vjp` tying them together;
# 5. `workbench.testing.check`: every output and gradient against a float64 oracle, in float32 and
#    bfloat16;
# 6. one Hypothesis property over shapes and decays (`workbench.strategies`);
# 7. the gradient-error picture (`workbench.plots.report_errors`).
#
# The kernel is **retention** (RetNet's recurrent form): linear attention whose state decays by a fixed
# factor γ_h ∈ (0, 1) per head, γ_h = exp(λ_h) with a log-decay λ_h ≤ 0. Per batch element and head,
# with q_t, k_t ∈ ℝ^K and v_t ∈ ℝ^V,
#
# $$S_t = \gamma\, S_{t-1} + k_t v_t^\top \quad (S_0 = 0), \qquad o_t = S_t^\top (\text{scale}\cdot q_t).$$
#
# The decays are fixed hyperparameters in RetNet (not trained), so the gradients are those of q, k, v.

# %%
import functools
import json
import pathlib
import sys

# The package is not installed: put the repository root (the folder holding workbench/) on the path.
ROOT = next(p for p in (pathlib.Path.cwd(), *pathlib.Path.cwd().parents)
            if (p / "workbench" / "__init__.py").exists())
sys.path.insert(0, str(ROOT))

import workbench  # first: decides compiled vs interpreted Triton before triton is imported
from workbench import plots, strategies, testing

import jax
import jax.numpy as jnp
import triton
import triton.language as tl
from hypothesis import HealthCheck, Phase, given, settings

print("Triton runs", "in the interpreter (CPU)" if workbench.INTERPRET else "compiled (CUDA)")

# %% [markdown]
# ## 1. The backward, by hand
#
# Write dS_t for the gradient of the loss with respect to S_t. S_t reaches the loss through o_t and
# through S_{t+1} = γ S_t + …, so, from the last step down (dS_{T+1} = 0),
#
# $$dS_t = \gamma\, dS_{t+1} + \text{scale}\cdot q_t\, do_t^\top .$$
#
# Then each input's gradient is read off the step that uses it:
#
# $$dq_t = \text{scale}\cdot S_t\, do_t, \qquad dk_t = dS_t\, v_t, \qquad dv_t = dS_t^\top k_t .$$
#
# dq needs the forward states S_t (a forward sweep again), dk and dv the reverse states dS_t (a
# reverse sweep): the backward kernel does both, one after the other, and never stores a state.
#
# Had we wanted the decay's gradient, unrolling o_t = scale Σ_{s≤t} γ^{t−s} (q_t·k_s) v_s gives
# dλ = Σ_{s≤t} (t − s) γ^{t−s} scale (q_t·k_s)(do_t·v_s), and since q_t·dq_t and k_s·dk_s hold the same
# terms summed over s and over t,
#
# $$\frac{\partial L}{\partial \lambda} = \sum_t t\,(q_t\cdot dq_t - k_t\cdot dk_t).$$
#
# A formula in a derivation is a claim; the next cell checks these in float64 against `jax.vjp` of the
# reference below.

# %% [markdown]
# ## 2. The reference
#
# A `lax.scan` over time, float32 state, output in q's dtype, exactly the math above; JAX's autodiff gives
# its backward. It is the yardstick (run in the kernel's dtype) and, run in float64, the oracle.

# %%
def retention_reference(q, k, v, log_decay, scale=None):
    """o [B, T, H, V] of retention: q, k [B, T, H, K], v [B, T, H, V], log_decay [H] (≤ 0)."""
    B, T, H, K = q.shape
    scale = K ** -0.5 if scale is None else scale
    acc = jnp.promote_types(q.dtype, jnp.float32)
    gamma = jnp.exp(log_decay.astype(acc))[None, :, None, None]  # [1, H, 1, 1]

    def step(S, x):
        q_t, k_t, v_t = (y.astype(acc) for y in x)  # [B, H, K], [B, H, K], [B, H, V]
        S = gamma * S + k_t[..., :, None] * v_t[..., None, :]
        return S, jnp.einsum("bhk,bhkv->bhv", scale * q_t, S, precision="highest")

    S0 = jnp.zeros((B, H, K, v.shape[-1]), acc)
    _, o = jax.lax.scan(step, S0, tuple(jnp.moveaxis(x, 1, 0) for x in (q, k, v)))
    return jnp.moveaxis(o, 0, 1).astype(q.dtype)


# The derivation, checked in float64 on a small problem: the hand-written dq, dk, dv and dλ against
# jax.vjp of the reference.
with jax.enable_x64(True):
    keys = jax.random.split(jax.random.key(0), 5)
    B, T, H, K, V = 2, 9, 3, 4, 5
    q, k = (jax.random.normal(kk, (B, T, H, K), jnp.float64) for kk in keys[:2])
    v, do = (jax.random.normal(kk, (B, T, H, V), jnp.float64) for kk in keys[2:4])
    lam = -jax.random.uniform(keys[4], (H,), jnp.float64, 0.05, 1.0)
    scale = K ** -0.5
    _, pullback = jax.vjp(retention_reference, q, k, v, lam)
    dq_ad, dk_ad, dv_ad, dlam_ad = pullback(do)

    gamma = jnp.exp(lam)[None, :, None, None]
    S, dq = jnp.zeros((B, H, K, V)), []
    for t in range(T):  # forward sweep: S_t, then dq_t = scale S_t do_t
        S = gamma * S + k[:, t, :, :, None] * v[:, t, :, None, :]
        dq.append(scale * jnp.einsum("bhkv,bhv->bhk", S, do[:, t]))
    dS, dk, dv = jnp.zeros((B, H, K, V)), [None] * T, [None] * T
    for t in reversed(range(T)):  # reverse sweep: dS_t, then dk_t = dS_t v_t, dv_t = dS_tᵀ k_t
        dS = gamma * dS + scale * q[:, t, :, :, None] * do[:, t, :, None, :]
        dk[t] = jnp.einsum("bhkv,bhv->bhk", dS, v[:, t])
        dv[t] = jnp.einsum("bhkv,bhk->bhv", dS, k[:, t])
    dq, dk, dv = (jnp.stack(x, axis=1) for x in (dq, dk, dv))
    steps = jnp.arange(T, dtype=jnp.float64)[None, :, None]
    dlam = jnp.sum(steps * (jnp.sum(q * dq, -1) - jnp.sum(k * dk, -1)), axis=(0, 1))
    gaps = {name: float(testing.rms_rel(mine, ad)) for name, mine, ad in
            (("dq", dq, dq_ad), ("dk", dk, dk_ad), ("dv", dv, dv_ad), ("dλ", dlam, dlam_ad))}
print("derivation vs autodiff, float64 (RMS-relative):", {n: f"{g:.1e}" for n, g in gaps.items()})
assert all(g < 1e-12 for g in gaps.values()), gaps

# %% [markdown]
# ## 3. The Triton kernels
#
# One program per (batch element, head), the whole [K, V] state in registers (K, V ≤ 64 here; a larger
# head would split V over programs), float32 state, inputs read in their dtype and widened. Tensors are
# `[B, T, H, ·]` row-major, so the row of step t is `(b·T + t)·H + h`. The backward is the two sweeps of
# section 1. Names follow the symbols: `b_S` is S in registers, `b_dS` is dS.

# %%
@triton.jit
def retention_fwd_kernel(q, k, v, log_decay, o, scale, T, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                         BK: tl.constexpr, BV: tl.constexpr):
    i_bh = tl.program_id(0)
    i_b, i_h = i_bh // H, i_bh % H
    o_k, o_v = tl.arange(0, BK), tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    gamma = tl.exp(tl.load(log_decay + i_h).to(tl.float32))
    b_S = tl.zeros([BK, BV], tl.float32)
    for t in range(0, T):
        row = (i_b * T + t) * H + i_h
        b_q = tl.load(q + row * K + o_k, mask=m_k, other=0.0).to(tl.float32) * scale  # [BK]
        b_k = tl.load(k + row * K + o_k, mask=m_k, other=0.0).to(tl.float32)  # [BK]
        b_v = tl.load(v + row * V + o_v, mask=m_v, other=0.0).to(tl.float32)  # [BV]
        b_S = gamma * b_S + b_k[:, None] * b_v[None, :]  # S_t = γ S_{t−1} + k_t v_tᵀ
        b_o = tl.sum(b_S * b_q[:, None], axis=0)  # o_t = S_tᵀ (scale q_t)
        tl.store(o + row * V + o_v, b_o.to(o.dtype.element_ty), mask=m_v)


@triton.jit
def retention_bwd_kernel(q, k, v, log_decay, do, dq, dk, dv, scale, T, H: tl.constexpr, K: tl.constexpr,
                         V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    i_bh = tl.program_id(0)
    i_b, i_h = i_bh // H, i_bh % H
    o_k, o_v = tl.arange(0, BK), tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    gamma = tl.exp(tl.load(log_decay + i_h).to(tl.float32))
    b_S = tl.zeros([BK, BV], tl.float32)
    for t in range(0, T):  # forward sweep: dq_t = scale S_t do_t
        row = (i_b * T + t) * H + i_h
        b_k = tl.load(k + row * K + o_k, mask=m_k, other=0.0).to(tl.float32)
        b_v = tl.load(v + row * V + o_v, mask=m_v, other=0.0).to(tl.float32)
        b_do = tl.load(do + row * V + o_v, mask=m_v, other=0.0).to(tl.float32)
        b_S = gamma * b_S + b_k[:, None] * b_v[None, :]
        b_dq = tl.sum(b_S * b_do[None, :], axis=1) * scale
        tl.store(dq + row * K + o_k, b_dq.to(dq.dtype.element_ty), mask=m_k)
    b_dS = tl.zeros([BK, BV], tl.float32)
    for i in range(0, T):  # reverse sweep: dS_t = γ dS_{t+1} + scale q_t do_tᵀ; dk_t = dS_t v_t; dv_t = dS_tᵀ k_t
        row = (i_b * T + T - 1 - i) * H + i_h
        b_q = tl.load(q + row * K + o_k, mask=m_k, other=0.0).to(tl.float32) * scale
        b_k = tl.load(k + row * K + o_k, mask=m_k, other=0.0).to(tl.float32)
        b_v = tl.load(v + row * V + o_v, mask=m_v, other=0.0).to(tl.float32)
        b_do = tl.load(do + row * V + o_v, mask=m_v, other=0.0).to(tl.float32)
        b_dS = gamma * b_dS + b_q[:, None] * b_do[None, :]
        tl.store(dk + row * K + o_k, tl.sum(b_dS * b_v[None, :], axis=1).to(dk.dtype.element_ty), mask=m_k)
        tl.store(dv + row * V + o_v, tl.sum(b_dS * b_k[:, None], axis=0).to(dv.dtype.element_ty), mask=m_v)


# %% [markdown]
# ## 4. The op: launches and a custom VJP
#
# `workbench.triton_call` has jax-triton's contract: arrays positional in the kernel's order, outputs
# appended (`out_shape`), scalars and constexprs as keywords. `triton_call` has no autodiff rule, so the op
# is a `jax.custom_vjp` whose backward launches the backward kernel. Bad input gets a `ValueError`
# naming the argument and the shapes, before anything is traced.

# %%
def _sizes(q, k, v, log_decay):
    if q.ndim != 4 or k.shape != q.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"q, k, v: expected q, k [B, T, H, K] and v [B, T, H, V], got {q.shape}, {k.shape}, "
                         f"{v.shape}")
    if log_decay.shape != (q.shape[2],):
        raise ValueError(f"log_decay: expected shape [H] = ({q.shape[2]},), got {log_decay.shape}")
    B, T, H, K = q.shape
    V = v.shape[-1]
    return B, T, H, K, V, dict(T=T, H=H, K=K, V=V, BK=triton.next_power_of_2(K), BV=triton.next_power_of_2(V))


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def retention(q, k, v, log_decay, scale=None):
    """Retention through the Triton kernels: o [B, T, H, V] in q's dtype (log_decay is not trained)."""
    return _forward(q, k, v, log_decay, scale)[0]


def _forward(q, k, v, log_decay, scale):
    B, T, H, K, V, dims = _sizes(q, k, v, log_decay)
    scale = K ** -0.5 if scale is None else scale
    o = workbench.triton_call(q, k, v, log_decay, kernel=retention_fwd_kernel, grid=(B * H,),
                              out_shape=jax.ShapeDtypeStruct((B, T, H, V), q.dtype), scale=scale, **dims)
    return o, (q, k, v, log_decay)


def _backward(scale, residuals, do):
    q, k, v, log_decay = residuals
    B, T, H, K, V, dims = _sizes(q, k, v, log_decay)
    scale = K ** -0.5 if scale is None else scale
    dq, dk, dv = workbench.triton_call(
        q, k, v, log_decay, do.astype(q.dtype), kernel=retention_bwd_kernel, grid=(B * H,),
        out_shape=[jax.ShapeDtypeStruct(x.shape, x.dtype) for x in (q, k, v)], scale=scale, **dims)
    return dq, dk, dv, jnp.zeros_like(log_decay)  # the decay is a fixed hyperparameter


retention.defvjp(lambda q, k, v, log_decay, scale: _forward(q, k, v, log_decay, scale), _backward)


def inputs(seed, B=1, T=32, H=2, K=16, V=16, dtype=jnp.float32):
    """q, k, v (normal, in `dtype`) and per-head log-decays log(1 − 2^(−2−h)), as RetNet spaces them."""
    keys = jax.random.split(jax.random.key(seed), 3)
    q, k = (testing.normal(kk, (B, T, H, K), dtype) for kk in keys[:2])
    v = testing.normal(keys[2], (B, T, H, V), dtype)
    return q, k, v, jnp.log1p(-(2.0 ** -(2.0 + jnp.arange(H, dtype=jnp.float32))))


o = jax.jit(retention)(*inputs(0))
print("o", o.shape, o.dtype, "matches the reference:",
      bool(jnp.allclose(o, retention_reference(*inputs(0)), rtol=1e-5, atol=1e-5)))

# %% [markdown]
# ## 5. Proven: `workbench.testing.check`
#
# `check(fn, reference, args)` runs the kernel and the reference in the arguments' dtype and the reference
# in float64 (the oracle), with random cotangents, and holds every output and gradient to
# err(kernel) ≤ 1.5 × err(reference in the same dtype) + atol. `argnums=(0, 1, 2)`: the decay is not
# differentiated. The table prints both errors and the allowance, so a pass says by how much.

# %%
reports = {}
for dtype in (jnp.float32, jnp.bfloat16):
    reports[dtype] = testing.check(retention, retention_reference, inputs(1, dtype=dtype), argnums=(0, 1, 2),
                                   title=f"retention, {jnp.dtype(dtype).name}, B=1 T=32 H=2 K=V=16")
    print(reports[dtype], end="\n\n")
    reports[dtype].raise_if_failed()

# %% [markdown]
# A kernel that is wrong fails. Here the backward's dk is 5 % too large — invisible to the forward, and
# to a loose `allclose` on gradients of the order of one:

# %%
@jax.custom_vjp
def off_by_five_percent(q, k, v, log_decay):
    """The same forward; the VJP below scales dk by 1.05."""
    return retention(q, k, v, log_decay)


def _off_bwd(residuals, do):
    dq, dk, dv, dl = _backward(None, residuals, do)
    return dq, dk * 1.05, dv, dl


off_by_five_percent.defvjp(lambda q, k, v, log_decay: _forward(q, k, v, log_decay, None), _off_bwd)
broken = testing.check(off_by_five_percent, retention_reference, inputs(1, dtype=jnp.bfloat16), argnums=(0, 1, 2))
print(broken)
assert broken["out"].ok and not broken["dk"].ok

# %% [markdown]
# ## 6. A property over shapes and decays
#
# `workbench.strategies` draws sizes from short lists that include sizes that fill no power-of-two block
# (T = 7, K = 12), log-decays ≤ 0 of a drawn strength, and a seed, so one number in a failure report
# reproduces the inputs. Few examples here (each runs the interpreter); the test suite's `dev` profile
# runs sixty.

# %%
few = settings(max_examples=4, deadline=None, derandomize=True, database=None,
               phases=[Phase.explicit, Phase.generate], suppress_health_check=[HealthCheck.too_slow])


@few
@given(strategies.shapes(B=strategies.batches, T=strategies.seq_lens, H=strategies.heads, K=strategies.head_dims,
                         V=strategies.head_dims),
       strategies.log_gates((3,), strength=strategies.gate_strengths), strategies.seeds, strategies.kernel_dtypes)
def test_retention_matches_the_oracle(shape, decays, seed, dtype):
    q, k, v, _ = inputs(seed, shape["B"], min(shape["T"], 33), shape["H"], shape["K"], shape["V"], dtype)
    log_decay = jnp.minimum(decays[:shape["H"]], -1e-3)  # γ < 1
    testing.check(retention, retention_reference, (q, k, v, log_decay), argnums=(0, 1, 2),
                  seed=seed).raise_if_failed()


test_retention_matches_the_oracle()
print("property held on every drawn example")

# %% [markdown]
# ## 7. The gradient-error picture
#
# How do the errors grow with the sequence length? One `check` per T in bfloat16, drawn with
# `plots.report_errors`: kernel solid, reference dashed, allowance dotted. A kernel that accumulates its
# state in bfloat16, or forgets to widen before the reduction, shows up here as a solid line leaving the
# dashed one.

# %%
lengths = [8, 16, 32, 64]
sweep = [testing.check(retention, retention_reference, inputs(2, T=T, dtype=jnp.bfloat16), argnums=(0, 1, 2))
         for T in lengths]
plots.report_errors(sweep, x=lengths, xlabel="T", names=["out", "dq", "dk", "dv"],
                    title="retention in bfloat16 against the float64 oracle")

# %% [markdown]
# ## Speed
#
# Speed is measured on a GPU by a bench run, never here (the interpreter's timings mean nothing). A
# record under `data/bench/` named `retention-*.json` would be read and shown below, labelled with its
# device and date.

# %%
records = sorted((ROOT / "data" / "bench").glob("retention-*.json"))
for path in records:
    record = json.loads(path.read_text())
    print(path.name, record["device"]["kind"], record["date"])
if not records:
    print("no GPU record of this kernel in data/bench/")

# %% [markdown]
# ## The check that ends the notebook
#
# Every step above asserted what it showed; this last cell fails if any report of the sweep is over
# budget.

# %%
assert all(r.ok for r in sweep) and all(r.ok for r in reports.values())
print("retention: forward and backward within the error budget in float32 and bfloat16, T up to 64")

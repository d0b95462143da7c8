"""Triton kernels of fused recurrent (gated) linear attention. Equation tags refer to NOTES.md.

Both kernels see packed sequences (`[1, total_T, H, ·]` with `cu_seqlens`) and one combined
per-key log-gate `gk` (the glue folds `g` and `g_gamma` into it, NOTES.md (rec.2)); `gv` is the
per-value log-gate. The state lives in registers for the whole sweep.

* forward: one program per (value block, sequence·head). Blocks over V need no reduction: each
  program owns whole rows of `o`.
* backward: one program per (key block, sequence·head). Blocks over K keep dq, dk and the per-key
  gate gradient complete in each program; dv and the per-value gate gradient are partial sums over
  key blocks, reduced by the caller.

A step of the recurrence is bound by memory latency, not arithmetic: each sweep walks time in
groups of four steps and issues the loads of the whole group before its first step, so one memory
round trip serves four steps. Rows past the end of a sequence load as zeros, which makes their step
a no-op (decay exp(0) = 1, k vᵀ = 0), and are not stored.

When a gate is present the backward accumulates in float64: its gate gradients come from the
reverse-cumulative-sum identity (rec.8, rec.9), whose terms cancel over the whole sequence, so
float32 terms leave an error growing like √T (NOTES.md, "Precision of the identity"). The per-step
terms cross from sweep 1 to sweep 2 through memory as a float32 (hi, lo) pair.
"""

import triton
import triton.language as tl

from ..launch import given
from ..tl_helpers import LOG2E, sequence_bounds, time_index


def _fwd_configs():
    return [triton.Config({"BV": bv}, num_warps=w) for bv in (16, 32, 64) for w in (1, 2, 4)]


def _prune_fwd(configs, named_args, **_):
    """Keep block sizes that fit V, and state tiles [BK, BV] that fit in registers."""
    K, V = named_args["q"].shape[-1], named_args["v"].shape[-1]
    BK, BVmax = triton.next_power_of_2(K), triton.next_power_of_2(V)
    kept = [c for c in configs if c.kwargs["BV"] <= BVmax and BK * c.kwargs["BV"] <= 8192]
    return kept or [min(configs, key=lambda c: c.kwargs["BV"])]


# ----------------------------------------------------------------------------- shared pieces


@triton.jit
def _decay(b_s, b_gk, b_gv, USE_GK: tl.constexpr, USE_GV: tl.constexpr):
    """(rec.1) b_s ⊙ exp(gk)[:, None] ⊙ exp(gv)[None, :] for whichever gates are present.

    The exponentials are float32 whatever the dtype of b_s: both backward sweeps use the same
    rounded factors, so the identity (rec.8) still holds exactly for them, and float64 exp is slow.
    """
    if USE_GK:
        b_s *= tl.exp2(b_gk.to(tl.float32) * LOG2E).to(b_s.dtype)[:, None]
    if USE_GV:
        b_s *= tl.exp2(b_gv.to(tl.float32) * LOG2E).to(b_s.dtype)[None, :]
    return b_s


@triton.jit
def _load_row(q, k, v, gk, gv, do, t, ok, i_h, o_k, o_v, m_k, m_v,
              H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, ACC: tl.constexpr,
              USE_GK: tl.constexpr, USE_GV: tl.constexpr, USE_DO: tl.constexpr):
    """Row t of q, k, v, the gates and (USE_DO) do, as ACC; zeros when `ok` is false."""
    p_k = (t * H + i_h) * K  # scalar row offsets: the vector add is the pointer's own
    p_v = (t * H + i_h) * V
    m_kt = m_k & ok
    m_vt = m_v & ok
    b_q = tl.load(q + p_k + o_k, mask=m_kt, other=0.0).to(ACC)
    b_k = tl.load(k + p_k + o_k, mask=m_kt, other=0.0).to(ACC)
    b_v = tl.load(v + p_v + o_v, mask=m_vt, other=0.0).to(ACC)
    b_gk = tl.zeros_like(b_k)
    b_gv = tl.zeros_like(b_v)
    b_do = tl.zeros_like(b_v)
    if USE_GK:
        b_gk = tl.load(gk + p_k + o_k, mask=m_kt, other=0.0).to(ACC)
    if USE_GV:
        b_gv = tl.load(gv + p_v + o_v, mask=m_vt, other=0.0).to(ACC)
    if USE_DO:
        b_do = tl.load(do + p_v + o_v, mask=m_vt, other=0.0).to(ACC)
    return b_q, b_k, b_v, b_gk, b_gv, b_do


@triton.jit
def _load_group(q, k, v, gk, gv, do, i, n, bos, eos, i_h, o_k, o_v, m_k, m_v,
                H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, ACC: tl.constexpr, REVERSE: tl.constexpr,
                USE_GK: tl.constexpr, USE_GV: tl.constexpr, USE_DO: tl.constexpr):
    """Rows of steps i … i+3 (rows past the sequence load as zeros), all loads issued together."""
    x0 = _load_row(q, k, v, gk, gv, do, time_index(i, bos, eos, REVERSE), i < n, i_h, o_k, o_v, m_k, m_v,
                   H, K, V, ACC, USE_GK, USE_GV, USE_DO)
    x1 = _load_row(q, k, v, gk, gv, do, time_index(i + 1, bos, eos, REVERSE), i + 1 < n, i_h, o_k, o_v, m_k,
                   m_v, H, K, V, ACC, USE_GK, USE_GV, USE_DO)
    x2 = _load_row(q, k, v, gk, gv, do, time_index(i + 2, bos, eos, REVERSE), i + 2 < n, i_h, o_k, o_v, m_k,
                   m_v, H, K, V, ACC, USE_GK, USE_GV, USE_DO)
    x3 = _load_row(q, k, v, gk, gv, do, time_index(i + 3, bos, eos, REVERSE), i + 3 < n, i_h, o_k, o_v, m_k,
                   m_v, H, K, V, ACC, USE_GK, USE_GV, USE_DO)
    return x0, x1, x2, x3


# ----------------------------------------------------------------------------- forward


@triton.jit
def _fwd_step(b_h, x, o, t, ok, i_h, o_v, m_v, scale: tl.constexpr, H: tl.constexpr, V: tl.constexpr,
              USE_GK: tl.constexpr, USE_GV: tl.constexpr):
    """(rec.1) S ← S ⊙ exp(G_t) + k_t v_tᵀ, then store o_t = S_tᵀ (scale q_t)."""
    b_q, b_k, b_v, b_gk, b_gv, _ = x
    b_h = _decay(b_h, b_gk, b_gv, USE_GK, USE_GV)
    b_h += b_k[:, None] * b_v[None, :]
    b_o = tl.sum(b_h * b_q[:, None], axis=0) * scale  # [BV]
    tl.store(o + (t * H + i_h) * V + o_v, b_o.to(o.dtype.element_ty), mask=m_v & ok)
    return b_h


@triton.autotune(
    configs=_fwd_configs(),
    key=["H", "K", "V", "USE_GK", "USE_GV"],
    prune_configs_by={"early_config_prune": _prune_fwd},
)
@triton.heuristics({"USE_GK": given("gk"), "USE_GV": given("gv")})
@triton.jit
def recurrent_fwd_kernel(
    q, k, v, gk, gv, h0, cu_seqlens,  # inputs
    o, ht,  # outputs
    scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr,
    REVERSE: tl.constexpr, USE_GK: tl.constexpr, USE_GV: tl.constexpr,
):
    i_v, i_nh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    i_n, i_h = i_nh // H, i_nh % H
    bos, eos = sequence_bounds(cu_seqlens, i_n)
    n = eos - bos

    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    m_h = m_k[:, None] & m_v[None, :]
    p_state = i_nh * K * V + o_k[:, None] * V + o_v[None, :]
    f32: tl.constexpr = tl.float32

    b_h = tl.load(h0 + p_state, mask=m_h, other=0.0).to(f32)  # [BK, BV]
    # Software prefetch: the loads of group i+4 are in flight while group i is computed.
    xs = _load_group(q, k, v, gk, gv, q, 0, n, bos, eos, i_h, o_k, o_v, m_k, m_v, H, K, V, f32, REVERSE,
                     USE_GK, USE_GV, False)
    for i in range(0, n, 4):
        xs_next = _load_group(q, k, v, gk, gv, q, i + 4, n, bos, eos, i_h, o_k, o_v, m_k, m_v, H, K, V, f32,
                              REVERSE, USE_GK, USE_GV, False)
        x0, x1, x2, x3 = xs
        b_h = _fwd_step(b_h, x0, o, time_index(i, bos, eos, REVERSE), i < n, i_h, o_v, m_v, scale, H, V,
                        USE_GK, USE_GV)
        b_h = _fwd_step(b_h, x1, o, time_index(i + 1, bos, eos, REVERSE), i + 1 < n, i_h, o_v, m_v, scale, H, V,
                        USE_GK, USE_GV)
        b_h = _fwd_step(b_h, x2, o, time_index(i + 2, bos, eos, REVERSE), i + 2 < n, i_h, o_v, m_v, scale, H, V,
                        USE_GK, USE_GV)
        b_h = _fwd_step(b_h, x3, o, time_index(i + 3, bos, eos, REVERSE), i + 3 < n, i_h, o_v, m_v, scale, H, V,
                        USE_GK, USE_GV)
        xs = xs_next
    tl.store(ht + p_state, b_h, mask=m_h)


# ----------------------------------------------------------------------------- backward


@triton.jit
def _bwd_sweep1_step(b_h, x, dq, dgk, dgv, t, ok, i_h, i_hk, HNK, o_k, o_v, m_k, m_v, lo_k, lo_v,
                     scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                     USE_GK: tl.constexpr, USE_GV: tl.constexpr):
    """Recompute S_t; store dq_t (rec.4) and the '+' terms q⊙dq (rec.8), o⊙do (rec.9) as (hi, lo)."""
    b_q, b_k, b_v, b_gk, b_gv, b_do = x
    b_h = _decay(b_h, b_gk, b_gv, USE_GK, USE_GV)
    b_h += b_k[:, None] * b_v[None, :]
    b_dq = tl.sum(b_h * b_do[None, :], axis=1) * scale  # [BK]
    p_k = (t * H + i_h) * K
    p_v = (t * H + i_h) * V
    tl.store(dq + p_k + o_k, b_dq.to(dq.dtype.element_ty), mask=m_k & ok)
    if USE_GK:
        b_x = b_q * b_dq
        b_hi = b_x.to(tl.float32)
        tl.store(dgk + p_k + o_k, b_hi, mask=m_k & ok)
        tl.store(dgk + lo_k + p_k + o_k, (b_x - b_hi.to(b_x.dtype)).to(tl.float32), mask=m_k & ok)
    if USE_GV:
        b_x = tl.sum(b_h * b_q[:, None], axis=0) * scale * b_do  # this key block's share of o_t ⊙ do_t
        b_hi = b_x.to(tl.float32)
        p_pv = (t * HNK + i_hk) * V  # [TT, H, NK, V]: this key block's partial
        tl.store(dgv + p_pv + o_v, b_hi, mask=m_v & ok)
        tl.store(dgv + lo_v + p_pv + o_v, (b_x - b_hi.to(b_x.dtype)).to(tl.float32), mask=m_v & ok)
    return b_h


@triton.jit
def _load_terms(dgk, dgv, t, ok, i_h, i_hk, HNK, o_k, o_v, m_k, m_v, lo_k, lo_v,
                H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, ACC: tl.constexpr,
                USE_GK: tl.constexpr, USE_GV: tl.constexpr):
    """The (hi, lo) terms stored by sweep 1 for row t, recombined in ACC (zeros for absent gates)."""
    p_k = (t * H + i_h) * K
    p_v = (t * HNK + i_hk) * V
    b_tk = tl.zeros([o_k.shape[0]], ACC)
    b_tv = tl.zeros([o_v.shape[0]], ACC)
    if USE_GK:
        b_tk = (tl.load(dgk + p_k + o_k, mask=m_k & ok, other=0.0).to(ACC)
                + tl.load(dgk + lo_k + p_k + o_k, mask=m_k & ok, other=0.0).to(ACC))
    if USE_GV:
        b_tv = (tl.load(dgv + p_v + o_v, mask=m_v & ok, other=0.0).to(ACC)
                + tl.load(dgv + lo_v + p_v + o_v, mask=m_v & ok, other=0.0).to(ACC))
    return b_tk, b_tv


@triton.jit
def _load_terms_group(dgk, dgv, i, n, bos, eos, i_h, i_hk, HNK, o_k, o_v, m_k, m_v, lo_k, lo_v,
                      H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, ACC: tl.constexpr,
                      REVERSE: tl.constexpr, USE_GK: tl.constexpr, USE_GV: tl.constexpr):
    """The sweep-1 terms of steps i … i+3, all loads issued together."""
    e0 = _load_terms(dgk, dgv, time_index(i, bos, eos, REVERSE), i < n, i_h, i_hk, HNK, o_k, o_v, m_k, m_v, lo_k, lo_v,
                     H, K, V, ACC, USE_GK, USE_GV)
    e1 = _load_terms(dgk, dgv, time_index(i + 1, bos, eos, REVERSE), i + 1 < n, i_h, i_hk, HNK, o_k, o_v, m_k, m_v, lo_k,
                     lo_v, H, K, V, ACC, USE_GK, USE_GV)
    e2 = _load_terms(dgk, dgv, time_index(i + 2, bos, eos, REVERSE), i + 2 < n, i_h, i_hk, HNK, o_k, o_v, m_k, m_v, lo_k,
                     lo_v, H, K, V, ACC, USE_GK, USE_GV)
    e3 = _load_terms(dgk, dgv, time_index(i + 3, bos, eos, REVERSE), i + 3 < n, i_h, i_hk, HNK, o_k, o_v, m_k, m_v, lo_k,
                     lo_v, H, K, V, ACC, USE_GK, USE_GV)
    return e0, e1, e2, e3


@triton.jit
def _bwd_sweep2_step(b_dh, b_rk, b_rv, x, terms, dk, dv, dgk, dgv, dg, t, ok, i_h, i_hk, HNK, o_k, o_v, m_k, m_v,
                     scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                     USE_GK: tl.constexpr, USE_GV: tl.constexpr):
    """dS_t (rec.3), dk_t (rec.5), dv_t (rec.6), and one step of the reverse cumsums (rec.8, rec.9)."""
    b_q, b_k, b_v, b_gk, b_gv, b_do = x
    b_tk, b_tv = terms
    b_dh += (b_q * scale)[:, None] * b_do[None, :]
    b_dk = tl.sum(b_dh * b_v[None, :], axis=1)  # [BK]
    b_dv = tl.sum(b_dh * b_k[:, None], axis=0)  # [BV], partial over key blocks
    p_k = (t * H + i_h) * K
    p_pv = (t * HNK + i_hk) * V  # [TT, H, NK, V]: this key block's partial
    tl.store(dk + p_k + o_k, b_dk.to(dk.dtype.element_ty), mask=m_k & ok)
    tl.store(dv + p_pv + o_v, b_dv.to(dv.dtype.element_ty), mask=m_v & ok)
    if USE_GK:
        b_rk += b_tk - b_k * b_dk
        tl.store(dgk + p_k + o_k, b_rk.to(tl.float32), mask=m_k & ok)
        tl.store(dg + t * HNK + i_hk, tl.sum(b_rk, axis=0).to(tl.float32), mask=ok)  # dg_t = Σ_i dgk_t[i]
    if USE_GV:
        b_rv += b_tv - b_v * b_dv
        tl.store(dgv + p_pv + o_v, b_rv.to(tl.float32), mask=m_v & ok)
    b_dh = _decay(b_dh, b_gk, b_gv, USE_GK, USE_GV)
    return b_dh, b_rk, b_rv


@triton.autotune(
    configs=[triton.Config({}, num_warps=w) for w in (1, 2, 4, 8)],
    key=["H", "K", "V", "BK", "USE_GK", "USE_GV"],
)
@triton.heuristics({"USE_GK": given("gk"), "USE_GV": given("gv")})
@triton.jit
def recurrent_bwd_kernel(
    q, k, v, gk, gv, h0, do, dht, cu_seqlens,  # inputs
    dq, dk, dv, dh0, dgk, dg, dgv,  # outputs; dgk [2, TT, H, K]; partial over key blocks: dv [TT, H, NK, V],
    # dg [TT, H, NK], dgv [2, TT, H, NK, V]
    scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr,
    REVERSE: tl.constexpr, USE_GK: tl.constexpr, USE_GV: tl.constexpr,
):
    i_k, i_nh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    i_n, i_h = i_nh // H, i_nh % H
    bos, eos = sequence_bounds(cu_seqlens, i_n)
    n = eos - bos
    ACC: tl.constexpr = tl.float64 if USE_GK or USE_GV else tl.float32

    TT = tl.load(cu_seqlens + tl.num_programs(1) // H).to(tl.int64)  # total packed length
    lo_k = TT * H * K  # dgk = [hi | lo]
    HNK = H * tl.num_programs(0)
    i_hk = i_h * tl.num_programs(0) + i_k  # partial outputs interleave key blocks: [TT, H, NK, ·]
    lo_v = TT * HNK * V  # dgv = [hi | lo]

    o_k = i_k * BK + tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    m_h = m_k[:, None] & m_v[None, :]
    p_state = i_nh * K * V + o_k[:, None] * V + o_v[None, :]

    # Sweep 1, in processing order: recompute S_t, emit dq_t and the '+' terms of rec.8 / rec.9.
    b_h = tl.load(h0 + p_state, mask=m_h, other=0.0).to(ACC)  # [BK, BV]
    xs = _load_group(q, k, v, gk, gv, do, 0, n, bos, eos, i_h, o_k, o_v, m_k, m_v, H, K, V, ACC, REVERSE,
                     USE_GK, USE_GV, True)
    for i in range(0, n, 4):
        xs_next = _load_group(q, k, v, gk, gv, do, i + 4, n, bos, eos, i_h, o_k, o_v, m_k, m_v, H, K, V, ACC,
                              REVERSE, USE_GK, USE_GV, True)
        x0, x1, x2, x3 = xs
        b_h = _bwd_sweep1_step(b_h, x0, dq, dgk, dgv, time_index(i, bos, eos, REVERSE), i < n, i_h, i_hk, HNK, o_k, o_v,
                               m_k, m_v, lo_k, lo_v, scale, H, K, V, USE_GK, USE_GV)
        b_h = _bwd_sweep1_step(b_h, x1, dq, dgk, dgv, time_index(i + 1, bos, eos, REVERSE), i + 1 < n, i_h, i_hk, HNK, o_k,
                               o_v, m_k, m_v, lo_k, lo_v, scale, H, K, V, USE_GK, USE_GV)
        b_h = _bwd_sweep1_step(b_h, x2, dq, dgk, dgv, time_index(i + 2, bos, eos, REVERSE), i + 2 < n, i_h, i_hk, HNK, o_k,
                               o_v, m_k, m_v, lo_k, lo_v, scale, H, K, V, USE_GK, USE_GV)
        b_h = _bwd_sweep1_step(b_h, x3, dq, dgk, dgv, time_index(i + 3, bos, eos, REVERSE), i + 3 < n, i_h, i_hk, HNK, o_k,
                               o_v, m_k, m_v, lo_k, lo_v, scale, H, K, V, USE_GK, USE_GV)
        xs = xs_next

    # The final-state term of the gate gradients, Σ dS_T ⊙ S_T (rec.8, rec.9).
    b_dh = tl.load(dht + p_state, mask=m_h, other=0.0).to(ACC)  # [BK, BV]
    b_rk = tl.sum(b_dh * b_h, axis=1)  # [BK]
    b_rv = tl.sum(b_dh * b_h, axis=0)  # [BV]
    tl.debug_barrier()  # sweep 2 reads what other threads of this program wrote in sweep 1

    # Sweep 2, against processing order: dS_t = scale q_t do_tᵀ + D_{t+1} ⊙ dS_{t+1} (rec.3).
    # Rows and the terms written by sweep 1 are prefetched one group ahead.
    xs = _load_group(q, k, v, gk, gv, do, 0, n, bos, eos, i_h, o_k, o_v, m_k, m_v, H, K, V, ACC, not REVERSE,
                     USE_GK, USE_GV, True)
    es = _load_terms_group(dgk, dgv, 0, n, bos, eos, i_h, i_hk, HNK, o_k, o_v, m_k, m_v, lo_k, lo_v, H, K, V, ACC,
                           not REVERSE, USE_GK, USE_GV)
    for i in range(0, n, 4):
        xs_next = _load_group(q, k, v, gk, gv, do, i + 4, n, bos, eos, i_h, o_k, o_v, m_k, m_v, H, K, V, ACC,
                              not REVERSE, USE_GK, USE_GV, True)
        es_next = _load_terms_group(dgk, dgv, i + 4, n, bos, eos, i_h, i_hk, HNK, o_k, o_v, m_k, m_v, lo_k, lo_v, H, K, V,
                                    ACC, not REVERSE, USE_GK, USE_GV)
        t0, t1 = time_index(i, bos, eos, not REVERSE), time_index(i + 1, bos, eos, not REVERSE)
        t2, t3 = time_index(i + 2, bos, eos, not REVERSE), time_index(i + 3, bos, eos, not REVERSE)
        e0, e1, e2, e3 = es
        x0, x1, x2, x3 = xs
        b_dh, b_rk, b_rv = _bwd_sweep2_step(b_dh, b_rk, b_rv, x0, e0, dk, dv, dgk, dgv, dg, t0, i < n, i_h, i_hk, HNK, o_k, o_v,
                                            m_k, m_v, scale, H, K, V, USE_GK, USE_GV)
        b_dh, b_rk, b_rv = _bwd_sweep2_step(b_dh, b_rk, b_rv, x1, e1, dk, dv, dgk, dgv, dg, t1, i + 1 < n, i_h, i_hk, HNK, o_k,
                                            o_v, m_k, m_v, scale, H, K, V, USE_GK, USE_GV)
        b_dh, b_rk, b_rv = _bwd_sweep2_step(b_dh, b_rk, b_rv, x2, e2, dk, dv, dgk, dgv, dg, t2, i + 2 < n, i_h, i_hk, HNK, o_k,
                                            o_v, m_k, m_v, scale, H, K, V, USE_GK, USE_GV)
        b_dh, b_rk, b_rv = _bwd_sweep2_step(b_dh, b_rk, b_rv, x3, e3, dk, dv, dgk, dgv, dg, t3, i + 3 < n, i_h, i_hk, HNK, o_k,
                                            o_v, m_k, m_v, scale, H, K, V, USE_GK, USE_GV)
        xs = xs_next
        es = es_next
    tl.store(dh0 + p_state, b_dh.to(tl.float32), mask=m_h)  # (rec.7)

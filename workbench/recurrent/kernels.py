"""Triton kernels of fused recurrent (gated) linear attention. Equation tags refer to NOTES.md.

Both kernels see packed sequences (`[1, total_T, H, ·]` with `cu_seqlens`) and one combined
per-key log-gate `gk` (the glue folds `g` and `g_gamma` into it, NOTES.md (rec.2)); `gv` is the
per-value log-gate. The state lives in registers as a float32 tile for the whole sweep.

* forward: one program per (value block, sequence·head). Blocks over V need no reduction: each
  program owns whole rows of `o`.
* backward: one program per (key block, sequence·head). Blocks over K keep dq, dk and the per-key
  gate gradient complete in each program; dv and the per-value gate gradient are partial sums over
  key blocks, reduced by the caller.
"""

import triton
import triton.language as tl

from ..launch import given
from ..tl_helpers import LOG2E, sequence_bounds, time_index


def _fwd_configs():
    return [
        triton.Config({"BV": bv}, num_warps=w)
        for bv in (16, 32, 64)
        for w in (1, 2, 4)
    ]


def _prune_fwd(configs, named_args, **_):
    """Keep block sizes that fit V, and state tiles [BK, BV] that fit in registers."""
    K, V = named_args["q"].shape[-1], named_args["v"].shape[-1]
    BK, BVmax = triton.next_power_of_2(K), triton.next_power_of_2(V)
    kept = [c for c in configs if c.kwargs["BV"] <= BVmax and BK * c.kwargs["BV"] <= 8192]
    return kept or [min(configs, key=lambda c: c.kwargs["BV"])]


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

    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    m_h = m_k[:, None] & m_v[None, :]
    p_state = i_nh * K * V + o_k[:, None] * V + o_v[None, :]

    # [BK, BV]
    b_h = tl.load(h0 + p_state, mask=m_h, other=0.0).to(tl.float32)
    for i in range(0, eos - bos):
        t = time_index(i, bos, eos, REVERSE)
        p_k = (t * H + i_h) * K + o_k
        p_v = (t * H + i_h) * V + o_v
        b_q = tl.load(q + p_k, mask=m_k, other=0.0).to(tl.float32) * scale
        b_k = tl.load(k + p_k, mask=m_k, other=0.0).to(tl.float32)
        b_v = tl.load(v + p_v, mask=m_v, other=0.0).to(tl.float32)
        if USE_GK:  # (rec.1) decay rows by exp(gk_t)
            b_gk = tl.load(gk + p_k, mask=m_k, other=0.0).to(tl.float32)
            b_h *= tl.exp2(b_gk * LOG2E)[:, None]
        if USE_GV:  # (rec.1) decay columns by exp(gv_t)
            b_gv = tl.load(gv + p_v, mask=m_v, other=0.0).to(tl.float32)
            b_h *= tl.exp2(b_gv * LOG2E)[None, :]
        b_h += b_k[:, None] * b_v[None, :]  # (rec.1)
        b_o = tl.sum(b_h * b_q[:, None], axis=0)  # (rec.1) o_t = S_tᵀ (scale q_t)
        tl.store(o + p_v, b_o.to(o.dtype.element_ty), mask=m_v)
    tl.store(ht + p_state, b_h, mask=m_h)


@triton.autotune(
    configs=[triton.Config({}, num_warps=w) for w in (1, 2, 4, 8)],
    key=["H", "K", "V", "BK", "USE_GK", "USE_GV"],
)
@triton.heuristics({"USE_GK": given("gk"), "USE_GV": given("gv")})
@triton.jit
def recurrent_bwd_kernel(
    q, k, v, gk, gv, h0, do, dht, cu_seqlens,  # inputs
    dq, dk, dv, dh0, dgk, dgv,  # outputs; dv, dgv: [NK, ...] partial sums over key blocks
    scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr,
    REVERSE: tl.constexpr, USE_GK: tl.constexpr, USE_GV: tl.constexpr,
):
    i_k, i_nh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    i_n, i_h = i_nh // H, i_nh % H
    bos, eos = sequence_bounds(cu_seqlens, i_n)
    NK = tl.num_programs(0)
    TT = tl.load(cu_seqlens + tl.num_programs(1) // H).to(tl.int64)  # total packed length

    o_k = i_k * BK + tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    m_h = m_k[:, None] & m_v[None, :]
    p_state = i_nh * K * V + o_k[:, None] * V + o_v[None, :]
    part = i_k * TT * H * V  # this key block's slice of the partial outputs dv, dgv

    # Sweep 1, in processing order: recompute S_t, emit dq_t (rec.4) and the "+" terms of the
    # gate gradients, q_t ⊙ dq_t (rec.8) and o_t ⊙ do_t restricted to this key block (rec.9).
    b_h = tl.load(h0 + p_state, mask=m_h, other=0.0).to(tl.float32)  # [BK, BV]
    for i in range(0, eos - bos):
        t = time_index(i, bos, eos, REVERSE)
        p_k = (t * H + i_h) * K + o_k
        p_v = (t * H + i_h) * V + o_v
        b_k = tl.load(k + p_k, mask=m_k, other=0.0).to(tl.float32)
        b_v = tl.load(v + p_v, mask=m_v, other=0.0).to(tl.float32)
        b_do = tl.load(do + p_v, mask=m_v, other=0.0).to(tl.float32)
        if USE_GK:
            b_h *= tl.exp2(tl.load(gk + p_k, mask=m_k, other=0.0).to(tl.float32) * LOG2E)[:, None]
        if USE_GV:
            b_h *= tl.exp2(tl.load(gv + p_v, mask=m_v, other=0.0).to(tl.float32) * LOG2E)[None, :]
        b_h += b_k[:, None] * b_v[None, :]
        b_dq = tl.sum(b_h * b_do[None, :], axis=1) * scale  # [BK] (rec.4)
        tl.store(dq + p_k, b_dq.to(dq.dtype.element_ty), mask=m_k)
        if USE_GK:
            b_q = tl.load(q + p_k, mask=m_k, other=0.0).to(tl.float32)
            tl.store(dgk + p_k, b_q * b_dq, mask=m_k)
        if USE_GV:
            b_q = tl.load(q + p_k, mask=m_k, other=0.0).to(tl.float32) * scale
            b_o = tl.sum(b_h * b_q[:, None], axis=0)  # [BV] this block's share of o_t
            tl.store(dgv + part + p_v, b_o * b_do, mask=m_v)

    # The final-state term of the gate gradients, Σ dS_T ⊙ S_T (rec.8, rec.9).
    b_dh = tl.load(dht + p_state, mask=m_h, other=0.0).to(tl.float32)  # [BK, BV]
    b_rk = tl.sum(b_dh * b_h, axis=1)  # [BK]
    b_rv = tl.sum(b_dh * b_h, axis=0)  # [BV]
    tl.debug_barrier()  # sweep 2 reads what other threads of this program wrote in sweep 1

    # Sweep 2, against processing order: dS_t = scale q_t do_tᵀ + D_{t+1} ⊙ dS_{t+1} (rec.3).
    for i in range(0, eos - bos):
        t = time_index(i, bos, eos, not REVERSE)
        p_k = (t * H + i_h) * K + o_k
        p_v = (t * H + i_h) * V + o_v
        b_q = tl.load(q + p_k, mask=m_k, other=0.0).to(tl.float32) * scale
        b_k = tl.load(k + p_k, mask=m_k, other=0.0).to(tl.float32)
        b_v = tl.load(v + p_v, mask=m_v, other=0.0).to(tl.float32)
        b_do = tl.load(do + p_v, mask=m_v, other=0.0).to(tl.float32)
        b_dh += b_q[:, None] * b_do[None, :]
        b_dk = tl.sum(b_dh * b_v[None, :], axis=1)  # [BK] (rec.5)
        b_dv = tl.sum(b_dh * b_k[:, None], axis=0)  # [BV] (rec.6), partial over key blocks
        tl.store(dk + p_k, b_dk.to(dk.dtype.element_ty), mask=m_k)
        tl.store(dv + part + p_v, b_dv, mask=m_v)
        if USE_GK:  # (rec.8) reverse cumulative sum of q ⊙ dq − k ⊙ dk
            b_rk += tl.load(dgk + p_k, mask=m_k, other=0.0) - b_k * b_dk
            tl.store(dgk + p_k, b_rk, mask=m_k)
            b_dh *= tl.exp2(tl.load(gk + p_k, mask=m_k, other=0.0).to(tl.float32) * LOG2E)[:, None]
        if USE_GV:  # (rec.9) reverse cumulative sum of o ⊙ do − v ⊙ dv
            b_rv += tl.load(dgv + part + p_v, mask=m_v, other=0.0) - b_v * b_dv
            tl.store(dgv + part + p_v, b_rv, mask=m_v)
            b_dh *= tl.exp2(tl.load(gv + p_v, mask=m_v, other=0.0).to(tl.float32) * LOG2E)[None, :]
    tl.store(dh0 + p_state, b_dh, mask=m_h)  # (rec.7)

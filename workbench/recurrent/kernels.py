"""Triton kernels of fused recurrent (gated) linear attention. Equation tags refer to NOTES.md.

Both kernels see packed sequences (`[1, total_T, H, ·]` with `cu_seqlens`) and one combined
per-key log-gate `gk` (the glue folds `g` and `g_gamma` into it, NOTES.md (rec.2)); `gv` is the
per-value log-gate. The state lives in registers, in float32, for the whole sweep.

* forward: one program per (value block, sequence·head). Blocks over V need no reduction: each
  program owns whole rows of `o`. When the caller will differentiate, it also saves the state
  every CHUNK steps (checkpoints).
* backward: one program per (key block, sequence·head), one sweep against processing order. For
  each chunk it restarts from the checkpoint, recomputes the states at the start of each group of
  four steps into a small per-program scratch, then walks the chunk backwards recomputing the four
  states of each group in registers. With S_{t−1} at hand the gate gradients are the direct sums
  of E_t = dS_t ⊙ D_t ⊙ S_{t−1} (rec.8a, rec.9a): no cancellation, whatever the decay (the
  reverse-cumulative-sum form (rec.8, rec.9) cancels catastrophically under strong decay, NOTES.md
  "Precision of the identity"). dq, dk and the per-key gate gradient are complete in a program; dv
  and the per-value gate gradient are partial sums over key blocks, reduced by the caller.

A step of the recurrence is bound by memory latency, not arithmetic: sweeps walk time in groups of
four steps and issue the loads of a whole group before its first step. Rows past the end of a
sequence load as zeros, which makes their step a no-op (decay exp(0) = 1, k vᵀ = 0), and are never
stored.
"""

import triton
import triton.language as tl

from ..launch import given
from ..tl_helpers import exp_accurate, sequence_bounds, time_index

CHUNK = 64  # steps between checkpoints (a multiple of the group size 4); passed as a constexpr


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
    """(rec.1) b_s ⊙ exp(G) with G[i, j] = gk[i] + gv[j] for whichever gates are present.

    With both gates, exp is taken of the sum (one rounding per element, as the reference does)
    rather than multiplying exp(gk) and exp(gv). The exponentials are accurate to about an ulp
    even for strong decays (`exp_accurate`): their errors compound along the state's product.
    """
    if USE_GK and USE_GV:
        b_s *= exp_accurate(b_gk[:, None] + b_gv[None, :])
    elif USE_GK:
        b_s *= exp_accurate(b_gk)[:, None]
    elif USE_GV:
        b_s *= exp_accurate(b_gv)[None, :]
    return b_s


@triton.jit
def _load_row(q, k, v, gk, gv, do, t, ok, i_h, o_k, o_v, m_k, m_v,
              H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
              USE_GK: tl.constexpr, USE_GV: tl.constexpr, USE_DO: tl.constexpr):
    """Row t of q, k, v, the gates and (USE_DO) do, as float32; zeros when `ok` is false."""
    p_k = (t * H + i_h) * K  # scalar row offsets: the vector add is the pointer's own
    p_v = (t * H + i_h) * V
    m_kt = m_k & ok
    m_vt = m_v & ok
    b_q = tl.load(q + p_k + o_k, mask=m_kt, other=0.0).to(tl.float32)
    b_k = tl.load(k + p_k + o_k, mask=m_kt, other=0.0).to(tl.float32)
    b_v = tl.load(v + p_v + o_v, mask=m_vt, other=0.0).to(tl.float32)
    b_gk = tl.zeros_like(b_k)
    b_gv = tl.zeros_like(b_v)
    b_do = tl.zeros_like(b_v)
    if USE_GK:
        b_gk = tl.load(gk + p_k + o_k, mask=m_kt, other=0.0).to(tl.float32)
    if USE_GV:
        b_gv = tl.load(gv + p_v + o_v, mask=m_vt, other=0.0).to(tl.float32)
    if USE_DO:
        b_do = tl.load(do + p_v + o_v, mask=m_vt, other=0.0).to(tl.float32)
    return b_q, b_k, b_v, b_gk, b_gv, b_do


@triton.jit
def _load_group(q, k, v, gk, gv, do, i, n, bos, eos, i_h, o_k, o_v, m_k, m_v,
                H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, REVERSE: tl.constexpr,
                USE_GK: tl.constexpr, USE_GV: tl.constexpr, USE_DO: tl.constexpr):
    """Rows of steps i … i+3 (rows past the sequence load as zeros), all loads issued together."""
    x0 = _load_row(q, k, v, gk, gv, do, time_index(i, bos, eos, REVERSE), i < n, i_h, o_k, o_v, m_k, m_v,
                   H, K, V, USE_GK, USE_GV, USE_DO)
    x1 = _load_row(q, k, v, gk, gv, do, time_index(i + 1, bos, eos, REVERSE), i + 1 < n, i_h, o_k, o_v, m_k,
                   m_v, H, K, V, USE_GK, USE_GV, USE_DO)
    x2 = _load_row(q, k, v, gk, gv, do, time_index(i + 2, bos, eos, REVERSE), i + 2 < n, i_h, o_k, o_v, m_k,
                   m_v, H, K, V, USE_GK, USE_GV, USE_DO)
    x3 = _load_row(q, k, v, gk, gv, do, time_index(i + 3, bos, eos, REVERSE), i + 3 < n, i_h, o_k, o_v, m_k,
                   m_v, H, K, V, USE_GK, USE_GV, USE_DO)
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
    key=["H", "K", "V", "USE_GK", "USE_GV", "SAVE"],
    prune_configs_by={"early_config_prune": _prune_fwd},
)
@triton.heuristics({"USE_GK": given("gk"), "USE_GV": given("gv"), "SAVE": given("ckpt")})
@triton.jit
def recurrent_fwd_kernel(
    q, k, v, gk, gv, h0, cu_seqlens,  # inputs
    o, ht, ckpt,  # outputs; ckpt [TT // CHUNK + N + 1, H, K, V]: the state every CHUNK steps
    scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr,
    CHUNK: tl.constexpr, REVERSE: tl.constexpr, USE_GK: tl.constexpr, USE_GV: tl.constexpr, SAVE: tl.constexpr,
):
    i_v, i_nh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    i_n, i_h = i_nh // H, i_nh % H
    bos, eos = sequence_bounds(cu_seqlens, i_n)
    n = eos - bos

    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    m_h = m_k[:, None] & m_v[None, :]
    p_state = o_k[:, None] * V + o_v[None, :]
    p_ckpt = ckpt + ((bos // CHUNK + i_n) * H + i_h) * K * V + p_state  # checkpoint 0 of this sequence

    b_h = tl.load(h0 + i_nh * K * V + p_state, mask=m_h, other=0.0).to(tl.float32)  # [BK, BV]
    if SAVE:
        tl.store(p_ckpt, b_h, mask=m_h)
    # Software prefetch: the loads of group i+4 are in flight while group i is computed.
    xs = _load_group(q, k, v, gk, gv, q, 0, n, bos, eos, i_h, o_k, o_v, m_k, m_v, H, K, V, REVERSE,
                     USE_GK, USE_GV, False)
    for i in range(0, n, 4):
        xs_next = _load_group(q, k, v, gk, gv, q, i + 4, n, bos, eos, i_h, o_k, o_v, m_k, m_v, H, K, V,
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
        if SAVE:  # the state after i + 4 steps starts chunk (i + 4) / CHUNK
            at_chunk = ((i + 4) % CHUNK == 0) & (i + 4 < n)
            tl.store(p_ckpt + ((i + 4) // CHUNK) * H * K * V, b_h, mask=m_h & at_chunk)
        xs = xs_next
    tl.store(ht + i_nh * K * V + p_state, b_h, mask=m_h)


# ----------------------------------------------------------------------------- backward


@triton.jit
def _advance(b_s, x, USE_GK: tl.constexpr, USE_GV: tl.constexpr):
    """(rec.1) S_t from S_{t−1}, without the output."""
    b_q, b_k, b_v, b_gk, b_gv, b_do = x
    return _decay(b_s, b_gk, b_gv, USE_GK, USE_GV) + b_k[:, None] * b_v[None, :]


@triton.jit
def _bwd_step(b_dh, b_prev, x, dq, dk, dv, dgk, dg, dgv, t, ok, i_h, i_hk, HNK, o_k, o_v, m_k, m_v,
              scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
              USE_GK: tl.constexpr, USE_GV: tl.constexpr):
    """One step against processing order, given dS_{t+1} decayed by D_{t+1} and S_{t−1}."""
    b_q, b_k, b_v, b_gk, b_gv, b_do = x
    b_a = _decay(b_prev, b_gk, b_gv, USE_GK, USE_GV)  # A_t = D_t ⊙ S_{t−1}
    b_s = b_a + b_k[:, None] * b_v[None, :]  # S_t
    b_dh += (b_q * scale)[:, None] * b_do[None, :]  # (rec.3) dS_t
    b_dq = tl.sum(b_s * b_do[None, :], axis=1) * scale  # [BK] (rec.4)
    b_dk = tl.sum(b_dh * b_v[None, :], axis=1)  # [BK] (rec.5)
    b_dv = tl.sum(b_dh * b_k[:, None], axis=0)  # [BV] (rec.6), partial over key blocks
    p_k = (t * H + i_h) * K
    p_pv = (t * HNK + i_hk) * V  # [TT, H, NK, V]: this key block's partial
    tl.store(dq + p_k + o_k, b_dq.to(dq.dtype.element_ty), mask=m_k & ok)
    tl.store(dk + p_k + o_k, b_dk.to(dk.dtype.element_ty), mask=m_k & ok)
    tl.store(dv + p_pv + o_v, b_dv, mask=m_v & ok)
    if USE_GK or USE_GV:
        b_e = b_dh * b_a  # (rec.8a) E_t = dS_t ⊙ D_t ⊙ S_{t−1}
        if USE_GK:
            b_dgk = tl.sum(b_e, axis=1)  # [BK]
            tl.store(dgk + p_k + o_k, b_dgk, mask=m_k & ok)
            tl.store(dg + t * HNK + i_hk, tl.sum(b_dgk, axis=0), mask=ok)  # dg_t = Σ_i dgk_t[i]
        if USE_GV:
            tl.store(dgv + p_pv + o_v, tl.sum(b_e, axis=0), mask=m_v & ok)  # (rec.9a), partial
    return _decay(b_dh, b_gk, b_gv, USE_GK, USE_GV)  # D_t ⊙ dS_t, the carry to step t − 1


@triton.autotune(
    configs=[triton.Config({}, num_warps=w) for w in (1, 2, 4, 8)],
    key=["H", "K", "V", "BK", "USE_GK", "USE_GV"],
)
@triton.heuristics({"USE_GK": given("gk"), "USE_GV": given("gv")})
@triton.jit
def recurrent_bwd_kernel(
    q, k, v, gk, gv, do, dht, ckpt, cu_seqlens,  # inputs; ckpt from the forward
    dq, dk, dv, dh0, dgk, dg, dgv, scratch,  # outputs; partial over key blocks: dv [TT, H, NK, V],
    # dg [TT, H, NK], dgv [TT, H, NK, V]; scratch [NK·N·H, CHUNK / 4, BK, BV]: group-start states
    scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr,
    CHUNK: tl.constexpr, REVERSE: tl.constexpr, USE_GK: tl.constexpr, USE_GV: tl.constexpr,
):
    i_k, i_nh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    i_n, i_h = i_nh // H, i_nh % H
    bos, eos = sequence_bounds(cu_seqlens, i_n)
    n = eos - bos
    HNK = H * tl.num_programs(0)
    i_hk = i_h * tl.num_programs(0) + i_k  # partial outputs interleave key blocks: [TT, H, NK, ·]
    GROUPS: tl.constexpr = CHUNK // 4

    o_k = i_k * BK + tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    m_h = m_k[:, None] & m_v[None, :]
    p_state = o_k[:, None] * V + o_v[None, :]
    p_ckpt = ckpt + ((bos // CHUNK + i_n) * H + i_h) * K * V + p_state
    p_scratch = (scratch + (i_k * tl.num_programs(1) + i_nh) * GROUPS * BK * BV
                 + tl.arange(0, BK)[:, None] * BV + o_v[None, :])

    b_dh = tl.load(dht + i_nh * K * V + p_state, mask=m_h, other=0.0).to(tl.float32)  # [BK, BV] dS_T
    n_chunks = tl.cdiv(n, CHUNK)
    for c_rev in range(0, n_chunks):
        c = n_chunks - 1 - c_rev
        # Recompute the chunk forward from its checkpoint; park the state at each group start.
        b_s = tl.load(p_ckpt + c * H * K * V, mask=m_h, other=0.0)
        n_groups = tl.minimum(GROUPS, tl.cdiv(n - c * CHUNK, 4))  # the last chunk may be short
        for g in range(0, n_groups):
            i = c * CHUNK + g * 4
            tl.store(p_scratch + g * BK * BV, b_s)
            x0, x1, x2, x3 = _load_group(q, k, v, gk, gv, do, i, n, bos, eos, i_h, o_k, o_v, m_k, m_v, H, K, V,
                                         REVERSE, USE_GK, USE_GV, False)
            b_s = _advance(_advance(_advance(_advance(b_s, x0, USE_GK, USE_GV), x1, USE_GK, USE_GV),
                                    x2, USE_GK, USE_GV), x3, USE_GK, USE_GV)
        tl.debug_barrier()  # the parked states were written by other threads of this program
        # Walk the chunk backwards, one group at a time, its four states recomputed in registers.
        for g_rev in range(0, n_groups):
            i = c * CHUNK + (n_groups - 1 - g_rev) * 4
            x0, x1, x2, x3 = _load_group(q, k, v, gk, gv, do, i, n, bos, eos, i_h, o_k, o_v, m_k, m_v, H, K, V,
                                         REVERSE, USE_GK, USE_GV, True)
            b_s0 = tl.load(p_scratch + (n_groups - 1 - g_rev) * BK * BV)
            b_s1 = _advance(b_s0, x0, USE_GK, USE_GV)
            b_s2 = _advance(b_s1, x1, USE_GK, USE_GV)
            b_s3 = _advance(b_s2, x2, USE_GK, USE_GV)
            b_dh = _bwd_step(b_dh, b_s3, x3, dq, dk, dv, dgk, dg, dgv, time_index(i + 3, bos, eos, REVERSE),
                             i + 3 < n, i_h, i_hk, HNK, o_k, o_v, m_k, m_v, scale, H, K, V, USE_GK, USE_GV)
            b_dh = _bwd_step(b_dh, b_s2, x2, dq, dk, dv, dgk, dg, dgv, time_index(i + 2, bos, eos, REVERSE),
                             i + 2 < n, i_h, i_hk, HNK, o_k, o_v, m_k, m_v, scale, H, K, V, USE_GK, USE_GV)
            b_dh = _bwd_step(b_dh, b_s1, x1, dq, dk, dv, dgk, dg, dgv, time_index(i + 1, bos, eos, REVERSE),
                             i + 1 < n, i_h, i_hk, HNK, o_k, o_v, m_k, m_v, scale, H, K, V, USE_GK, USE_GV)
            b_dh = _bwd_step(b_dh, b_s0, x0, dq, dk, dv, dgk, dg, dgv, time_index(i, bos, eos, REVERSE),
                             i < n, i_h, i_hk, HNK, o_k, o_v, m_k, m_v, scale, H, K, V, USE_GK, USE_GV)
        tl.debug_barrier()  # the next chunk overwrites the parked states
    tl.store(dh0 + i_nh * K * V + p_state, b_dh, mask=m_h)  # (rec.7)

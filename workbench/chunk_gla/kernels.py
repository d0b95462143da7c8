"""Triton kernels of chunked gated linear attention. Equation tags refer to NOTES.md.

Every kernel sees packed sequences (`[TT, H, ·]` rows) cut into chunks of BT rows. Chunk slots
(`reference.chunk_slots`) give each chunk of each sequence a slot: `bounds[slot] = (start, end)`
rows, start = end for an unused slot; per-chunk states are stored by slot. The per-key log-decay
arrives as one array `gk` (the glue folds g into it, NOTES.md (gla.1)).

forward
* `chunk_cumsum_kernel`  (slot, head): chunk-local prefix sums b of the log-decay (gla.3), float32.
* `chunk_h_kernel`       (V block, sequence·head): the state at every chunk boundary, one sweep (gla.4).
* `chunk_o_kernel`       (V block, slot, head): o = q̄ h + A v, A built sub-chunk by sub-chunk with
                         decay ratios that are never exp of a positive number (gla.5, gla.6).
backward
* `chunk_dh_kernel`      (V block, sequence·head): dH at every chunk end, one reverse sweep (gla.7).
* `chunk_dv_kernel`      (V block, slot, head): dv (gla.8).
* `chunk_dqkg_kernel`    (K block, slot, head): dq, dk and the log-decay gradient (gla.9, gla.10).

Matrix products take the inputs' dtype where the reference rounds to it (bfloat16 tensor cores),
and float32 (`F32_DOT`: "ieee" for float32 inputs, tf32 otherwise) where the reference keeps
float32. Exponentials use exp2 of the exponent times log2(e).
"""

import triton
import triton.language as tl

from ..launch import given
from ..tl_helpers import LOG2E

BC = tl.constexpr(16)  # rows per sub-chunk inside a chunk (the smallest tl.dot tile)


def _configs(block: str, sizes=(32, 64)):
    return [triton.Config({block: b}, num_warps=w, num_stages=2) for b in sizes for w in (4, 8)]


def _prune(block: str, dim: str):
    """Keep block sizes not wider than the dimension (rounded up to a power of two, at least 16)."""
    def prune(configs, named_args, **_):
        size = max(16, triton.next_power_of_2(named_args[dim].shape[-1]))
        kept = [c for c in configs if c.kwargs[block] <= size]
        return kept or [min(configs, key=lambda c: c.kwargs[block])]
    return prune


# ----------------------------------------------------------------------------- shared pieces


@triton.jit
def _exp(x):
    return tl.exp2(x * LOG2E)


@triton.jit
def _chunk(bounds, i_s):
    """(start, end) rows of chunk slot i_s, as int64; start == end for an unused slot."""
    start = tl.load(bounds + 2 * i_s).to(tl.int64)
    end = tl.load(bounds + 2 * i_s + 1).to(tl.int64)
    return start, end


@triton.jit
def _tile(x, rows, m_rows, i_h, o_d, m_d, H: tl.constexpr, D: tl.constexpr):
    """Rows `rows` of x[TT, H, D] at head i_h, columns o_d, as float32 ([len(rows), len(o_d)]); zeros outside."""
    p = x + (rows[:, None] * H + i_h) * D + o_d[None, :]
    return tl.load(p, mask=m_rows[:, None] & m_d[None, :], other=0.0).to(tl.float32)


@triton.jit
def _row(x, row, i_h, o_d, m_d, H: tl.constexpr, D: tl.constexpr):
    """One row of x[TT, H, D] at head i_h as float32 [len(o_d)]."""
    return tl.load(x + (row * H + i_h) * D + o_d, mask=m_d, other=0.0).to(tl.float32)


# ----------------------------------------------------------------------------- forward


@triton.heuristics({"USE_GK": given("gk")})
@triton.jit
def chunk_cumsum_kernel(gk, bounds, b, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr,
                        BK: tl.constexpr, USE_GK: tl.constexpr):
    """(gla.3) b_r = Σ_{t ≤ r} a_t within each chunk, float32 [TT, H, K]; zeros without a gate."""
    i_s, i_h = tl.program_id(0), tl.program_id(1)
    start, end = _chunk(bounds, i_s)
    rows = start + tl.arange(0, BT)
    m_t = rows < end
    o_k = tl.arange(0, BK)
    m_k = o_k < K
    b_b = tl.zeros([BT, BK], tl.float32)
    if USE_GK:
        b_b = tl.cumsum(_tile(gk, rows, m_t, i_h, o_k, m_k, H, K), axis=0)  # [BT, BK]
    tl.store(b + (rows[:, None] * H + i_h) * K + o_k[None, :], b_b, mask=m_t[:, None] & m_k[None, :])


@triton.jit
def _sweep_prologue(cu_seqlens, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                    BK: tl.constexpr, BV: tl.constexpr):
    """What a state sweep (one program per value block and (sequence, head)) needs before its loop:
    (i_nh, i_h, the sequence's first chunk slot, its chunk count, o_k, o_v, m_k, m_v, the [BK, BV]
    state mask and offsets)."""
    i_v, i_nh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    i_n, i_h = i_nh // H, i_nh % H
    bos = tl.load(cu_seqlens + i_n).to(tl.int64)
    first_slot = bos // BT + i_n
    n_chunks = tl.cdiv(tl.load(cu_seqlens + i_n + 1).to(tl.int64) - bos, BT)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    m_h = m_k[:, None] & m_v[None, :]
    p_state = o_k[:, None] * V + o_v[None, :]
    return i_nh, i_h, first_slot, n_chunks, o_k, o_v, m_k, m_v, m_h, p_state


@triton.autotune(configs=_configs("BV"), key=["H", "K", "V", "BT"],
                 prune_configs_by={"early_config_prune": _prune("BV", "v")})
@triton.jit
def chunk_h_kernel(k, v, b, h0, cu_seqlens, bounds,  # inputs
                   ht, hs,  # outputs: final states [N, H, K, V]; states at chunk starts [NS, H, K, V]
                   H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                   BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr):
    """(gla.4) h ← exp(b_L) ⊙ h + k̂ᵀ v over the chunks of one sequence, k̂ = k ⊙ exp(b_L − b)."""
    i_nh, i_h, first_slot, n_chunks, o_k, o_v, m_k, m_v, m_h, p_state = _sweep_prologue(cu_seqlens, H, K, V, BT,
                                                                                        BK, BV)
    b_h = tl.load(h0 + i_nh * K * V + p_state, mask=m_h, other=0.0)  # [BK, BV]
    for c in range(0, n_chunks):
        i_s = first_slot + c
        tl.store(hs + (i_s * H + i_h) * K * V + p_state, b_h, mask=m_h)
        start, end = _chunk(bounds, i_s)
        rows = start + tl.arange(0, BT)
        m_t = rows < end
        b_b = _tile(b, rows, m_t, i_h, o_k, m_k, H, K)  # [BT, BK]
        b_bL = _row(b, end - 1, i_h, o_k, m_k, H, K)  # [BK]
        b_k = _tile(k, rows, m_t, i_h, o_k, m_k, H, K)
        b_v = tl.load(v + (rows[:, None] * H + i_h) * V + o_v[None, :], mask=m_t[:, None] & m_v[None, :], other=0.0)
        b_khat = (b_k * _exp(b_bL[None, :] - b_b)).to(b_v.dtype)  # rows past the end: k = 0
        b_h = b_h * _exp(b_bL)[:, None] + tl.dot(tl.trans(b_khat), b_v, input_precision=F32_DOT)
    tl.store(ht + i_nh * K * V + p_state, b_h, mask=m_h)


@triton.jit
def _intra_tiles(q, k, b, i_sub, start, end, i_h, o_k, m_k, H: tl.constexpr, K: tl.constexpr,
                 BT: tl.constexpr):
    """Sub-chunk i_sub's rows and tiles (q, k, b: [BC, BK]), the chunk's (k, b: [BT, BK]), and b at
    the sub-chunk's first row n and last row m ([BK]).

    Rows past the chunk's end read k = q = 0 and b = b at the last row (as if their gates were 0), so
    every exponent below keeps its sign there too.
    """
    rows_i = start + i_sub * BC + tl.arange(0, BC)
    m_i = rows_i < end
    rows = start + tl.arange(0, BT)
    m_t = rows < end
    b_bL = _row(b, end - 1, i_h, o_k, m_k, H, K)
    b_qi = _tile(q, rows_i, m_i, i_h, o_k, m_k, H, K)
    b_ki = _tile(k, rows_i, m_i, i_h, o_k, m_k, H, K)
    b_bi = tl.where(m_i[:, None], _tile(b, rows_i, m_i, i_h, o_k, m_k, H, K), b_bL[None, :])
    b_k = _tile(k, rows, m_t, i_h, o_k, m_k, H, K)
    b_b = tl.where(m_t[:, None], _tile(b, rows, m_t, i_h, o_k, m_k, H, K), b_bL[None, :])
    b_bn = _row(b, tl.minimum(start + i_sub * BC, end - 1), i_h, o_k, m_k, H, K)
    b_bm = _row(b, tl.minimum(start + i_sub * BC + BC, end) - 1, i_h, o_k, m_k, H, K)
    return rows_i, m_i, b_qi, b_ki, b_bi, b_k, b_b, b_bn, b_bm


@triton.jit
def _diagonal_ratio(b_bi, STRICT: tl.constexpr):
    """[BC, BC, BK] exp(b_r − b_s) for s < r (and s = r unless STRICT) inside one sub-chunk, else 0 (gla.6)."""
    o_c = tl.arange(0, BC)
    if STRICT:
        below = o_c[:, None] > o_c[None, :]
    else:
        below = o_c[:, None] >= o_c[None, :]
    below = below[:, :, None]
    diff = tl.where(below, b_bi[:, None, :] - b_bi[None, :, :], 0.0)  # never positive where kept
    return tl.where(below, _exp(diff), 0.0)


@triton.autotune(configs=_configs("BV"), key=["H", "K", "V", "BT", "SAVE"],
                 prune_configs_by={"early_config_prune": _prune("BV", "v")})
@triton.heuristics({"SAVE": given("A")})
@triton.jit
def chunk_o_kernel(q, k, v, b, hs, bounds,  # inputs
                   o, A,  # outputs: o [TT, H, V]; A [TT, H, BT] (the intra-chunk attention, for the backward)
                   scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                   BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr, SAVE: tl.constexpr):
    """(gla.5) o_r = q̄_r h + Σ_{s ≤ r} A[r, s] v_s, one sub-chunk of BC rows at a time."""
    i_v, i_s, i_h = tl.program_id(0), tl.program_id(1).to(tl.int64), tl.program_id(2)
    start, end = _chunk(bounds, i_s)
    if start >= end:
        return
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    o_t = tl.arange(0, BT)
    rows = start + o_t
    m_t = rows < end
    b_v = tl.load(v + (rows[:, None] * H + i_h) * V + o_v[None, :], mask=m_t[:, None] & m_v[None, :], other=0.0)
    dtype = b_v.dtype
    p_h = hs + (i_s * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :]
    b_h = tl.load(p_h, mask=m_k[:, None] & m_v[None, :], other=0.0).to(dtype)  # [BK, BV]
    for i_sub in tl.static_range(BT // BC):
        rows_i, m_i, b_qi, _, b_bi, b_k, b_b, b_bn, _ = _intra_tiles(q, k, b, i_sub, start, end, i_h, o_k, m_k,
                                                                     H, K, BT)
        # (gla.6) earlier sub-chunks through the reference row n = the sub-chunk's first row:
        # exp(b_r − b_n) ≤ 1 for r ≥ n and exp(b_n − b_s) ≤ 1 for s < n.
        earlier = o_t < i_sub * BC
        b_qn = b_qi * _exp(b_bi - b_bn[None, :])  # [BC, BK]
        b_kn = tl.where(earlier[:, None], b_k * _exp(tl.where(earlier[:, None], b_bn[None, :] - b_b, 0.0)), 0.0)
        b_A = tl.dot(b_qn, tl.trans(b_kn), input_precision=F32_DOT) * scale  # [BC, BT]
        # the sub-chunk's own rows, elementwise (every kept ratio is exp of a number ≤ 0), 16 keys at a
        # time so that the [BC, BC, 16] product stays in registers
        b_Ad = tl.zeros([BC, BC], tl.float32)
        for i_kk in tl.static_range(BK // 16):
            o_kk = i_kk * 16 + tl.arange(0, 16)
            m_kk = o_kk < K
            b_bs = _tile(b, rows_i, m_i, i_h, o_kk, m_kk, H, K)
            b_bs = tl.where(m_i[:, None], b_bs, _row(b, end - 1, i_h, o_kk, m_kk, H, K)[None, :])
            b_Ad += tl.sum(_tile(q, rows_i, m_i, i_h, o_kk, m_kk, H, K)[:, None, :]
                           * _tile(k, rows_i, m_i, i_h, o_kk, m_kk, H, K)[None, :, :]
                           * _diagonal_ratio(b_bs, False), axis=2)
        b_Ad *= scale
        b_qbar = (b_qi * _exp(b_bi) * scale).to(dtype)
        b_vi = tl.load(v + (rows_i[:, None] * H + i_h) * V + o_v[None, :], mask=m_i[:, None] & m_v[None, :],
                       other=0.0)
        b_o = (tl.dot(b_qbar, b_h, input_precision=F32_DOT) + tl.dot(b_A.to(dtype), b_v, input_precision=F32_DOT)
               + tl.dot(b_Ad.to(dtype), b_vi, input_precision=F32_DOT))  # [BC, BV]
        tl.store(o + (rows_i[:, None] * H + i_h) * V + o_v[None, :], b_o.to(o.dtype.element_ty),
                 mask=m_i[:, None] & m_v[None, :])
        if SAVE:
            if i_v == 0:
                o_c = tl.arange(0, BC)
                p_A = A + (rows_i[:, None] * H + i_h) * BT
                own = (o_t >= i_sub * BC) & (o_t < i_sub * BC + BC)
                tl.store(p_A + o_t[None, :], b_A.to(A.dtype.element_ty), mask=m_i[:, None] & ~own[None, :])
                tl.store(p_A + i_sub * BC + o_c[None, :], b_Ad.to(A.dtype.element_ty), mask=m_i[:, None])


# ----------------------------------------------------------------------------- backward


@triton.autotune(configs=_configs("BV"), key=["H", "K", "V", "BT"],
                 prune_configs_by={"early_config_prune": _prune("BV", "do")})
@triton.jit
def chunk_dh_kernel(q, do, b, dht, cu_seqlens, bounds,  # inputs
                    dh0, dhs,  # outputs: dS_0 [N, H, K, V]; dH at each chunk's end [NS, H, K, V]
                    scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                    BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr):
    """(gla.7) dH ← exp(b_L) ⊙ dH + q̄ᵀ do over the chunks of one sequence, last chunk first."""
    i_nh, i_h, first_slot, n_chunks, o_k, o_v, m_k, m_v, m_h, p_state = _sweep_prologue(cu_seqlens, H, K, V, BT,
                                                                                        BK, BV)
    b_dh = tl.load(dht + i_nh * K * V + p_state, mask=m_h, other=0.0)  # [BK, BV]
    for c_rev in range(0, n_chunks):
        i_s = first_slot + n_chunks - 1 - c_rev
        tl.store(dhs + (i_s * H + i_h) * K * V + p_state, b_dh, mask=m_h)
        start, end = _chunk(bounds, i_s)
        rows = start + tl.arange(0, BT)
        m_t = rows < end
        b_do = tl.load(do + (rows[:, None] * H + i_h) * V + o_v[None, :], mask=m_t[:, None] & m_v[None, :],
                       other=0.0)
        b_bL = _row(b, end - 1, i_h, o_k, m_k, H, K)
        b_qbar = (_tile(q, rows, m_t, i_h, o_k, m_k, H, K) * _exp(_tile(b, rows, m_t, i_h, o_k, m_k, H, K))
                  * scale).to(b_do.dtype)
        b_dh = b_dh * _exp(b_bL)[:, None] + tl.dot(tl.trans(b_qbar), b_do, input_precision=F32_DOT)
    tl.store(dh0 + i_nh * K * V + p_state, b_dh, mask=m_h)


@triton.autotune(configs=_configs("BV"), key=["H", "K", "V", "BT"],
                 prune_configs_by={"early_config_prune": _prune("BV", "do")})
@triton.jit
def chunk_dv_kernel(k, do, b, A, dhs, bounds,  # inputs
                    dv,  # output [TT, H, V]
                    H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                    BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr):
    """(gla.8) dv = Aᵀ do + k̂ dH, with dH the gradient of the state at the chunk's end."""
    i_v, i_s, i_h = tl.program_id(0), tl.program_id(1).to(tl.int64), tl.program_id(2)
    start, end = _chunk(bounds, i_s)
    if start >= end:
        return
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    o_t = tl.arange(0, BT)
    rows = start + o_t
    m_t = rows < end
    b_do = tl.load(do + (rows[:, None] * H + i_h) * V + o_v[None, :], mask=m_t[:, None] & m_v[None, :], other=0.0)
    b_A = tl.load(A + (rows[:, None] * H + i_h) * BT + o_t[None, :], mask=m_t[:, None] & m_t[None, :], other=0.0)
    b_k = _tile(k, rows, m_t, i_h, o_k, m_k, H, K)
    b_b = _tile(b, rows, m_t, i_h, o_k, m_k, H, K)
    b_bL = _row(b, end - 1, i_h, o_k, m_k, H, K)
    b_khat = (b_k * _exp(b_bL[None, :] - b_b)).to(b_do.dtype).to(tl.float32)  # as the forward rounded it
    b_dh = tl.load(dhs + (i_s * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :],
                   mask=m_k[:, None] & m_v[None, :], other=0.0)  # [BK, BV]
    b_dv = (tl.dot(tl.trans(b_A.to(b_do.dtype)), b_do, input_precision=F32_DOT)
            + tl.dot(b_khat, b_dh, input_precision=F32_DOT))
    tl.store(dv + (rows[:, None] * H + i_h) * V + o_v[None, :], b_dv.to(dv.dtype.element_ty),
             mask=m_t[:, None] & m_v[None, :])


@triton.autotune(configs=_configs("BK", (16, 32, 64)), key=["H", "K", "V", "BT"],
                 prune_configs_by={"early_config_prune": _prune("BK", "q")})
@triton.jit
def chunk_dqkg_kernel(q, k, v, do, b, hs, dhs, bounds,  # inputs
                      dq, dk, dgk,  # outputs [TT, H, K]; dgk float32
                      scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                      BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr):
    """(gla.9) dq, dk and (gla.10) the log-decay gradient of one chunk, for one block of keys.

    Sub-chunks are visited last first, carrying Σ of the reverse-cumsum terms P of the later ones;
    the forward-cumsum term (Σ_{s<t} X_s) and the state term are written to dgk first and read back.
    """
    i_k, i_s, i_h = tl.program_id(0), tl.program_id(1).to(tl.int64), tl.program_id(2)
    start, end = _chunk(bounds, i_s)
    if start >= end:
        return
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    o_t = tl.arange(0, BT)
    rows = start + o_t
    m_t = rows < end
    p_state = (i_s * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :]
    m_h = m_k[:, None] & m_v[None, :]
    b_h = tl.load(hs + p_state, mask=m_h, other=0.0)  # [BK, BV] state at the chunk's start
    b_dh = tl.load(dhs + p_state, mask=m_h, other=0.0)  # [BK, BV] gradient of the state at its end
    b_v = tl.load(v + (rows[:, None] * H + i_h) * V + o_v[None, :], mask=m_t[:, None] & m_v[None, :], other=0.0)
    b_do = tl.load(do + (rows[:, None] * H + i_h) * V + o_v[None, :], mask=m_t[:, None] & m_v[None, :], other=0.0)
    dtype = b_v.dtype
    b_bL = _row(b, end - 1, i_h, o_k, m_k, H, K)  # [BK]

    # Σ_{s<t} X_s, X_s = k̂_s ⊙ (dH v_s): the rows shifted down by one, then an inclusive cumsum
    # (no total − suffix difference, whose terms would cancel under strong decay).
    prev = rows - 1
    m_p = m_t & (o_t > 0)
    b_vp = tl.load(v + (prev[:, None] * H + i_h) * V + o_v[None, :], mask=m_p[:, None] & m_v[None, :], other=0.0)
    b_xp = (_tile(k, prev, m_p, i_h, o_k, m_k, H, K) * _exp(b_bL[None, :] - _tile(b, prev, m_p, i_h, o_k, m_k, H, K))
            * tl.dot(b_vp.to(tl.float32), tl.trans(b_dh), input_precision=F32_DOT))  # [BT, BK]
    b_state = _exp(b_bL) * tl.sum(b_h * b_dh, axis=1)  # exp(b_L) ⊙ rowsum(h ⊙ dH)
    b_dg = tl.cumsum(b_xp, axis=0) + b_state[None, :]
    p_dg = dgk + (rows[:, None] * H + i_h) * K + o_k[None, :]
    tl.store(p_dg, b_dg, mask=m_t[:, None] & m_k[None, :])
    tl.debug_barrier()  # read back below by other threads of this program

    b_tail = tl.zeros([BK], tl.float32)  # Σ of P over the later sub-chunks
    for i_rev in tl.static_range(BT // BC):
        i_sub = BT // BC - 1 - i_rev
        rows_i, m_i, b_qi, b_ki, b_bi, b_k, b_b, b_bn, b_bm = _intra_tiles(q, k, b, i_sub, start, end, i_h, o_k,
                                                                           m_k, H, K, BT)
        b_q = _tile(q, rows, m_t, i_h, o_k, m_k, H, K)
        b_vi = tl.load(v + (rows_i[:, None] * H + i_h) * V + o_v[None, :], mask=m_i[:, None] & m_v[None, :],
                       other=0.0)
        b_doi = tl.load(do + (rows_i[:, None] * H + i_h) * V + o_v[None, :], mask=m_i[:, None] & m_v[None, :],
                        other=0.0)
        # dA[r, s] = do_r · v_s: this sub-chunk's rows, its columns, and its own block
        b_dA_rows = tl.dot(b_doi, tl.trans(b_v), input_precision=F32_DOT)  # [BC, BT]
        b_dA_cols = tl.dot(b_do, tl.trans(b_vi), input_precision=F32_DOT)  # [BT, BC]
        b_dA_own = tl.dot(b_doi, tl.trans(b_vi), input_precision=F32_DOT)  # [BC, BC]

        # (gla.6) queries of this sub-chunk against earlier keys, through its first row n
        earlier = o_t < i_sub * BC
        b_kn = tl.where(earlier[:, None], b_k * _exp(tl.where(earlier[:, None], b_bn[None, :] - b_b, 0.0)), 0.0)
        b_dq = _exp(b_bi - b_bn[None, :]) * tl.dot(tl.where(earlier[None, :], b_dA_rows, 0.0), b_kn,
                                                   input_precision=F32_DOT)
        # keys of this sub-chunk against later queries, through its last row m
        later = o_t >= i_sub * BC + BC
        b_qm = tl.where(later[:, None], b_q * _exp(tl.where(later[:, None], b_b - b_bm[None, :], 0.0)), 0.0)
        b_dk = _exp(b_bm[None, :] - b_bi) * tl.dot(tl.trans(tl.where(later[:, None], b_dA_cols, 0.0)), b_qm,
                                                   input_precision=F32_DOT)
        # the sub-chunk's own block, strictly below its diagonal
        b_ratio = _diagonal_ratio(b_bi, True) * b_dA_own[:, :, None]  # [BC, BC, BK]
        b_dq += tl.sum(b_ratio * b_ki[None, :, :], axis=1)
        b_dk += tl.sum(b_ratio * b_qi[:, None, :], axis=0)
        b_dq *= scale
        b_dk *= scale
        # (gla.10) P = q ⊙ dq_strict − k ⊙ dk_strict + q̄ ⊙ (do hᵀ): every diagonal term left out
        b_dqbar = tl.dot(b_doi, tl.trans(b_h.to(dtype)), input_precision=F32_DOT)  # [BC, BK]
        b_qbar = b_qi * _exp(b_bi) * scale
        b_p = b_qi * b_dq - b_ki * b_dk + b_qbar * b_dqbar
        # the diagonal terms (s = r), which carry no gate gradient
        o_c = tl.arange(0, BC)
        b_dA_diag = tl.sum(tl.where(o_c[:, None] == o_c[None, :], b_dA_own, 0.0), axis=1)  # [BC]
        b_dq += scale * b_dA_diag[:, None] * b_ki + _exp(b_bi) * scale * b_dqbar
        b_dkin = tl.dot(b_vi.to(tl.float32), tl.trans(b_dh), input_precision=F32_DOT)  # [BC, BK]
        b_dk += scale * b_dA_diag[:, None] * b_qi + _exp(b_bL[None, :] - b_bi) * b_dkin

        p_i = (rows_i[:, None] * H + i_h) * K + o_k[None, :]
        m_ik = m_i[:, None] & m_k[None, :]
        b_dgi = tl.load(dgk + p_i, mask=m_ik, other=0.0) + tl.cumsum(b_p, axis=0, reverse=True) + b_tail[None, :]
        b_tail += tl.sum(b_p, axis=0)
        tl.store(dq + p_i, b_dq.to(dq.dtype.element_ty), mask=m_ik)
        tl.store(dk + p_i, b_dk.to(dk.dtype.element_ty), mask=m_ik)
        tl.store(dgk + p_i, b_dgi, mask=m_ik)

"""`@triton.jit` steps every flash-attention kernel shares: sequences, tiles, masks, scores, and the per-tile
math of the forward (online softmax) and of the two backward passes. Tags refer to NOTES.md.

Every kernel sees packed sequences (`tl_helpers`): q `[1, TQ, H, D]`, k and v `[1, TK, HKV, D]`,
sequence n owning rows `cu_q[n] … cu_q[n+1]` and keys `cu_k[n] … cu_k[n+1]`. Inside a sequence
positions are local (i, j from 0) and the causal and window masks are aligned bottom-right through
off = Lk − Lq. Arrays that keep the caller's `[B, H, Tq]` / `[B, H, Tq, Tk]` layout (lse, Delta,
bias, its gradient, the dropout counters) are addressed by (b, row0 + i, col0 + j): b = n and
row0 = col0 = 0 for a fixed batch; b = 0 and row0, col0 = the sequence's packed start with
`cu_seqlens` (VARLEN).

Tiles of the score matrix are visited in three ranges (`key_tiles`, `query_tiles`): the tiles no
mask touches run without computing one; the tiles a mask cuts run with it; the tiles a mask
removes entirely are never visited.
"""

import triton
import triton.language as tl

from ..tl_helpers import LOG2E, sequence_bounds, tanh

LN2 = tl.constexpr(0.6931471805599453)


# Multipliers of the dropout hash (dropout.py states it): murmur3's fmix32 and two odd constants.
FMIX_1 = tl.constexpr(0x85EBCA6B)


FMIX_2 = tl.constexpr(0xC2B2AE35)


ROW_MUL = tl.constexpr(0x9E3779B1)


COL_MUL = tl.constexpr(0x85EBCA77)


# ----------------------------------------------------------------------------- sequences, tiles and masks


@triton.jit
def _u32(c: tl.constexpr):
    """A uint32 constant (a literal ≥ 2³¹ would be typed int64 and the products would not wrap)."""
    return tl.full([], c, tl.uint32)


@triton.jit
def _fmix32(x):
    x ^= x >> 16
    x *= _u32(FMIX_1)
    x ^= x >> 13
    x *= _u32(FMIX_2)
    x ^= x >> 16
    return x


@triton.jit
def dropout_keep(seeds, row, col, threshold):
    """(fa.11) Keep-mask of the counters row [R, 1] / col [1, C] (broadcastable), as dropout.py."""
    s0 = tl.load(seeds).to(tl.uint32, bitcast=True)
    s1 = tl.load(seeds + 1).to(tl.uint32, bitcast=True)
    r = _fmix32(row.to(tl.uint32) * _u32(ROW_MUL) + s0)
    u = _fmix32(r ^ (col.to(tl.uint32) * _u32(COL_MUL) + s1))
    return (u >> 8).to(tl.int32) >= threshold


@triton.jit
def sequence_pair(cu_q, cu_k, i_n, VARLEN: tl.constexpr):
    """Sequence i_n on both sides: (bos_q, bos_k, Lq, Lk, i_b, row0, col0). Lengths are 32-bit so
    that loop indices and tile offsets stay 32-bit; (i_b, row0, col0) address the `[B, H, Tq]` and
    `[B, H, Tq, Tk]` arrays as the module docstring says."""
    bos_q, eos_q = sequence_bounds(cu_q, i_n)
    bos_k, eos_k = sequence_bounds(cu_k, i_n)
    Lq, Lk = (eos_q - bos_q).to(tl.int32), (eos_k - bos_k).to(tl.int32)
    if VARLEN:
        i_b, row0, col0 = i_n * 0, bos_q, bos_k
    else:
        i_b, row0, col0 = i_n, bos_q * 0, bos_k * 0
    return bos_q, bos_k, Lq, Lk, i_b, row0, col0


@triton.jit
def head_and_sequence(i_nh, cu_q, cu_k, H: tl.constexpr, HKV: tl.constexpr, VARLEN: tl.constexpr):
    """A program axis over (sequence, query head), i_nh = n · H + h: (h, its kv head, and `sequence_pair`
    of sequence n)."""
    i_n, i_h = i_nh // H, i_nh % H
    bos_q, bos_k, Lq, Lk, i_b, row0, col0 = sequence_pair(cu_q, cu_k, i_n, VARLEN)
    return i_h, i_h // (H // HKV), bos_q, bos_k, Lq, Lk, i_b, row0, col0


@triton.jit
def load_rows(ptrs, o_row, L, o_d, D: tl.constexpr, BD: tl.constexpr, CHECK_ROWS: tl.constexpr):
    """Load a [rows, BD] tile; masks only what can be out of bounds (rows past L, columns past D)."""
    if CHECK_ROWS:
        if BD == D:
            x = tl.load(ptrs, mask=(o_row < L)[:, None], other=0.0)
        else:
            x = tl.load(ptrs, mask=(o_row < L)[:, None] & (o_d < D)[None, :], other=0.0)
    else:
        if BD == D:
            x = tl.load(ptrs)
        else:
            x = tl.load(ptrs, mask=(o_d < D)[None, :], other=0.0)
    return x


@triton.jit
def rows_descriptor(base, bos, L, head, HEADS: tl.constexpr, D: tl.constexpr, BR: tl.constexpr, BD: tl.constexpr):
    """A tensor descriptor of one head's rows of one sequence of a packed `[T, HEADS, D]` array: the [L, D]
    tensor at row `bos`, row stride HEADS·D, read a [BR, BD] box at a time (rows past L and columns past D
    read as 0). An empty sequence gets a one-row tensor at the array's first row instead: a tensor map's
    dimensions must be at least 1, and its rows are never used (every store of such a program is masked)."""
    start = tl.where(L > 0, bos * HEADS + head, head) * D
    return tl.make_tensor_descriptor(base + start, shape=[tl.maximum(L, 1), D], strides=[HEADS * D, 1],
                                     block_shape=[BR, BD])


@triton.jit
def rows_mask(o_row, L, o_d, D: tl.constexpr, BD: tl.constexpr):
    """The mask of a [rows, BD] tile's stores: rows before L, columns before D."""
    m = (o_row < L)[:, None]
    if BD != D:
        m = m & (o_d < D)[None, :]
    return m


@triton.jit
def row_stats(lse2_rows, delta_rows, o_i, Lq):
    """(lse₂, Delta) of query rows o_i (pointers to row 0 of the head's stats); rows past Lq read lse₂ = +∞
    and Delta = 0, so their P is 0 (fa.10)."""
    return (tl.load(lse2_rows + o_i, mask=o_i < Lq, other=float("inf")),
            tl.load(delta_rows + o_i, mask=o_i < Lq, other=0.0))


@triton.jit
def visible(i, j, Lk, off, window_left, window_right, q_seg, kv_seg,
            CAUSAL: tl.constexpr, WINDOW: tl.constexpr, HAS_SEGMENTS: tl.constexpr):
    """(fa.1) Which (i, j) a query sees: local positions i, j broadcastable to the tile, keys past Lk
    never; causal j − off ≤ i; window i − left ≤ j − off ≤ i + right; equal segment ids.

    The bounds are formed per row first (i's shape), so each element costs one compare per bound (the
    element-wise j − off − i cost an add, a compare and a logical op more). SASS instructions of the
    causal bf16 D=128 kernels for sm_90, read on a CPU compile, before → after: banded forward
    2334 → 2182, dK/dV with atomic dQ 4909 → 4813, dQ pass 1582 → 1502."""
    last = i * 0 + (Lk - 1)
    if CAUSAL:
        last = tl.minimum(last, i + off)
    if WINDOW:
        last = tl.minimum(last, i + off + window_right)
    m = j <= last
    if WINDOW:
        m = m & (j >= i + off - window_left)
    if HAS_SEGMENTS:
        m = m & (q_seg == kv_seg)
    return m


@triton.jit
def key_tiles(m0, Lk, off, window_left, window_right, BM: tl.constexpr, BN: tl.constexpr,
              CAUSAL: tl.constexpr, WINDOW: tl.constexpr, HAS_SEGMENTS: tl.constexpr):
    """Key tiles for query rows [m0, m0 + BM): [lo, a) masked, [a, b) unmasked, [b, hi) masked.

    Row i sees keys j ≤ i + off (causal), i + off − left ≤ j ≤ i + off + right (window), j < Lk.
    A tile is unmasked when every row of the block sees all of it.
    """
    lo = 0
    hi = Lk
    full_lo = 0
    full_hi = Lk
    if CAUSAL:
        hi = tl.minimum(hi, m0 + BM + off)
        full_hi = tl.minimum(full_hi, m0 + off + 1)
    if WINDOW:
        hi = tl.minimum(hi, m0 + BM + off + window_right)
        full_hi = tl.minimum(full_hi, m0 + off + window_right + 1)
        lo = tl.maximum(lo, m0 + off - window_left)
        full_lo = tl.maximum(full_lo, m0 + BM - 1 + off - window_left)
    lo = (lo // BN) * BN  # lo ≥ 0: floor division of non-negative integers
    a = tl.minimum(tl.maximum(tl.cdiv(full_lo, BN) * BN, lo), hi)
    b = tl.minimum(tl.maximum((tl.maximum(full_hi, 0) // BN) * BN, a), hi)
    if HAS_SEGMENTS:  # segment ids can cut any tile
        a = lo
        b = lo
    return lo, a, b, hi


@triton.jit
def query_tiles(n0, Lq, off, window_left, window_right, BM: tl.constexpr, BN: tl.constexpr,
                CAUSAL: tl.constexpr, WINDOW: tl.constexpr, HAS_SEGMENTS: tl.constexpr):
    """Query tiles for key columns [n0, n0 + BN): [lo, a) masked, [a, b) unmasked, [b, hi) masked.

    Key j is seen by rows i ≥ j − off (causal) and j − off − right ≤ i ≤ j − off + left (window).
    Rows past Lq need no mask here: their q and dO load as 0 and their lse as +inf, so P = 0.
    """
    lo = 0
    hi = Lq
    full_lo = 0
    full_hi = Lq
    if CAUSAL:
        lo = tl.maximum(lo, n0 - off)
        full_lo = tl.maximum(full_lo, n0 + BN - 1 - off)
    if WINDOW:
        lo = tl.maximum(lo, n0 - off - window_right)
        full_lo = tl.maximum(full_lo, n0 + BN - 1 - off - window_right)
        hi = tl.minimum(hi, n0 + BN - off + window_left)
        full_hi = tl.minimum(full_hi, n0 - off + window_left + 1)
    else:
        full_hi = tl.cdiv(full_hi, BM) * BM  # a ragged last tile needs no mask (see above)
    lo = (lo // BM) * BM
    a = tl.minimum(tl.maximum(tl.cdiv(full_lo, BM) * BM, lo), tl.maximum(hi, lo))
    b = tl.minimum(tl.maximum((tl.maximum(full_hi, 0) // BM) * BM, a), tl.maximum(hi, a))
    if HAS_SEGMENTS:
        a = lo
        b = lo
    return lo, a, b, hi


@triton.jit
def scores(b_qk, b_bias, scale, softcap, HAS_BIAS: tl.constexpr, SOFTCAP: tl.constexpr):
    """(fa.1, fa.4) (x, c, t): the base-2 logits are x · c, and t = tanh(s_raw / softcap) feeds the
    softcap's Jacobian. Without bias or softcap x is q·kᵀ itself and c = scale · log2 e, so each
    exponent x · c − m is one fused multiply-add."""
    if HAS_BIAS or SOFTCAP:
        s = b_qk * scale
        if HAS_BIAS:
            s += b_bias
        if SOFTCAP:
            t = tanh(s / softcap)
            s = softcap * t
        else:
            t = s
        x = s * LOG2E
        c = 1.0
    else:
        x = b_qk
        c = scale * LOG2E
        t = b_qk
    return x, c, t


# ----------------------------------------------------------------------------- forward step


@triton.jit
def softmax_step(acc, m_i, l_i, b_q, b_k, b_v, o_i, o_j, Lq, Lk, off, bias_head, row0, col0, TK_OUT,
                  q_seg_base, b_sk, seeds, drop_row0, keep_threshold, scale, softcap, window_left, window_right,
                  MASKED: tl.constexpr, F32: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr,
                  SOFTCAP: tl.constexpr, DROPOUT: tl.constexpr, HAS_BIAS: tl.constexpr,
                  HAS_SEGMENTS: tl.constexpr):
    """(fa.2) One key tile for one block of rows o_i: the running max m_i, sum l_i and acc = Σ p v."""
    if F32:
        b_qk = tl.dot(b_q, tl.trans(b_k), input_precision="ieee")  # [R, BN]
    else:
        b_qk = tl.dot(b_q, tl.trans(b_k))
    b_bias = 0.0
    if HAS_BIAS:
        b_bias = tl.load(bias_head + (row0 + o_i[:, None]).to(tl.int64) * TK_OUT + col0 + o_j[None, :],
                         mask=(o_i[:, None] < Lq) & (o_j[None, :] < Lk), other=0.0).to(tl.float32)
    b_x, c, _ = scores(b_qk, b_bias, scale, softcap, HAS_BIAS, SOFTCAP)
    if MASKED:
        b_sq = 0
        if HAS_SEGMENTS:
            b_sq = tl.load(q_seg_base + o_i, mask=o_i < Lq, other=0)[:, None]
        m = visible(o_i[:, None], o_j[None, :], Lk, off, window_left, window_right, b_sq, b_sk,
                    CAUSAL, WINDOW, HAS_SEGMENTS)
        b_x = tl.where(m, b_x, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(b_x, 1) * c)
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing seen so far
    else:
        m_new = tl.maximum(m_i, tl.max(b_x, 1) * c)
        m_use = m_new
    b_p = tl.exp2(b_x * c - m_use[:, None])  # [R, BN]
    alpha = tl.exp2(m_i - m_use)
    l_i = l_i * alpha + tl.sum(b_p, 1)
    if DROPOUT:
        keep = dropout_keep(seeds, (drop_row0 + o_i)[:, None], col0 + o_j[None, :], keep_threshold)
        b_p = tl.where(keep, b_p, 0.0)
    acc = acc * alpha[:, None]
    if F32:
        acc = tl.dot(b_p, b_v, acc, input_precision="ieee")
    else:
        acc = tl.dot(b_p.to(b_v.dtype), b_v, acc)
    return acc, m_new, l_i


@triton.jit
def fwd_init(sinks, i_h, R: tl.constexpr, BD: tl.constexpr, HAS_SINKS: tl.constexpr):
    """(fa.1) Running max, sum and accumulator before the first key; a sink joins the denominator as
    a logit with no value."""
    if HAS_SINKS:
        sink2 = tl.load(sinks + i_h).to(tl.float32) * LOG2E
        m_i = tl.zeros([R], tl.float32) + sink2
        l_i = tl.where(m_i == float("-inf"), 0.0, 1.0)
    else:
        m_i = tl.full([R], float("-inf"), tl.float32)
        l_i = tl.zeros([R], tl.float32)
    return tl.zeros([R, BD], tl.float32), m_i, l_i


@triton.jit
def fwd_store(acc, m_i, l_i, o_i, o, lse, o_f32, o_head, lse_head, Lq, inv_keep,
               H: tl.constexpr, D: tl.constexpr, BD: tl.constexpr, KEEP_F32: tl.constexpr):
    """o and lse of one block of rows; (fa.10) a row that saw nothing has l = 0: o = 0, lse = −inf."""
    o_d = tl.arange(0, BD)
    l_safe = tl.where(l_i > 0.0, l_i, 1.0)
    b_o = acc * (inv_keep / l_safe)[:, None]
    b_lse = (m_i + tl.log2(l_i)) * LN2  # (fa.4)
    o_off = o_head + o_i[:, None] * (H * D) + o_d[None, :]
    m_store = rows_mask(o_i, Lq, o_d, D, BD)
    tl.store(o + o_off, b_o.to(o.dtype.element_ty), mask=m_store)
    if KEEP_F32:  # (fa.5) for the backward's Delta: rowsum(dO ∘ O) of the unrounded O
        tl.store(o_f32 + o_off, b_o, mask=m_store)
    tl.store(lse + lse_head + o_i, b_lse, mask=o_i < Lq)


def fwd_configs(split: bool, blocks):
    return [triton.Config({"BM": BM, "BN": BN, "SPLIT": split}, num_warps=w, num_stages=s) for BM, BN, w, s in blocks]


FWD_KEY = ["H", "HKV", "D", "CAUSAL", "WINDOW", "SOFTCAP", "DROPOUT", "F32"]


# ----------------------------------------------------------------------------- backward steps


@triton.jit
def dkdv_step(b_dk, b_dv, b_k, b_v, b_q, b_do, b_lse2, b_delta, o_i, o_j, Lk, off, b_bias, b_sq, b_sk,
               seeds, drop_row0, drop_col, keep_threshold, inv_keep, scale, softcap, window_left, window_right,
               MASKED: tl.constexpr, F32: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr,
               SOFTCAP: tl.constexpr, DROPOUT: tl.constexpr, HAS_BIAS: tl.constexpr,
               HAS_SEGMENTS: tl.constexpr):
    """(fa.5) One query tile [BM] against the key block [BN], in the transposed tile Sᵀ [BN, BM]:
    dV += P_dᵀ dO, dK += dSᵀ Q (unscaled); returns them and dSᵀ (for dQ and the bias gradient)."""
    if F32:
        b_qkT = tl.dot(b_k, tl.trans(b_q), input_precision="ieee")  # [BN, BM]
    else:
        b_qkT = tl.dot(b_k, tl.trans(b_q))
    b_x, c, b_t = scores(b_qkT, b_bias, scale, softcap, HAS_BIAS, SOFTCAP)
    b_pT = tl.exp2(b_x * c - b_lse2[None, :])  # [BN, BM]
    if MASKED:
        m = visible(o_i[None, :], o_j[:, None], Lk, off, window_left, window_right, b_sq, b_sk,
                    CAUSAL, WINDOW, HAS_SEGMENTS)
        b_pT = tl.where(m, b_pT, 0.0)
    if F32:
        b_dpT = tl.dot(b_v, tl.trans(b_do), input_precision="ieee")  # [BN, BM]
    else:
        b_dpT = tl.dot(b_v, tl.trans(b_do))
    if DROPOUT:  # (fa.11)
        keep = dropout_keep(seeds, drop_row0 + o_i[None, :], drop_col, keep_threshold)
        b_pdT = tl.where(keep, b_pT * inv_keep, 0.0)
        b_dpT = tl.where(keep, b_dpT * inv_keep, 0.0)
    else:
        b_pdT = b_pT
    b_dsT = b_pT * (b_dpT - b_delta[None, :])  # (fa.5)
    if SOFTCAP:
        b_dsT = b_dsT * (1.0 - b_t * b_t)  # (fa.6)
    if F32:
        b_dv = tl.dot(b_pdT, b_do, b_dv, input_precision="ieee")
        b_dk = tl.dot(b_dsT, b_q, b_dk, input_precision="ieee")
    else:
        b_dv = tl.dot(b_pdT.to(b_do.dtype), b_do, b_dv)
        b_dk = tl.dot(b_dsT.to(b_q.dtype), b_q, b_dk)
    return b_dk, b_dv, b_dsT


def bwd_configs(blocks):
    return [triton.Config({"BM": BM, "BN": BN}, num_warps=w, num_stages=s) for BM, BN, w, s in blocks]


BWD_KEY = ["H", "HKV", "D", "CAUSAL", "WINDOW", "SOFTCAP", "DROPOUT", "F32"]


@triton.jit
def dq_step(b_dq, b_q, b_do, b_lse2, b_delta, b_k, b_v, o_i, o_j, Lk, off, b_bias, b_sq, b_sk, seeds, drop_row,
             drop_col0, keep_threshold, inv_keep, scale, softcap, window_left, window_right,
             MASKED: tl.constexpr, F32: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr,
             SOFTCAP: tl.constexpr, DROPOUT: tl.constexpr, HAS_BIAS: tl.constexpr,
             HAS_SEGMENTS: tl.constexpr):
    """(fa.5) One key tile [BN] for the query rows [BM]: dQ += dS K (unscaled); returns it and dS."""
    if F32:
        b_qk = tl.dot(b_q, tl.trans(b_k), input_precision="ieee")  # [BM, BN]
    else:
        b_qk = tl.dot(b_q, tl.trans(b_k))
    b_x, c, b_t = scores(b_qk, b_bias, scale, softcap, HAS_BIAS, SOFTCAP)
    b_p = tl.exp2(b_x * c - b_lse2[:, None])  # [BM, BN]
    if MASKED:
        m = visible(o_i[:, None], o_j[None, :], Lk, off, window_left, window_right, b_sq, b_sk,
                    CAUSAL, WINDOW, HAS_SEGMENTS)
        b_p = tl.where(m, b_p, 0.0)
    if F32:
        b_dp = tl.dot(b_do, tl.trans(b_v), input_precision="ieee")  # [BM, BN]
    else:
        b_dp = tl.dot(b_do, tl.trans(b_v))
    if DROPOUT:  # (fa.11)
        keep = dropout_keep(seeds, drop_row[:, None], drop_col0 + o_j[None, :], keep_threshold)
        b_dp = tl.where(keep, b_dp * inv_keep, 0.0)
    b_ds = b_p * (b_dp - b_delta[:, None])  # (fa.5)
    if SOFTCAP:
        b_ds = b_ds * (1.0 - b_t * b_t)  # (fa.6)
    if F32:
        b_dq = tl.dot(b_ds, b_k, b_dq, input_precision="ieee")
    else:
        b_dq = tl.dot(b_ds.to(b_k.dtype), b_k, b_dq)
    return b_dq, b_ds

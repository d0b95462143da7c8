"""Flash attention in Triton: the forward (online softmax, NOTES.md fa.2/fa.4) and the backward, by
default one pass per key block for dK, dV (fa.5, fa.9) that also adds each tile's share of dQ into
float32 rows with atomics and writes the bias gradient (fa.12, fa.8); with `Tuning(dq="pass")` a second
pass per query block forms dQ and the bias gradient instead (reproducible bit for bit).

Every kernel sees packed sequences (`tl_helpers`): q `[1, TQ, H, D]`, k and v `[1, TK, HKV, D]`,
sequence n owning rows `cu_q[n] … cu_q[n+1]` and keys `cu_k[n] … cu_k[n+1]`. Inside a sequence
positions are local (i, j from 0) and the causal and window masks are aligned bottom-right through
off = Lk − Lq. Arrays that keep the caller's `[B, H, Tq]` / `[B, H, Tq, Tk]` layout (lse, Delta,
bias, its gradient, the dropout counters) are addressed by (b, row0 + i, col0 + j): b = n and
row0 = col0 = 0 for a fixed batch; b = 0 and row0, col0 = the sequence's packed start with
`cu_seqlens` (VARLEN).

Tiles of the score matrix are visited in three ranges (`key_tiles`, `query_tiles`): the tiles no
mask touches run without computing one; the tiles a mask cuts run with it; the tiles a mask
removes entirely are never visited. Feature flags (CAUSAL, WINDOW, SOFTCAP, DROPOUT, and the
optional bias, segment ids and sinks found with `given`) each remove work when off, so a plain
causal or non-causal call compiles to the bare kernel; they are many for one kernel (STYLE.md asks
for three), but splitting them into kernels would copy the online softmax once per combination.
"""

import triton
import triton.language as tl

from ..launch import given, is_given
from ..tl_helpers import LOG2E, sequence_bounds, tanh

LN2 = tl.constexpr(0.6931471805599453)
# Multipliers of the dropout hash (dropout.py states it): murmur3's fmix32 and two odd constants.
FMIX_1 = tl.constexpr(0x85EBCA6B)
FMIX_2 = tl.constexpr(0xC2B2AE35)
ROW_MUL = tl.constexpr(0x9E3779B1)
COL_MUL = tl.constexpr(0x85EBCA77)


# ----------------------------------------------------------------------------- tile helpers


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
def attention_descriptors(q, k, v, do, bos_q, bos_k, Lq, Lk, i_h, i_hk, H: tl.constexpr, HKV: tl.constexpr,
                          D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr):
    """`rows_descriptor`s of one program's query head (q, dO: [BM, BD] boxes) and kv head (k, v: [BN, BD])."""
    return (rows_descriptor(q, bos_q, Lq, i_h, H, D, BM, BD), rows_descriptor(k, bos_k, Lk, i_hk, HKV, D, BN, BD),
            rows_descriptor(v, bos_k, Lk, i_hk, HKV, D, BN, BD), rows_descriptor(do, bos_q, Lq, i_h, H, D, BM, BD))


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
    causal bf16 D=128 kernels for sm_90, read on a CPU compile, before → after: warp-specialized
    forward 3488 → 2840, banded forward 2334 → 2182, dK/dV with atomic dQ 4909 → 4813, dQ pass
    1582 → 1502."""
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


# ----------------------------------------------------------------------------- forward


@triton.jit
def _softmax_step(acc, m_i, l_i, b_q, b_k, b_v, o_i, o_j, Lq, Lk, off, bias_head, row0, col0, TK_OUT,
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
def _fwd_tiles(acc_a, m_a, l_a, acc_b, m_b, l_b, b_qa, b_qb, o_a, o_b, k_base, v_base, lo, hi, reach, Lq, Lk,
               off, bias_head, row0, col0, TK_OUT, q_seg_base, kv_seg_base, seeds, drop_row0, keep_threshold,
               scale, softcap, window_left, window_right,
               HKV: tl.constexpr, D: tl.constexpr, BD: tl.constexpr, BN: tl.constexpr,
               MASKED: tl.constexpr, F32: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr,
               SOFTCAP: tl.constexpr, DROPOUT: tl.constexpr, HAS_BIAS: tl.constexpr,
               HAS_SEGMENTS: tl.constexpr, SPLIT: tl.constexpr, TMA: tl.constexpr):
    """(fa.2) Key tiles [lo, hi) for the row block, split (SPLIT) into halves a and b or whole (a):
    each K, V tile is loaded once and feeds two independent online softmaxes, so one half's
    exponentials can run while the other half's matrix products are in flight. In a masked range a
    half skips the tiles outside its own reach = (lo_a, hi_a, lo_b, hi_b) (a causal diagonal or a
    window edge cuts the halves apart). With TMA, k_base and v_base are tensor descriptors of the
    sequence's keys (rows past Lk and columns past D read as 0, as the masked loads give)."""
    o_d = tl.arange(0, BD)
    for j0 in range(lo, hi, BN):
        o_j = j0 + tl.arange(0, BN)
        if TMA:
            b_k = k_base.load([j0, 0])  # [BN, BD]
            b_v = v_base.load([j0, 0])  # [BN, BD]
        else:
            b_k = load_rows(k_base + o_j[:, None] * (HKV * D) + o_d[None, :], o_j, Lk, o_d, D, BD, MASKED)
            b_v = load_rows(v_base + o_j[:, None] * (HKV * D) + o_d[None, :], o_j, Lk, o_d, D, BD, MASKED)
        b_sk = 0
        if MASKED and HAS_SEGMENTS:
            b_sk = tl.load(kv_seg_base + o_j, mask=o_j < Lk, other=0)[None, :]
        lo_a, hi_a, lo_b, hi_b = reach
        if (not MASKED) or ((j0 >= lo_a) & (j0 < hi_a)):
            acc_a, m_a, l_a = _softmax_step(acc_a, m_a, l_a, b_qa, b_k, b_v, o_a, o_j, Lq, Lk, off, bias_head, row0,
                                            col0, TK_OUT, q_seg_base, b_sk, seeds, drop_row0, keep_threshold, scale,
                                            softcap, window_left, window_right, MASKED, F32, CAUSAL, WINDOW, SOFTCAP,
                                            DROPOUT, HAS_BIAS, HAS_SEGMENTS)
        if SPLIT and ((not MASKED) or ((j0 >= lo_b) & (j0 < hi_b))):
            acc_b, m_b, l_b = _softmax_step(acc_b, m_b, l_b, b_qb, b_k, b_v, o_b, o_j, Lq, Lk, off, bias_head, row0,
                                            col0, TK_OUT, q_seg_base, b_sk, seeds, drop_row0, keep_threshold, scale,
                                            softcap, window_left, window_right, MASKED, F32, CAUSAL, WINDOW, SOFTCAP,
                                            DROPOUT, HAS_BIAS, HAS_SEGMENTS)
    return acc_a, m_a, l_a, acc_b, m_b, l_b


@triton.jit
def _fwd_init(sinks, i_h, R: tl.constexpr, BD: tl.constexpr, HAS_SINKS: tl.constexpr):
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
def _fwd_store(acc, m_i, l_i, o_i, o, lse, o_f32, o_head, lse_head, Lq, inv_keep,
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


def _fwd_configs(split: bool, blocks):
    return [triton.Config({"BM": BM, "BN": BN, "SPLIT": split}, num_warps=w, num_stages=s) for BM, BN, w, s in blocks]


# H200, bf16 B=4 T=4096 H=16 D=128, ms per call of 10 issued back to back, non-causal / causal, cuDNN
# 0.95–0.99 / 0.56–0.59 in the same runs. Rows split in two halves: (256, 64, 8, 3) 1.10–1.20 / 0.77;
# whole blocks: (128, 64, 8, 3) 1.20 / 0.71, (128, 128, 8, 3) 1.18–1.20 / 0.69–0.70, (128, 64, 8, 2)
# 1.53 / 0.92, (256, 64, 16, 2) 1.44 / 0.88; halves of 64 rows: (128, 64, 8, 3) 2.28. With a causal
# mask (or a window) the halves see different key ranges and the split loses; there the whole blocks
# run, last block first. (64, 32, 4, 2) is the fallback that fits D = 256 and float32.
FWD_CONFIGS = _fwd_configs(True, [(256, 64, 8, 3), (128, 64, 8, 3)]) + _fwd_configs(False, [(64, 32, 4, 2)])
FWD_BANDED_CONFIGS = _fwd_configs(False, [(128, 128, 8, 3), (128, 64, 8, 3), (64, 32, 4, 2)])


def _head_block(named_args) -> int:
    """BD of a launch, from q's head dim (autotuners hand prune functions the arrays, not constexprs)."""
    return max(16, triton.next_power_of_2(named_args["q"].shape[-1]))


def _prune_large_heads(configs, named_args, **kwargs):
    """One config per launch, so the choice is the measured one and not a noisy benchmark's.

    jax-triton's autotuner (one short benchmark per config inside XLA) picked configs 10–20 % slower
    than the best in an H200 run, so each list is ordered best-first and the first entry runs. Past
    D = 128, and for float32 (exact `ieee` dots on 4-byte tiles), only the last config of each list,
    its small-tile fallback, fits in shared memory. The interpreter's tests run every config.
    """
    if _head_block(named_args) > 128 or "float32" in str(named_args["q"].dtype):
        return configs[-1:]
    if is_given(named_args.get("bias")):
        # a bias tile per key block is staged too: (128, 128, 8, 3) then asks for 256 KiB of shared
        # memory (sm_90 has 227 KiB); the first config with at most 128 × 64 logits per tile fits
        return [next(c for c in configs if c.kwargs["BM"] * c.kwargs["BN"] <= 128 * 64)]
    return configs[:1]


@triton.heuristics({"HAS_BIAS": given("bias"), "HAS_SEGMENTS": given("q_seg"), "HAS_SINKS": given("sinks")})
@triton.jit
def flash_fwd_kernel(q, k, v, cu_q, cu_k, bias, q_seg, kv_seg, sinks, seeds,
                     o, lse, o_f32,
                     scale, softcap, window_left, window_right, keep_threshold, inv_keep,
                     bias_stride_b, bias_stride_h, TQ_OUT, TK_OUT,
                     H: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, BD: tl.constexpr,
                     CAUSAL: tl.constexpr, WINDOW: tl.constexpr, SOFTCAP: tl.constexpr,
                     DROPOUT: tl.constexpr, VARLEN: tl.constexpr, F32: tl.constexpr, KEEP_F32: tl.constexpr,
                     HAS_BIAS: tl.constexpr, HAS_SEGMENTS: tl.constexpr, HAS_SINKS: tl.constexpr,
                     TMA: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, SPLIT: tl.constexpr):
    """o and lse for query rows [m0, m0 + BM) of one (sequence, head), with SPLIT in two halves of
    BM / 2 rows that share every K, V tile; with KEEP_F32 also o in float32 (before rounding to o's
    dtype), which a backward will follow. Row blocks run last-first: under a causal mask the late
    blocks have the most keys, and starting them first shortens the tail of the launch."""
    i_m = tl.num_programs(0) - 1 - tl.program_id(0)
    i_nh = tl.program_id(1)
    i_h, i_hk, bos_q, bos_k, Lq, Lk, i_b, row0, col0 = head_and_sequence(i_nh, cu_q, cu_k, H, HKV, VARLEN)
    m0 = i_m * BM
    if m0 >= Lq:
        return
    off = Lk - Lq
    HALF: tl.constexpr = BM // 2 if SPLIT else BM

    o_a = m0 + tl.arange(0, HALF)
    o_b = o_a + HALF
    o_d = tl.arange(0, BD)
    q_base = q + (bos_q * H + i_h) * D
    b_qa = load_rows(q_base + o_a[:, None] * (H * D) + o_d[None, :], o_a, Lq, o_d, D, BD, True)  # [BM/2, BD]
    if SPLIT:
        b_qb = load_rows(q_base + o_b[:, None] * (H * D) + o_d[None, :], o_b, Lq, o_d, D, BD, True)  # [BM/2, BD]
    else:
        b_qb = b_qa
    k_base = k + (bos_k * HKV + i_hk) * D
    v_base = v + (bos_k * HKV + i_hk) * D
    if TMA:  # the sequence's keys of this kv head as [Lk, D] tensors read a [BN, BD] box at a time
        k_base = rows_descriptor(k, bos_k, Lk, i_hk, HKV, D, BN, BD)
        v_base = rows_descriptor(v, bos_k, Lk, i_hk, HKV, D, BN, BD)
    bias_head = bias + i_b * bias_stride_b + i_h * bias_stride_h
    drop_row0 = (i_b * H + i_h) * TQ_OUT + row0  # (fa.11) counters of dropout.py

    acc_a, m_a, l_a = _fwd_init(sinks, i_h, HALF, BD, HAS_SINKS)
    acc_b, m_b, l_b = _fwd_init(sinks, i_h, HALF, BD, HAS_SINKS)
    lo, a, b, hi = key_tiles(m0, Lk, off, window_left, window_right, BM, BN, CAUSAL, WINDOW, HAS_SEGMENTS)
    lo_a, _, _, hi_a = key_tiles(m0, Lk, off, window_left, window_right, HALF, BN, CAUSAL, WINDOW, HAS_SEGMENTS)
    lo_b, _, _, hi_b = key_tiles(m0 + HALF, Lk, off, window_left, window_right, HALF, BN, CAUSAL, WINDOW,
                                 HAS_SEGMENTS)
    reach = (lo_a, hi_a, lo_b, hi_b)
    acc_a, m_a, l_a, acc_b, m_b, l_b = _fwd_tiles(
        acc_a, m_a, l_a, acc_b, m_b, l_b, b_qa, b_qb, o_a, o_b, k_base, v_base, lo, a, reach, Lq, Lk, off,
        bias_head, row0, col0, TK_OUT, q_seg + bos_q, kv_seg + bos_k, seeds, drop_row0, keep_threshold,
        scale, softcap, window_left, window_right, HKV, D, BD, BN, True, F32,
        CAUSAL, WINDOW, SOFTCAP, DROPOUT, HAS_BIAS, HAS_SEGMENTS, SPLIT, TMA)
    acc_a, m_a, l_a, acc_b, m_b, l_b = _fwd_tiles(
        acc_a, m_a, l_a, acc_b, m_b, l_b, b_qa, b_qb, o_a, o_b, k_base, v_base, a, b, reach, Lq, Lk, off,
        bias_head, row0, col0, TK_OUT, q_seg + bos_q, kv_seg + bos_k, seeds, drop_row0, keep_threshold,
        scale, softcap, window_left, window_right, HKV, D, BD, BN, False, F32,
        CAUSAL, WINDOW, SOFTCAP, DROPOUT, HAS_BIAS, HAS_SEGMENTS, SPLIT, TMA)
    acc_a, m_a, l_a, acc_b, m_b, l_b = _fwd_tiles(
        acc_a, m_a, l_a, acc_b, m_b, l_b, b_qa, b_qb, o_a, o_b, k_base, v_base, b, hi, reach, Lq, Lk, off,
        bias_head, row0, col0, TK_OUT, q_seg + bos_q, kv_seg + bos_k, seeds, drop_row0, keep_threshold,
        scale, softcap, window_left, window_right, HKV, D, BD, BN, True, F32,
        CAUSAL, WINDOW, SOFTCAP, DROPOUT, HAS_BIAS, HAS_SEGMENTS, SPLIT, TMA)

    o_head = (bos_q * H + i_h) * D
    lse_head = (i_b * H + i_h) * TQ_OUT + row0
    _fwd_store(acc_a, m_a, l_a, o_a, o, lse, o_f32, o_head, lse_head, Lq, inv_keep, H, D, BD, KEEP_F32)
    if SPLIT:
        _fwd_store(acc_b, m_b, l_b, o_b, o, lse, o_f32, o_head, lse_head, Lq, inv_keep, H, D, BD, KEEP_F32)


_FWD_KEY = ["H", "HKV", "D", "CAUSAL", "WINDOW", "SOFTCAP", "DROPOUT", "F32"]
flash_fwd_split_kernel = triton.autotune(configs=FWD_CONFIGS, key=_FWD_KEY,
                                         prune_configs_by={"early_config_prune": _prune_large_heads})(flash_fwd_kernel)
flash_fwd_banded_kernel = triton.autotune(configs=FWD_BANDED_CONFIGS, key=_FWD_KEY,
                                          prune_configs_by={"early_config_prune": _prune_large_heads})(flash_fwd_kernel)



# Whole 128-row blocks at 4 warps: Triton 3.6 warp-specializes the key loop on sm_90 only at 4 warps
# and then runs 12 (a TMA producer warp group and two consumer warp groups of 64 rows each, read on a
# CPU compile, NOTES "The warp-specialized forward"). Best-first by guess (not timed yet); the tests in
# the interpreter run every config, and each compiles specialized (tests/test_compile_check.py).
FWD_SPECIALIZED_CONFIGS = _fwd_configs(False, [(128, 128, 4, 2), (128, 64, 4, 2), (64, 64, 4, 2)])


def _keys_whole(args) -> bool:
    """Every key tile of every sequence is whole: one sequence length Tk (no packing), a multiple of BN."""
    return not args["VARLEN"] and args["TK_OUT"] % args["BN"] == 0


@triton.heuristics({"HAS_SINKS": given("sinks"), "KEYS_WHOLE": _keys_whole})
@triton.jit
def flash_fwd_specialized(q, k, v, cu_q, cu_k, bias, q_seg, kv_seg, sinks, seeds,
                          o, lse, o_f32,
                          scale, softcap, window_left, window_right, keep_threshold, inv_keep,
                          bias_stride_b, bias_stride_h, TQ_OUT, TK_OUT,
                          H: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, BD: tl.constexpr,
                          CAUSAL: tl.constexpr, WINDOW: tl.constexpr, SOFTCAP: tl.constexpr,
                          DROPOUT: tl.constexpr, VARLEN: tl.constexpr, F32: tl.constexpr,
                          KEEP_F32: tl.constexpr, HAS_SINKS: tl.constexpr, KEYS_WHOLE: tl.constexpr,
                          BM: tl.constexpr, BN: tl.constexpr, SPLIT: tl.constexpr):
    """o and lse for query rows [m0, m0 + BM) of one (sequence, head), shaped for Triton's warp
    specialization on Hopper: Q, K and V through tensor descriptors, and ONE key loop over every
    visited tile [lo, hi), each tile masked (Triton 3.6 specializes a kernel with one loop only: a
    second loop, before or after, or a branch between a masked and an unmasked step, fails in the
    compiler or silently turns the specialization off) unless no tile needs a mask (no causal mask, no
    window and KEYS_WHOLE: 2352 SASS instructions instead of 2640 at D = 128). No bias and no segment
    ids (their tiles would be pointer loads inside the loop); not float32. Same arguments as
    `flash_fwd_kernel`, so one launch serves both; SPLIT is always False here."""
    i_m = tl.num_programs(0) - 1 - tl.program_id(0)
    i_nh = tl.program_id(1)
    i_h, i_hk, bos_q, bos_k, Lq, Lk, i_b, row0, col0 = head_and_sequence(i_nh, cu_q, cu_k, H, HKV, VARLEN)
    m0 = i_m * BM  # a block past the sequence (packed sequences) loops over no key and stores nothing:
    off = Lk - Lq  # no early return, which Triton 3.6's specialization rejects (an assertion in the compiler)
    o_i = m0 + tl.arange(0, BM)
    q_desc = rows_descriptor(q, bos_q, Lq, i_h, H, D, BM, BD)
    k_desc = rows_descriptor(k, bos_k, Lk, i_hk, HKV, D, BN, BD)
    v_desc = rows_descriptor(v, bos_k, Lk, i_hk, HKV, D, BN, BD)
    b_q = q_desc.load([m0, 0])  # [BM, BD]
    drop_row0 = (i_b * H + i_h) * TQ_OUT + row0  # (fa.11) counters of dropout.py

    acc, m_i, l_i = _fwd_init(sinks, i_h, BM, BD, HAS_SINKS)
    lo, _, _, hi = key_tiles(m0, Lk, off, window_left, window_right, BM, BN, CAUSAL, WINDOW, False)
    hi = tl.where(m0 < Lq, hi, lo)
    MASKED: tl.constexpr = CAUSAL or WINDOW or not KEYS_WHOLE
    for j0 in tl.range(lo, hi, BN, warp_specialize=True):
        o_j = j0 + tl.arange(0, BN)
        b_k = k_desc.load([j0, 0])  # [BN, BD]
        b_v = v_desc.load([j0, 0])  # [BN, BD]
        acc, m_i, l_i = _softmax_step(acc, m_i, l_i, b_q, b_k, b_v, o_i, o_j, Lq, Lk, off, bias, row0, col0,
                                      TK_OUT, q_seg, 0, seeds, drop_row0, keep_threshold, scale, softcap,
                                      window_left, window_right, MASKED, False, CAUSAL, WINDOW, SOFTCAP, DROPOUT,
                                      False, False)
    o_head = (bos_q * H + i_h) * D
    lse_head = (i_b * H + i_h) * TQ_OUT + row0
    _fwd_store(acc, m_i, l_i, o_i, o, lse, o_f32, o_head, lse_head, Lq, inv_keep, H, D, BD, KEEP_F32)


def _first_config(configs, named_args, **kwargs):
    """The first config, as `_prune_large_heads` keeps for D ≤ 128 (the glue refuses larger heads and float32)."""
    return configs[:1]


flash_fwd_specialized_kernel = triton.autotune(configs=FWD_SPECIALIZED_CONFIGS, key=_FWD_KEY,
                                               prune_configs_by={"early_config_prune": _first_config}
                                               )(flash_fwd_specialized)


# ----------------------------------------------------------------------------- backward: dK, dV


@triton.jit
def _dkdv_step(b_dk, b_dv, b_k, b_v, b_q, b_do, b_lse2, b_delta, o_i, o_j, Lk, off, b_bias, b_sq, b_sk,
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


@triton.jit
def _dkdv_tiles(b_dk, b_dv, b_k, b_v, q_base, do_base, lse2_base, delta_base, o_j, lo, hi, Lq, Lk, off,
                bias_base, b_sk, q_seg_base, seeds, drop_row0, drop_col, keep_threshold, inv_keep,
                scale, softcap, window_left, window_right, TK_OUT, dq_base, dbias_base, rotate,
                H: tl.constexpr, D: tl.constexpr, BD: tl.constexpr, BM: tl.constexpr,
                MASKED: tl.constexpr, F32: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr,
                SOFTCAP: tl.constexpr, DROPOUT: tl.constexpr, HAS_BIAS: tl.constexpr,
                HAS_SEGMENTS: tl.constexpr, ATOMIC_DQ: tl.constexpr):
    """(fa.5) `_dkdv_step` over query tiles [lo, hi).

    With ATOMIC_DQ the same dS also gives this key block's share of dQ = dS K, added into float32 rows
    of dq (unscaled) with relaxed atomics, and the bias gradient dS̃ is stored here (fa.8): the dQ pass
    is not run. The tiles are then visited starting `rotate` tiles in (wrapping around), so that the key
    blocks of one head, which all start together, do not add into the same rows of dq at once.
    """
    o_d = tl.arange(0, BD)
    span = tl.maximum(tl.cdiv(hi - lo, BM), 1) * BM
    shift = (rotate % (span // BM)) * BM
    for i_t in range(lo, hi, BM):
        i0 = i_t
        if ATOMIC_DQ:
            i0 = i_t + shift
            i0 = tl.where(i0 >= lo + span, i0 - span, i0)
        o_i = i0 + tl.arange(0, BM)
        b_q = load_rows(q_base + o_i[:, None] * (H * D) + o_d[None, :], o_i, Lq, o_d, D, BD, True)  # [BM, BD]
        b_do = load_rows(do_base + o_i[:, None] * (H * D) + o_d[None, :], o_i, Lq, o_d, D, BD, True)  # [BM, BD]
        b_lse2, b_delta = row_stats(lse2_base, delta_base, o_i, Lq)  # [BM]
        b_bias = 0.0
        if HAS_BIAS:
            b_bias = tl.load(bias_base + o_i[None, :].to(tl.int64) * TK_OUT,
                             mask=(o_i[None, :] < Lq) & (o_j[:, None] < Lk), other=0.0).to(tl.float32)
        b_sq = 0
        if MASKED and HAS_SEGMENTS:
            b_sq = tl.load(q_seg_base + o_i, mask=o_i < Lq, other=0)[None, :]
        b_dk, b_dv, b_dsT = _dkdv_step(b_dk, b_dv, b_k, b_v, b_q, b_do, b_lse2, b_delta, o_i, o_j, Lk, off, b_bias,
                                       b_sq, b_sk, seeds, drop_row0, drop_col, keep_threshold, inv_keep, scale,
                                       softcap, window_left, window_right, MASKED, F32, CAUSAL, WINDOW, SOFTCAP,
                                       DROPOUT, HAS_BIAS, HAS_SEGMENTS)
        if ATOMIC_DQ:
            m_rows = (o_i < Lq)[:, None]
            if BD != D:
                m_rows = m_rows & (o_d < D)[None, :]
            if F32:
                b_dq = tl.dot(tl.trans(b_dsT), b_k, input_precision="ieee")  # [BM, BD]
            else:
                b_dq = tl.dot(tl.trans(b_dsT.to(b_k.dtype)), b_k)
            tl.atomic_add(dq_base + o_i[:, None] * (H * D) + o_d[None, :], b_dq, mask=m_rows, sem="relaxed")
            if HAS_BIAS:  # (fa.8) dbias = dS̃ of this (query tile, key block), transposed back
                tl.store(dbias_base + o_i[None, :].to(tl.int64) * TK_OUT, b_dsT,
                         mask=(o_i[None, :] < Lq) & (o_j[:, None] < Lk))
    return b_dk, b_dv


def _bwd_configs(blocks):
    return [triton.Config({"BM": BM, "BN": BN}, num_warps=w, num_stages=s) for BM, BN, w, s in blocks]


# H200, bf16 D=128 T=4096, forward + backward ms non-causal / causal with this config alone:
# (64, 128, 8, 2) 6.03 / 3.96, (32, 128, 8, 3) 6.15 / 4.00; (64, 64, 4, 3) 7.64 / 4.77,
# (32, 128, 4, 3) 10.2 / 6.90. (32, 64, 4, 2) is the fallback that fits D = 256.
DKDV_CONFIGS = _bwd_configs([(64, 128, 8, 2), (32, 128, 8, 3), (32, 64, 4, 2)])
# The same pass with dQ added by atomics (ATOMIC_DQ): a fifth product per tile and a [BM, BD] float32
# tile more in registers. H100, bf16 B=4 T=4096 H=16 D=128, forward + backward ms causal / non-causal
# with this config alone (scripts/config_times.py, one process): (64, 128, 8, 2) 3.14 / 5.12,
# (32, 128, 8, 2) 3.58 / 6.32, (32, 64, 4, 2) 3.80 / 6.58, (64, 64, 4, 2) 4.98 / 8.17 (dropped); the
# two-pass backward 3.21 / 5.40 in the same machine's bench run. The first spills (255 registers, 128
# stack bytes: scripts/kernel_resources.py); (64, 64, 8, 2|3) compile without spills (not yet timed: twice
# the atomic additions per dq element). (32, 64, 4, 2) is the fallback.
DKDV_DQ_CONFIGS = _bwd_configs([(64, 128, 8, 2), (32, 128, 8, 2), (64, 64, 8, 2), (64, 64, 8, 3), (32, 64, 4, 2)])
_BWD_KEY = ["H", "HKV", "D", "CAUSAL", "WINDOW", "SOFTCAP", "DROPOUT", "F32"]


@triton.heuristics({"HAS_BIAS": given("bias"), "HAS_SEGMENTS": given("q_seg")})
@triton.jit
def flash_bwd_dkdv_kernel(q, k, v, do, lse2, delta, cu_q, cu_k, bias, q_seg, kv_seg, seeds,
                          dk, dv, dq, dbias,
                          scale, softcap, window_left, window_right, keep_threshold, inv_keep,
                          bias_stride_b, bias_stride_h, TQ_OUT, TK_OUT,
                          H: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, BD: tl.constexpr,
                          CAUSAL: tl.constexpr, WINDOW: tl.constexpr, SOFTCAP: tl.constexpr,
                          DROPOUT: tl.constexpr, VARLEN: tl.constexpr, F32: tl.constexpr,
                          HAS_BIAS: tl.constexpr, HAS_SEGMENTS: tl.constexpr, ATOMIC_DQ: tl.constexpr,
                          BM: tl.constexpr, BN: tl.constexpr):
    """dK, dV of key rows [i_j·BN, i_j·BN + BN) of one (sequence, kv head), summed over its query group (fa.9);
    with ATOMIC_DQ also every query head's dQ share (float32, unscaled, into zeroed rows) and the bias
    gradient (into a zeroed dbias), so that no dQ pass is needed."""
    i_j, i_nh = tl.program_id(0), tl.program_id(1)
    i_n, i_hk = i_nh // HKV, i_nh % HKV
    G: tl.constexpr = H // HKV
    bos_q, bos_k, Lq, Lk, i_b, row0, col0 = sequence_pair(cu_q, cu_k, i_n, VARLEN)
    n0 = i_j * BN
    if n0 >= Lk:
        return
    off = Lk - Lq

    o_j = n0 + tl.arange(0, BN)
    o_d = tl.arange(0, BD)
    kv_off = (bos_k * HKV + i_hk) * D + o_j[:, None] * (HKV * D) + o_d[None, :]
    b_k = load_rows(k + kv_off, o_j, Lk, o_d, D, BD, True)  # [BN, BD]
    b_v = load_rows(v + kv_off, o_j, Lk, o_d, D, BD, True)  # [BN, BD]
    b_sk = 0
    if HAS_SEGMENTS:
        b_sk = tl.load(kv_seg + bos_k + o_j, mask=o_j < Lk, other=0)[:, None]
    b_dk = tl.zeros([BN, BD], tl.float32)
    b_dv = tl.zeros([BN, BD], tl.float32)

    lo, a, b, hi = query_tiles(n0, Lq, off, window_left, window_right, BM, BN, CAUSAL, WINDOW, HAS_SEGMENTS)
    for i_g in range(G):  # (fa.9) every query head of the group adds into this kv head's gradients
        i_h = i_hk * G + i_g
        q_base = q + (bos_q * H + i_h) * D
        do_base = do + (bos_q * H + i_h) * D
        stats = (i_b * H + i_h) * TQ_OUT + row0
        bias_base = bias
        if HAS_BIAS:
            bias_base = bias + i_b * bias_stride_b + i_h * bias_stride_h + row0.to(tl.int64) * TK_OUT + col0 + o_j[:, None]
        drop_row0 = (i_b * H + i_h) * TQ_OUT + row0
        drop_col = col0 + o_j[:, None]
        dq_base = dq + (bos_q * H + i_h) * D
        dbias_base = dbias
        if ATOMIC_DQ and HAS_BIAS:
            dbias_base = dbias + (i_b * H + i_h).to(tl.int64) * TQ_OUT * TK_OUT + row0.to(tl.int64) * TK_OUT \
                + col0 + o_j[:, None]
        b_dk, b_dv = _dkdv_tiles(b_dk, b_dv, b_k, b_v, q_base, do_base, lse2 + stats, delta + stats, o_j, lo, a,
                                 Lq, Lk, off, bias_base, b_sk, q_seg + bos_q, seeds, drop_row0, drop_col,
                                 keep_threshold, inv_keep, scale, softcap, window_left, window_right, TK_OUT, dq_base,
                                 dbias_base, i_j, H, D, BD, BM, True, F32, CAUSAL, WINDOW, SOFTCAP, DROPOUT, HAS_BIAS,
                                 HAS_SEGMENTS, ATOMIC_DQ)
        b_dk, b_dv = _dkdv_tiles(b_dk, b_dv, b_k, b_v, q_base, do_base, lse2 + stats, delta + stats, o_j, a, b,
                                 Lq, Lk, off, bias_base, b_sk, q_seg + bos_q, seeds, drop_row0, drop_col,
                                 keep_threshold, inv_keep, scale, softcap, window_left, window_right, TK_OUT, dq_base,
                                 dbias_base, i_j, H, D, BD, BM, False, F32, CAUSAL, WINDOW, SOFTCAP, DROPOUT, HAS_BIAS,
                                 HAS_SEGMENTS, ATOMIC_DQ)
        b_dk, b_dv = _dkdv_tiles(b_dk, b_dv, b_k, b_v, q_base, do_base, lse2 + stats, delta + stats, o_j, b, hi,
                                 Lq, Lk, off, bias_base, b_sk, q_seg + bos_q, seeds, drop_row0, drop_col,
                                 keep_threshold, inv_keep, scale, softcap, window_left, window_right, TK_OUT, dq_base,
                                 dbias_base, i_j, H, D, BD, BM, True, F32, CAUSAL, WINDOW, SOFTCAP, DROPOUT, HAS_BIAS,
                                 HAS_SEGMENTS, ATOMIC_DQ)
    b_dk = b_dk * scale  # (fa.5) dK = scale · dSᵀ Q
    m_store = rows_mask(o_j, Lk, o_d, D, BD)
    tl.store(dk + kv_off, b_dk.to(dk.dtype.element_ty), mask=m_store)
    tl.store(dv + kv_off, b_dv.to(dv.dtype.element_ty), mask=m_store)


# ATOMIC_DQ in the key: the two autotuned kernels share one @triton.jit function (and its name), so a cached
# choice of one must never serve the other
flash_bwd_dkdv_pass_kernel = triton.autotune(configs=DKDV_CONFIGS, key=_BWD_KEY + ["ATOMIC_DQ"], prune_configs_by={
    "early_config_prune": _prune_large_heads})(flash_bwd_dkdv_kernel)
flash_bwd_dkdv_dq_kernel = triton.autotune(configs=DKDV_DQ_CONFIGS, key=_BWD_KEY + ["ATOMIC_DQ"], prune_configs_by={
    "early_config_prune": _prune_large_heads})(flash_bwd_dkdv_kernel)


# ----------------------------------------------------------------------------- backward: dQ (and dbias)


@triton.jit
def _dq_step(b_dq, b_q, b_do, b_lse2, b_delta, b_k, b_v, o_i, o_j, Lk, off, b_bias, b_sq, b_sk, seeds, drop_row,
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


@triton.jit
def _dq_tiles(b_dq, b_q, b_do, b_lse2, b_delta, k_base, v_base, o_i, lo, hi, Lq, Lk, off, bias_base,
              dbias_base, b_sq, kv_seg_base, seeds, drop_row, drop_col0, keep_threshold, inv_keep,
              scale, softcap, window_left, window_right,
              HKV: tl.constexpr, D: tl.constexpr, BD: tl.constexpr, BN: tl.constexpr,
              MASKED: tl.constexpr, F32: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr,
              SOFTCAP: tl.constexpr, DROPOUT: tl.constexpr, HAS_BIAS: tl.constexpr,
              HAS_SEGMENTS: tl.constexpr):
    """(fa.5) `_dq_step` over key tiles [lo, hi); the bias gradient dS_raw is stored tile by tile (fa.8)."""
    o_d = tl.arange(0, BD)
    for j0 in range(lo, hi, BN):
        o_j = j0 + tl.arange(0, BN)
        b_k = load_rows(k_base + o_j[:, None] * (HKV * D) + o_d[None, :], o_j, Lk, o_d, D, BD, MASKED)  # [BN, BD]
        b_v = load_rows(v_base + o_j[:, None] * (HKV * D) + o_d[None, :], o_j, Lk, o_d, D, BD, MASKED)  # [BN, BD]
        b_bias = 0.0
        if HAS_BIAS:
            b_bias = tl.load(bias_base + o_j[None, :], mask=(o_i[:, None] < Lq) & (o_j[None, :] < Lk),
                             other=0.0).to(tl.float32)
        b_sk = 0
        if MASKED and HAS_SEGMENTS:
            b_sk = tl.load(kv_seg_base + o_j, mask=o_j < Lk, other=0)[None, :]
        b_dq, b_ds = _dq_step(b_dq, b_q, b_do, b_lse2, b_delta, b_k, b_v, o_i, o_j, Lk, off, b_bias, b_sq, b_sk,
                              seeds, drop_row, drop_col0, keep_threshold, inv_keep, scale, softcap, window_left,
                              window_right, MASKED, F32, CAUSAL, WINDOW, SOFTCAP, DROPOUT, HAS_BIAS, HAS_SEGMENTS)
        if HAS_BIAS:  # (fa.8) dbias = dS_raw (summed over broadcast dims by the glue)
            tl.store(dbias_base + o_j[None, :], b_ds, mask=(o_i[:, None] < Lq) & (o_j[None, :] < Lk))
    return b_dq


DQ_CONFIGS = [
    triton.Config({"BM": BM, "BN": BN}, num_warps=w, num_stages=s)
    # H200, bf16 D=128 T=4096, forward + backward ms non-causal / causal with this config alone:
    # (128, 64, 8, 3) 5.99 / 3.75, (128, 32, 4, 3) 5.95 / 3.91, (128, 64, 8, 2) 6.26 / 3.80;
    # (64, 64, 4, 3) 6.47 / 4.01, (64, 128, 8, 2) 7.13 / 4.48. (64, 32, 4, 2) fits D = 256.
    for BM, BN, w, s in [(128, 64, 8, 3), (128, 32, 4, 3), (64, 32, 4, 2)]
]


@triton.autotune(configs=DQ_CONFIGS, key=_BWD_KEY,
                 prune_configs_by={"early_config_prune": _prune_large_heads})
@triton.heuristics({"HAS_BIAS": given("bias"), "HAS_SEGMENTS": given("q_seg")})
@triton.jit
def flash_bwd_dq_kernel(q, k, v, do, lse2, delta, cu_q, cu_k, bias, q_seg, kv_seg, seeds,
                        dq, dbias,
                        scale, softcap, window_left, window_right, keep_threshold, inv_keep,
                        bias_stride_b, bias_stride_h, TQ_OUT, TK_OUT,
                        H: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, BD: tl.constexpr,
                        CAUSAL: tl.constexpr, WINDOW: tl.constexpr, SOFTCAP: tl.constexpr,
                        DROPOUT: tl.constexpr, VARLEN: tl.constexpr, F32: tl.constexpr,
                        HAS_BIAS: tl.constexpr, HAS_SEGMENTS: tl.constexpr,
                        BM: tl.constexpr, BN: tl.constexpr):
    """dQ of query rows [i_m·BM, i_m·BM + BM) of one (sequence, head), and the bias gradient there."""
    i_m, i_nh = tl.program_id(0), tl.program_id(1)
    i_h, i_hk, bos_q, bos_k, Lq, Lk, i_b, row0, col0 = head_and_sequence(i_nh, cu_q, cu_k, H, HKV, VARLEN)
    m0 = i_m * BM
    if m0 >= Lq:
        return
    off = Lk - Lq

    o_i = m0 + tl.arange(0, BM)
    o_d = tl.arange(0, BD)
    q_off = (bos_q * H + i_h) * D + o_i[:, None] * (H * D) + o_d[None, :]
    b_q = load_rows(q + q_off, o_i, Lq, o_d, D, BD, True)  # [BM, BD]
    b_do = load_rows(do + q_off, o_i, Lq, o_d, D, BD, True)  # [BM, BD]
    stats = (i_b * H + i_h) * TQ_OUT + row0
    b_lse2, b_delta = row_stats(lse2 + stats, delta + stats, o_i, Lq)  # [BM]
    k_base = k + (bos_k * HKV + i_hk) * D
    v_base = v + (bos_k * HKV + i_hk) * D
    bias_base = bias
    dbias_base = dbias
    if HAS_BIAS:
        rows = (row0 + o_i[:, None]).to(tl.int64) * TK_OUT + col0
        bias_base = bias + i_b * bias_stride_b + i_h * bias_stride_h + rows
        dbias_base = dbias + (i_b * H + i_h).to(tl.int64) * TQ_OUT * TK_OUT + rows
    b_sq = 0
    if HAS_SEGMENTS:
        b_sq = tl.load(q_seg + bos_q + o_i, mask=o_i < Lq, other=0)[:, None]
    drop_row = stats + o_i
    b_dq = tl.zeros([BM, BD], tl.float32)

    lo, a, b, hi = key_tiles(m0, Lk, off, window_left, window_right, BM, BN, CAUSAL, WINDOW, HAS_SEGMENTS)
    b_dq = _dq_tiles(b_dq, b_q, b_do, b_lse2, b_delta, k_base, v_base, o_i, lo, a, Lq, Lk, off, bias_base,
                     dbias_base, b_sq, kv_seg + bos_k, seeds, drop_row, col0, keep_threshold, inv_keep,
                     scale, softcap, window_left, window_right, HKV, D, BD, BN, True, F32,
                     CAUSAL, WINDOW, SOFTCAP, DROPOUT, HAS_BIAS, HAS_SEGMENTS)
    b_dq = _dq_tiles(b_dq, b_q, b_do, b_lse2, b_delta, k_base, v_base, o_i, a, b, Lq, Lk, off, bias_base,
                     dbias_base, b_sq, kv_seg + bos_k, seeds, drop_row, col0, keep_threshold, inv_keep,
                     scale, softcap, window_left, window_right, HKV, D, BD, BN, False, F32,
                     CAUSAL, WINDOW, SOFTCAP, DROPOUT, HAS_BIAS, HAS_SEGMENTS)
    b_dq = _dq_tiles(b_dq, b_q, b_do, b_lse2, b_delta, k_base, v_base, o_i, b, hi, Lq, Lk, off, bias_base,
                     dbias_base, b_sq, kv_seg + bos_k, seeds, drop_row, col0, keep_threshold, inv_keep,
                     scale, softcap, window_left, window_right, HKV, D, BD, BN, True, F32,
                     CAUSAL, WINDOW, SOFTCAP, DROPOUT, HAS_BIAS, HAS_SEGMENTS)
    b_dq = b_dq * scale  # (fa.5) dQ = scale · dS K
    m_store = rows_mask(o_i, Lq, o_d, D, BD)
    tl.store(dq + q_off, b_dq.to(dq.dtype.element_ty), mask=m_store)


# ----------------------------------------------------------------------------- backward, warp-specialized

# Triton 3.6 specializes these loops at 4 warps (12 with the producer); atomics in the loop stop it, so dQ has
# its own pass. Best-first by guess, not timed yet; every config compiles specialized (tests/test_compile_check.py).
DKDV_SPECIALIZED_CONFIGS = _bwd_configs([(64, 128, 4, 2), (32, 128, 4, 2), (64, 64, 4, 2)])
DQ_SPECIALIZED_CONFIGS = _bwd_configs([(64, 128, 4, 2), (64, 64, 4, 2)])  # BM = 128: the pass fails to specialize


@triton.jit
def flash_bwd_dkdv_specialized(q, k, v, do, lse2, delta, cu_q, cu_k, bias, q_seg, kv_seg, seeds,
                               dk, dv,
                               scale, softcap, window_left, window_right, keep_threshold, inv_keep,
                               bias_stride_b, bias_stride_h, TQ_OUT, TK_OUT,
                               H: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, BD: tl.constexpr,
                               CAUSAL: tl.constexpr, WINDOW: tl.constexpr, SOFTCAP: tl.constexpr,
                               DROPOUT: tl.constexpr, VARLEN: tl.constexpr, F32: tl.constexpr,
                               BM: tl.constexpr, BN: tl.constexpr):
    """dK, dV of key rows [i_j·BN, i_j·BN + BN) of one (sequence, QUERY head), into `[T, H, D]` arrays (the
    glue sums a GQA group, fa.9): one loop over every visited query tile, Q and dO through descriptors,
    so that Triton warp-specializes it. Only causal masks and windows need a mask here: query rows past
    Lq read q = dO = 0 and lse = +∞, so P = 0 (fa.10); key rows past Lk are never stored."""
    i_j, i_nh = tl.program_id(0), tl.program_id(1)
    i_h, i_hk, bos_q, bos_k, Lq, Lk, i_b, row0, col0 = head_and_sequence(i_nh, cu_q, cu_k, H, HKV, VARLEN)
    n0 = i_j * BN  # a block past the sequence loops over nothing (no early return: see flash_fwd_specialized)
    off = Lk - Lq
    o_j = n0 + tl.arange(0, BN)
    o_d = tl.arange(0, BD)
    q_desc, k_desc, v_desc, do_desc = attention_descriptors(q, k, v, do, bos_q, bos_k, Lq, Lk, i_h, i_hk, H, HKV, D,
                                                            BM, BN, BD)
    b_k = k_desc.load([n0, 0])  # [BN, BD]
    b_v = v_desc.load([n0, 0])  # [BN, BD]
    stats = (i_b * H + i_h) * TQ_OUT + row0
    b_dk = tl.zeros([BN, BD], tl.float32)
    b_dv = tl.zeros([BN, BD], tl.float32)

    lo, _, _, hi = query_tiles(n0, Lq, off, window_left, window_right, BM, BN, CAUSAL, WINDOW, False)
    hi = tl.where(n0 < Lk, hi, lo)
    MASKED: tl.constexpr = CAUSAL or WINDOW
    for i0 in tl.range(lo, hi, BM, warp_specialize=True):
        o_i = i0 + tl.arange(0, BM)
        b_q = q_desc.load([i0, 0])  # [BM, BD]
        b_do = do_desc.load([i0, 0])  # [BM, BD]
        b_lse2, b_delta = row_stats(lse2 + stats, delta + stats, o_i, Lq)  # [BM]
        b_dk, b_dv, b_dsT = _dkdv_step(b_dk, b_dv, b_k, b_v, b_q, b_do, b_lse2, b_delta, o_i, o_j, Lk, off, 0.0, 0, 0,
                                   seeds, stats, col0 + o_j[:, None], keep_threshold, inv_keep, scale, softcap,
                                   window_left, window_right, MASKED, False, CAUSAL, WINDOW, SOFTCAP, DROPOUT,
                                   False, False)
    b_dk = b_dk * scale  # (fa.5) dK = scale · dSᵀ Q
    out = (bos_k * H + i_h) * D + o_j[:, None] * (H * D) + o_d[None, :]
    m_store = rows_mask(o_j, Lk, o_d, D, BD)
    tl.store(dk + out, b_dk.to(dk.dtype.element_ty), mask=m_store)
    tl.store(dv + out, b_dv.to(dv.dtype.element_ty), mask=m_store)


@triton.jit
def flash_bwd_dq_specialized(q, k, v, do, lse2, delta, cu_q, cu_k, bias, q_seg, kv_seg, seeds,
                             dq,
                             scale, softcap, window_left, window_right, keep_threshold, inv_keep,
                             bias_stride_b, bias_stride_h, TQ_OUT, TK_OUT,
                             H: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, BD: tl.constexpr,
                             CAUSAL: tl.constexpr, WINDOW: tl.constexpr, SOFTCAP: tl.constexpr,
                             DROPOUT: tl.constexpr, VARLEN: tl.constexpr, F32: tl.constexpr,
                             BM: tl.constexpr, BN: tl.constexpr):
    """dQ of query rows [i_m·BM, i_m·BM + BM) of one (sequence, head): one loop over every visited key tile,
    K and V through descriptors. Only causal masks and windows need a mask: a key row past Lk reads k = 0,
    and dS_ij k_j adds nothing for it."""
    i_m, i_nh = tl.num_programs(0) - 1 - tl.program_id(0), tl.program_id(1)  # causal: the longest rows first
    i_h, i_hk, bos_q, bos_k, Lq, Lk, i_b, row0, col0 = head_and_sequence(i_nh, cu_q, cu_k, H, HKV, VARLEN)
    m0 = i_m * BM
    off = Lk - Lq
    o_i = m0 + tl.arange(0, BM)
    o_d = tl.arange(0, BD)
    q_desc, k_desc, v_desc, do_desc = attention_descriptors(q, k, v, do, bos_q, bos_k, Lq, Lk, i_h, i_hk, H, HKV, D,
                                                            BM, BN, BD)
    b_q = q_desc.load([m0, 0])  # [BM, BD]
    b_do = do_desc.load([m0, 0])  # [BM, BD]
    stats = (i_b * H + i_h) * TQ_OUT + row0
    b_lse2, b_delta = row_stats(lse2 + stats, delta + stats, o_i, Lq)  # [BM]
    b_dq = tl.zeros([BM, BD], tl.float32)

    lo, _, _, hi = key_tiles(m0, Lk, off, window_left, window_right, BM, BN, CAUSAL, WINDOW, False)
    hi = tl.where(m0 < Lq, hi, lo)
    MASKED: tl.constexpr = CAUSAL or WINDOW
    for j0 in tl.range(lo, hi, BN, warp_specialize=True):
        o_j = j0 + tl.arange(0, BN)
        b_k = k_desc.load([j0, 0])  # [BN, BD]
        b_v = v_desc.load([j0, 0])  # [BN, BD]
        b_dq, b_ds = _dq_step(b_dq, b_q, b_do, b_lse2, b_delta, b_k, b_v, o_i, o_j, Lk, off, 0.0, 0, 0, seeds,
                           stats + o_i, col0, keep_threshold, inv_keep, scale, softcap, window_left, window_right, MASKED,
                           False, CAUSAL, WINDOW, SOFTCAP, DROPOUT, False, False)
    b_dq = b_dq * scale  # (fa.5) dQ = scale · dS K
    out = (bos_q * H + i_h) * D + o_i[:, None] * (H * D) + o_d[None, :]
    m_store = rows_mask(o_i, Lq, o_d, D, BD)
    tl.store(dq + out, b_dq.to(dq.dtype.element_ty), mask=m_store)


flash_bwd_dkdv_specialized_kernel = triton.autotune(configs=DKDV_SPECIALIZED_CONFIGS, key=_BWD_KEY,
                                                    prune_configs_by={"early_config_prune": _first_config}
                                                    )(flash_bwd_dkdv_specialized)
flash_bwd_dq_specialized_kernel = triton.autotune(configs=DQ_SPECIALIZED_CONFIGS, key=_BWD_KEY,
                                                  prune_configs_by={"early_config_prune": _first_config}
                                                  )(flash_bwd_dq_specialized)

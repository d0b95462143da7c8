"""Flash attention in Triton: the forward (online softmax, NOTES.md fa.2/fa.4; K and V by masked pointer loads,
or by tensor descriptors on Hopper's TMA copy engine) and the backward, by default one pass per key block for
dK, dV (fa.5, fa.9) that also adds each tile's share of dQ into float32 rows with atomics and writes the bias
gradient (fa.12, fa.8); with `Tuning(dq="pass")` a second pass per query block forms dQ and the bias gradient
instead (reproducible bit for bit). The per-tile math is in `steps.py`.

Every kernel sees packed sequences (`tl_helpers`): q `[1, TQ, H, D]`, k and v `[1, TK, HKV, D]`,
sequence n owning rows `cu_q[n] … cu_q[n+1]` and keys `cu_k[n] … cu_k[n+1]`. Inside a sequence
positions are local (i, j from 0) and the causal and window masks are aligned bottom-right through
off = Lk − Lq. Arrays that keep the caller's `[B, H, Tq]` / `[B, H, Tq, Tk]` layout (lse, Delta,
bias, its gradient, the dropout counters) are addressed by (b, row0 + i, col0 + j): b = n and
row0 = col0 = 0 for a fixed batch; b = 0 and row0, col0 = the sequence's packed start with
`cu_seqlens` (VARLEN).

Feature flags (CAUSAL, WINDOW, SOFTCAP, DROPOUT, and the optional bias, segment ids and sinks found with
`given`) each remove work when off, so a plain causal or non-causal call compiles to the bare kernel;
they are many for one kernel (STYLE.md asks for three), but splitting them into kernels would copy the
online softmax once per combination.
"""

import triton
import triton.language as tl

from ..launch import given, is_given
from .steps import (BWD_KEY, FWD_KEY, bwd_configs, dkdv_step, dq_step, fwd_configs, fwd_init, fwd_store,
                    head_and_sequence, key_tiles, load_rows, query_tiles, row_stats, rows_descriptor, rows_mask,
                    sequence_pair, softmax_step)

# ----------------------------------------------------------------------------- forward


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
            acc_a, m_a, l_a = softmax_step(acc_a, m_a, l_a, b_qa, b_k, b_v, o_a, o_j, Lq, Lk, off, bias_head, row0,
                                            col0, TK_OUT, q_seg_base, b_sk, seeds, drop_row0, keep_threshold, scale,
                                            softcap, window_left, window_right, MASKED, F32, CAUSAL, WINDOW, SOFTCAP,
                                            DROPOUT, HAS_BIAS, HAS_SEGMENTS)
        if SPLIT and ((not MASKED) or ((j0 >= lo_b) & (j0 < hi_b))):
            acc_b, m_b, l_b = softmax_step(acc_b, m_b, l_b, b_qb, b_k, b_v, o_b, o_j, Lq, Lk, off, bias_head, row0,
                                            col0, TK_OUT, q_seg_base, b_sk, seeds, drop_row0, keep_threshold, scale,
                                            softcap, window_left, window_right, MASKED, F32, CAUSAL, WINDOW, SOFTCAP,
                                            DROPOUT, HAS_BIAS, HAS_SEGMENTS)
    return acc_a, m_a, l_a, acc_b, m_b, l_b


# H200, bf16 B=4 T=4096 H=16 D=128, ms per call of 10 issued back to back, non-causal / causal, cuDNN
# 0.95–0.99 / 0.56–0.59 in the same runs. Rows split in two halves: (256, 64, 8, 3) 1.10–1.20 / 0.77;
# whole blocks: (128, 64, 8, 3) 1.20 / 0.71, (128, 128, 8, 3) 1.18–1.20 / 0.69–0.70, (128, 64, 8, 2)
# 1.53 / 0.92, (256, 64, 16, 2) 1.44 / 0.88; halves of 64 rows: (128, 64, 8, 3) 2.28. With a causal
# mask (or a window) the halves see different key ranges and the split loses; there the whole blocks
# run, last block first. (64, 32, 4, 2) is the fallback that fits D = 256 and float32.
# On Triton 3.9 (H200, 2026-11-27, each config alone, ms causal / non-causal, data/bench/stack) the halves
# lost their lead: (256, 64, 8, 3) halves 0.83 / 1.33; whole blocks with pointer loads (128, 128, 8, 3)
# 0.76 / 1.30, (128, 64, 8, 3) 0.75 / 1.29, (128, 64, 8, 4) 0.75 / 1.26; with K, V through descriptors
# (Tuning.forward_loads) (128, 128, 8, 3) 0.72 / 1.19, (128, 64, 8, 3) 0.72 / 1.19, (128, 64, 8, 5)
# 0.75 / 1.24, (128, 32, 8, 3) 0.81 / 1.29 (Triton 3.6 with pointer loads: 0.72 / 1.22, halves for the
# second). So whole blocks through descriptors are the default, FWD_BANDED_CONFIGS' first entry.
FWD_CONFIGS = fwd_configs(True, [(256, 64, 8, 3), (128, 64, 8, 3)]) + fwd_configs(False, [(64, 32, 4, 2)])


FWD_BANDED_CONFIGS = fwd_configs(False, [(128, 128, 8, 3), (128, 64, 8, 3), (64, 32, 4, 2)])


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

    acc_a, m_a, l_a = fwd_init(sinks, i_h, HALF, BD, HAS_SINKS)
    acc_b, m_b, l_b = fwd_init(sinks, i_h, HALF, BD, HAS_SINKS)
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
    fwd_store(acc_a, m_a, l_a, o_a, o, lse, o_f32, o_head, lse_head, Lq, inv_keep, H, D, BD, KEEP_F32)
    if SPLIT:
        fwd_store(acc_b, m_b, l_b, o_b, o, lse, o_f32, o_head, lse_head, Lq, inv_keep, H, D, BD, KEEP_F32)


flash_fwd_split_kernel = triton.autotune(configs=FWD_CONFIGS, key=FWD_KEY,
                                         prune_configs_by={"early_config_prune": _prune_large_heads})(flash_fwd_kernel)


flash_fwd_banded_kernel = triton.autotune(configs=FWD_BANDED_CONFIGS, key=FWD_KEY,
                                          prune_configs_by={"early_config_prune": _prune_large_heads})(flash_fwd_kernel)


# ----------------------------------------------------------------------------- backward: dK, dV


@triton.jit
def _dkdv_tiles(b_dk, b_dv, b_k, b_v, q_base, do_base, lse2_base, delta_base, o_j, lo, hi, Lq, Lk, off,
                bias_base, b_sk, q_seg_base, seeds, drop_row0, drop_col, keep_threshold, inv_keep,
                scale, softcap, window_left, window_right, TK_OUT, dq_base, dbias_base, rotate,
                H: tl.constexpr, D: tl.constexpr, BD: tl.constexpr, BM: tl.constexpr,
                MASKED: tl.constexpr, F32: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr,
                SOFTCAP: tl.constexpr, DROPOUT: tl.constexpr, HAS_BIAS: tl.constexpr,
                HAS_SEGMENTS: tl.constexpr, ATOMIC_DQ: tl.constexpr):
    """(fa.5) `dkdv_step` over query tiles [lo, hi).

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
        b_dk, b_dv, b_dsT = dkdv_step(b_dk, b_dv, b_k, b_v, b_q, b_do, b_lse2, b_delta, o_i, o_j, Lk, off, b_bias,
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


# H200, bf16 D=128 T=4096, forward + backward ms non-causal / causal with this config alone:
# (64, 128, 8, 2) 6.03 / 3.96, (32, 128, 8, 3) 6.15 / 4.00; (64, 64, 4, 3) 7.64 / 4.77,
# (32, 128, 4, 3) 10.2 / 6.90. (32, 64, 4, 2) is the fallback that fits D = 256.
DKDV_CONFIGS = bwd_configs([(64, 128, 8, 2), (32, 128, 8, 3), (32, 64, 4, 2)])


# The same pass with dQ added by atomics (ATOMIC_DQ): a fifth product per tile and a [BM, BD] float32
# tile more in registers. H100, bf16 B=4 T=4096 H=16 D=128, forward + backward ms causal / non-causal
# with this config alone (scripts/config_times.py, one process): (64, 128, 8, 2) 3.14 / 5.12,
# (32, 128, 8, 2) 3.58 / 6.32, (32, 64, 4, 2) 3.80 / 6.58, (64, 64, 4, 2) 4.98 / 8.17 (dropped); the
# two-pass backward 3.21 / 5.40 in the same machine's bench run. The first spills (255 registers, 128
# stack bytes: scripts/kernel_resources.py); (64, 64, 8, 2|3) compile without spills (twice the atomic
# additions per dq element), listed for scripts/config_times.py to time alone: a launch runs only the first
# entry (or the fallback, _prune_large_heads), so no call reaches them before a measurement puts one
# first. (32, 64, 4, 2) is the fallback.
# Triton 3.9 (H200, same shape, one process, 2026-11-27, data/bench/stack/20261127T1200-h200-configs):
# (64, 128, 8, 3) 3.01 / 5.16, (64, 128, 8, 2) 3.31 / 5.43, (64, 128, 8, 1) 3.23 / 5.64, (32, 128, 8, 2)
# 3.72 / 7.07, (64, 64, 8, 2) 4.55 / 8.51; so the third stage now comes first.
DKDV_DQ_CONFIGS = bwd_configs([(64, 128, 8, 3), (64, 128, 8, 2), (32, 128, 8, 2), (64, 64, 8, 2), (64, 64, 8, 3), (32, 64, 4, 2)])


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
flash_bwd_dkdv_pass_kernel = triton.autotune(configs=DKDV_CONFIGS, key=BWD_KEY + ["ATOMIC_DQ"], prune_configs_by={
    "early_config_prune": _prune_large_heads})(flash_bwd_dkdv_kernel)


flash_bwd_dkdv_dq_kernel = triton.autotune(configs=DKDV_DQ_CONFIGS, key=BWD_KEY + ["ATOMIC_DQ"], prune_configs_by={
    "early_config_prune": _prune_large_heads})(flash_bwd_dkdv_kernel)


# ----------------------------------------------------------------------------- backward: dQ (and dbias)


@triton.jit
def _dq_tiles(b_dq, b_q, b_do, b_lse2, b_delta, k_base, v_base, o_i, lo, hi, Lq, Lk, off, bias_base,
              dbias_base, b_sq, kv_seg_base, seeds, drop_row, drop_col0, keep_threshold, inv_keep,
              scale, softcap, window_left, window_right,
              HKV: tl.constexpr, D: tl.constexpr, BD: tl.constexpr, BN: tl.constexpr,
              MASKED: tl.constexpr, F32: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr,
              SOFTCAP: tl.constexpr, DROPOUT: tl.constexpr, HAS_BIAS: tl.constexpr,
              HAS_SEGMENTS: tl.constexpr):
    """(fa.5) `dq_step` over key tiles [lo, hi); the bias gradient dS_raw is stored tile by tile (fa.8)."""
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
        b_dq, b_ds = dq_step(b_dq, b_q, b_do, b_lse2, b_delta, b_k, b_v, o_i, o_j, Lk, off, b_bias, b_sq, b_sk,
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


@triton.autotune(configs=DQ_CONFIGS, key=BWD_KEY,
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

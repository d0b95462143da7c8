"""Triton kernels of Kimi Delta Attention. Equation tags refer to NOTES.md.

Every chunked kernel sees packed sequences (`[TT, H, ·]` rows) cut into chunks of BT rows, in the
chunk slots of `workbench.chunk_gla` (`bounds[slot] = (start, end)` rows, start = end for an unused
slot; per-chunk states stored by slot). The per-chunk matrices A, Aqk, dAqk and dL are stored
`[TT, H, BT]` (float32, but Aqk in the inputs' dtype, which its products round it to): row r of its
chunk's matrix at the row of token r, columns by position in the chunk (NOTES.md, "Where A lives").

chunked forward
* `chunk_kda_fwd_prep_kernel` (slot, head): the next three kernels' work in one program per chunk (the
  default; `Tuning(fused_forward=False)` runs the three).
* `chunk_cumsum_kernel` (chunk_gla's): b, chunk-local prefix sums of the log-decays (kda.2).
* `chunk_kda_intra_kernel` (slot, head): L and Aqk (kda.3, kda.6; whole-chunk products by kda.17 where
  the decays allow, else by sub-chunks, the own block by kda.16 where it can), then A = (I + L)⁻¹ in
  place by blocked forward substitution (kda.5).
* `chunk_kda_wu_kernel` (slot, head): the WY vectors w, u (kda.3); k̂ for the sweep, q̄ for the output.
* `chunk_kda_h_kernel` (V block, sequence·head): the state sweep, δ = u − w h (kda.4).
* `chunk_kda_o_kernel` (V block, slot, head): o = q̄ h + Aqk δ (kda.6).
* with segments (kda.18): `chunk_kda_segment_kernel`, chunk_gla's `chunk_state_pass_kernel`, then
  `chunk_kda_resweep_o_kernel` (the re-sweep forming o as it goes) or `chunk_kda_resweep_kernel` + the o
  kernel; backward: the same three with REVERSE, `chunk_kda_resweep_kernel` storing dH and dδ.
chunked backward
* `chunk_kda_dh_kernel` (V block, sequence·head): dδ and the reverse state sweep (kda.9).
* `chunk_kda_bwd_wy_dqkg_fused_kernel` (slot, head): the WY backward and the state parts of
  dq/dk/dg in one kernel; dw never leaves registers (kda.10, kda.11, kda.13). It also gives dv,
  dAqk, dL = −Aᵀ dA Aᵀ (kda.7) and the WY part of dβ (kda.12).
  `chunk_kda_bwd_inter_kernel` + `chunk_kda_bwd_wy_kernel` are the same work unfused (dw through
  memory), kept for timing the fusion.
* `chunk_kda_bwd_intra_kernel` (slot, head): the intra-chunk parts (through L and Aqk) of dq, dk,
  dβ, and dg's reverse cumulative sum (kda.11–kda.13).
recurrent
* `recurrent_kda_fwd_kernel`, `recurrent_kda_bwd_kernel` (V block, sequence·head): the delta rule one
  token at a time (kda.1) and its reverse (kda.14), from checkpoints every CHUNK steps.

Matrix products take the inputs' dtype where the reference rounds to it (bfloat16 tensor cores),
and float32 (`F32_DOT`: "ieee" for float32 inputs, tf32 otherwise) where the reference keeps
float32; A's inversion in full float32 for float32 inputs and in tf32x3 (float32 to ~1e-6 on tensor
cores) for bfloat16 inputs (`INV_DOT`); the backward's dL = −Aᵀ dA Aᵀ always in full float32.
"""

import triton
import triton.language as tl

from ..chunk_gla.kernels import (BC, RHO, SUB_CHUNK, _chunk, _configs, _exp, _intra_tiles, _prune, _row,
                                 _segment_prologue, _sweep_prologue, _tile, chunk_cumsum_kernel, chunk_state_pass_kernel)
from ..launch import given
from ..tl_helpers import sequence_bounds

__all__ = ["chunk_cumsum_kernel", "chunk_kda_intra_kernel", "chunk_kda_wu_kernel", "chunk_kda_fwd_prep_kernel",
           "chunk_kda_h_kernel", "chunk_kda_o_kernel", "chunk_kda_resweep_o_kernel", "chunk_kda_dh_kernel",
           "chunk_kda_bwd_wy_dqkg_fused_kernel", "chunk_kda_bwd_inter_kernel", "chunk_kda_bwd_wy_kernel", "chunk_kda_bwd_intra_kernel",
           "recurrent_kda_fwd_kernel", "recurrent_kda_bwd_kernel", "CHUNK"]

LOG2_BC = tl.constexpr(SUB_CHUNK.bit_length() - 1)  # BC = 2^LOG2_BC
CHUNK = 64  # steps between the recurrent forward's checkpoints; passed as a constexpr
# (kda.17) a chunk whose log-decays span at most this forms L and Aqk in two whole-chunk products through
# the midpoint of b: every factor within e^±30 (the target's chunks of 64 span 46–50)
WHOLE_RANGE = 60.0


def _block_configs():
    """(BK, BV) pairs for the kernels that loop over both key and value blocks."""
    return [triton.Config({"BK": bk, "BV": bv}, num_warps=w, num_stages=2)
            for bk, bv, w in ((32, 32, 4), (64, 64, 8), (32, 64, 4), (32, 32, 8), (32, 64, 8))]


def _prune_blocks(configs, named_args, **_):
    K = max(16, triton.next_power_of_2(named_args["q"].shape[-1]))
    V = max(16, triton.next_power_of_2(named_args["v"].shape[-1]))
    kept = [c for c in configs if c.kwargs["BK"] <= K and c.kwargs["BV"] <= V]
    return kept or [min(configs, key=lambda c: c.kwargs["BK"] * c.kwargs["BV"])]


# ----------------------------------------------------------------------------- shared pieces


@triton.jit
def _rows(x, rows, m_t, i_h, o_d, m_d, H: tl.constexpr, D: tl.constexpr):
    """Rows `rows` of x[TT, H, D] at head i_h, columns o_d, in x's dtype; zeros outside."""
    return tl.load(x + (rows[:, None] * H + i_h) * D + o_d[None, :], mask=m_t[:, None] & m_d[None, :], other=0.0)


@triton.jit
def _matrix(M, rows, m_t, i_h, H: tl.constexpr, BT: tl.constexpr):
    """A chunk's [BT, BT] matrix stored [TT, H, BT] (row r at the row of token r), float32."""
    o_t = tl.arange(0, BT)
    return tl.load(M + (rows[:, None] * H + i_h) * BT + o_t[None, :], mask=m_t[:, None] & m_t[None, :], other=0.0)


@triton.jit
def _khat_decay(b_b, b_bL, rows, end):
    """(kda.4) exp(b_L − b_s) per row, with the exponent the constant 0 from the last valid row on."""
    from_last = rows >= end - 1
    return _exp(tl.where(from_last[:, None], 0.0, b_bL[None, :] - b_b))


@triton.jit
def _invert_unit_lower(b_L, INV_DOT: tl.constexpr):
    """(kda.5b) (I + L)⁻¹ of a strictly lower [BC, BC] tile as a product: with N = −L (nilpotent,
    N^BC = 0), (I + L)⁻¹ = Σ_{k<BC} N^k = (I + N)(I + N²)(I + N⁴)(I + N⁸) for BC = 16, in six
    full-float32 products. Row-by-row substitution took two dependent cross-thread reductions per row
    (0.30 ms of the kernel's 1.23 at the target shape on an H200; this: 0.10)."""
    o_c = tl.arange(0, BC)
    b_N = -b_L
    b_X = tl.where(o_c[:, None] == o_c[None, :], 1.0, 0.0) + b_N  # Σ_{k<2} N^k
    b_P = b_N
    for _ in tl.static_range(1, LOG2_BC):
        b_P = tl.dot(b_P, b_P, input_precision=INV_DOT)  # N^(2^i)
        b_X = b_X + tl.dot(b_X, b_P, input_precision=INV_DOT)  # Σ_{k<2^(i+1)} N^k
    return b_X


# ----------------------------------------------------------------------------- forward


@triton.jit
def _own_column_fwd(b_Aqk_own, b_L_own, j, k, b, row0, end, b_qi, b_ki, b_bi, b_bm, i_h, o_k, m_k, H: tl.constexpr,
                    K: tl.constexpr):
    """(kda.3, kda.6) Column j of a sub-chunk's own block (rows row0 …; b_qi, b_ki, b_bi [BC, BK] their
    q, k, b): Σ_i q_r[i] k_j[i] exp(b_r[i] − b_j[i]) and the same with k_r for the rows r ≥ j, 0 above
    (no scale, no β). Past the chunk's end k_j = 0 and b_j = b_m, the last valid row's."""
    o_c = tl.arange(0, BC)
    row = row0 + j
    m_r = row < end
    p_j = (row * H + i_h) * K + o_k
    b_kj = tl.load(k + p_j, mask=m_k & m_r, other=0.0).to(tl.float32)
    b_bj = tl.where(m_r, tl.load(b + p_j, mask=m_k & m_r, other=0.0), b_bm)
    keep = o_c >= j  # rows r ≥ j
    b_ke = b_kj[None, :] * _exp(tl.where(keep[:, None], b_bi - b_bj[None, :], 0.0))  # [BC, BK]
    col = (o_c[None, :] == j) & keep[:, None]
    b_Aqk_own = tl.where(col, tl.sum(b_qi * b_ke, axis=1)[:, None], b_Aqk_own)
    b_L_own = tl.where(col, tl.sum(b_ki * b_ke, axis=1)[:, None], b_L_own)
    return b_Aqk_own, b_L_own


# Key blocks of the forward's intra products (BKC) at 2, 4 or 8 warps (2 the fastest on an H200 at the target shape:
# the [16, ·] tiles are small), 1 or 2 pipeline stages (NOTES.md, "Pipeline depth")
@triton.autotune(configs=_configs("BKC", (32, 64), warps=(2, 4, 8), stages=(1, 2)), key=["H", "K", "BT"],
                 prune_configs_by={"early_config_prune": _prune("BKC", "q")})
@triton.jit
def chunk_kda_intra_kernel(q, k, b, beta, bounds,  # inputs
                           A, Aqk,  # outputs [TT, H, BT]: A float32, Aqk in the inputs' dtype
                           scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr,
                           BK: tl.constexpr, BKC: tl.constexpr, F32_DOT: tl.constexpr, WHOLE_SPAN: tl.constexpr,
                           INV_DOT: tl.constexpr):
    """(kda.3, kda.6, kda.5) A and Aqk of one chunk (`_intra`)."""
    i_s, i_h = tl.program_id(0).to(tl.int64), tl.program_id(1)
    start, end = _chunk(bounds, i_s)
    if start >= end:
        return
    _intra(q, k, b, beta, A, Aqk, start, end, i_h, scale, H, K, BT, BK, BKC, F32_DOT, WHOLE_SPAN, INV_DOT)


@triton.jit
def _intra(q, k, b, beta, A, Aqk, start, end, i_h, scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr,
           BT: tl.constexpr, BK: tl.constexpr, BKC: tl.constexpr, F32_DOT: tl.constexpr, WHOLE_SPAN: tl.constexpr,
           INV_DOT: tl.constexpr):
    """(kda.3, kda.6) L and Aqk of the chunk [start, end), then (kda.5) A = (I + L)⁻¹ in place, its products
    at INV_DOT ("ieee" for float32 inputs; "tf32x3", three tf32 tensor-core passes, for bfloat16 inputs).
    Where the chunk's log-decays span at most WHOLE_SPAN (kda.17) both come from two whole-chunk products
    through the midpoint of b; otherwise sub-chunk by sub-chunk (the own block in the same product where its
    log-decays span at most RHO, kda.16, else elementwise). BK covers all of K (the spans, the elementwise
    path); the products run over key blocks of BKC. Ends with a barrier: A is visible to every thread."""
    o_kf = tl.arange(0, BK)
    m_kf = o_kf < K
    o_t = tl.arange(0, BT)
    rows = start + o_t
    m_t = rows < end
    o_c = tl.arange(0, BC)
    span = tl.max(_row(b, start, i_h, o_kf, m_kf, H, K) - _row(b, end - 1, i_h, o_kf, m_kf, H, K), axis=0)
    if span <= WHOLE_SPAN:
        # (kda.17) every factor exp(±(b − b_mid)) within e^(WHOLE_SPAN / 2); rows past the end are 0
        b_Aqk = tl.zeros([BT, BT], tl.float32)
        b_L = tl.zeros([BT, BT], tl.float32)
        for i_k in range(0, tl.cdiv(K, BKC)):
            o_k = i_k * BKC + tl.arange(0, BKC)
            m_k = o_k < K
            b_mid = 0.5 * (_row(b, start, i_h, o_k, m_k, H, K) + _row(b, end - 1, i_h, o_k, m_k, H, K))
            b_d = tl.where(m_t[:, None], _tile(b, rows, m_t, i_h, o_k, m_k, H, K) - b_mid[None, :], 0.0)
            b_k = _tile(k, rows, m_t, i_h, o_k, m_k, H, K)
            b_kcol = tl.trans(b_k * _exp(-b_d))  # [BKC, BT]: k_s exp(b_mid − b_s)
            b_up = _exp(b_d)  # exp(b_r − b_mid)
            b_Aqk += tl.dot(_tile(q, rows, m_t, i_h, o_k, m_k, H, K) * b_up, b_kcol, input_precision=F32_DOT)
            b_L += tl.dot(b_k * b_up, b_kcol, input_precision=F32_DOT)
        b_beta = tl.load(beta + rows * H + i_h, mask=m_t, other=0.0).to(tl.float32)
        p_t = (rows[:, None] * H + i_h) * BT + o_t[None, :]
        tl.store(Aqk + p_t, tl.where(o_t[None, :] <= o_t[:, None], b_Aqk * scale, 0.0).to(Aqk.dtype.element_ty),
                 mask=m_t[:, None])
        tl.store(A + p_t, tl.where(o_t[None, :] < o_t[:, None], b_L * b_beta[:, None], 0.0), mask=m_t[:, None])
    else:
        for i_sub in range(0, BT // BC):  # a device loop: one sub-chunk's tiles live at a time
            own0 = i_sub * BC
            rows_i = start + own0 + o_c
            m_i = rows_i < end
            row_n = tl.minimum(start + own0, end - 1)  # the sub-chunk's first row n and last valid row m
            row_m = tl.minimum(start + own0 + BC, end) - 1
            b_betai = tl.load(beta + rows_i * H + i_h, mask=m_i, other=0.0).to(tl.float32)  # [BC]
            # earlier sub-chunks through the reference row n: both factors ≤ 1; (kda.16) where the
            # sub-chunk's log-decays span at most RHO (b_n − b_m in every key column), its own keys join the
            # same product (exp(b_n − b_s) ≤ exp(RHO)), masked to s ≤ r (Aqk), s < r (L) afterwards
            b_bm = _row(b, row_m, i_h, o_kf, m_kf, H, K)
            direct = tl.max(_row(b, row_n, i_h, o_kf, m_kf, H, K) - b_bm, axis=0) <= RHO
            keys = (o_t < tl.where(direct, own0 + BC, own0)) & m_t
            b_Aqk = tl.zeros([BC, BT], tl.float32)
            b_L = tl.zeros([BC, BT], tl.float32)
            for i_k in range(0, tl.cdiv(K, BKC)):
                o_k = i_k * BKC + tl.arange(0, BKC)
                m_k = o_k < K
                b_bn = _row(b, row_n, i_h, o_k, m_k, H, K)
                b_en = _exp(tl.where(m_i[:, None], _tile(b, rows_i, m_i, i_h, o_k, m_k, H, K) - b_bn[None, :], 0.0))
                b_kn = _tile(k, rows, keys, i_h, o_k, m_k, H, K)  # [BT, BKC], 0 outside the keys
                b_kn *= _exp(tl.where(keys[:, None], b_bn[None, :] - _tile(b, rows, keys, i_h, o_k, m_k, H, K), 0.0))
                b_Aqk += tl.dot(_tile(q, rows_i, m_i, i_h, o_k, m_k, H, K) * b_en, tl.trans(b_kn), input_precision=F32_DOT)
                b_L += tl.dot(_tile(k, rows_i, m_i, i_h, o_k, m_k, H, K) * b_en, tl.trans(b_kn), input_precision=F32_DOT)
            o_r = o_c + own0  # the rows' positions in the chunk
            b_Aqk = tl.where(o_t[None, :] <= o_r[:, None], b_Aqk * scale, 0.0)
            b_L = tl.where(o_t[None, :] < o_r[:, None], b_L * b_betai[:, None], 0.0)
            # every column, but the own block only when direct (otherwise it is written below)
            kept = m_i[:, None] & ((o_t < own0) | (o_t >= tl.where(direct, own0, own0 + BC)))[None, :]
            p_i = (rows_i[:, None] * H + i_h) * BT
            tl.store(Aqk + p_i + o_t[None, :], b_Aqk.to(Aqk.dtype.element_ty), mask=kept)
            tl.store(A + p_i + o_t[None, :], b_L, mask=kept)
            if not direct:
                # the sub-chunk's own block, elementwise one key column j at a time (every kept exponent ≤ 0);
                # rows past the chunk's end read q = k = 0 and b = b_m
                b_qi = _tile(q, rows_i, m_i, i_h, o_kf, m_kf, H, K)
                b_ki = _tile(k, rows_i, m_i, i_h, o_kf, m_kf, H, K)
                b_bi = tl.where(m_i[:, None], _tile(b, rows_i, m_i, i_h, o_kf, m_kf, H, K), b_bm[None, :])
                b_Aqk_own = tl.zeros([BC, BC], tl.float32)
                b_L_own = tl.zeros([BC, BC], tl.float32)
                for j in range(0, BC):
                    b_Aqk_own, b_L_own = _own_column_fwd(b_Aqk_own, b_L_own, j, k, b, start + own0, end, b_qi, b_ki, b_bi,
                                                         b_bm, i_h, o_kf, m_kf, H, K)
                b_Aqk_own *= scale
                b_L_own = tl.where(o_c[:, None] > o_c[None, :], b_L_own * b_betai[:, None], 0.0)
                tl.store(Aqk + p_i + own0 + o_c[None, :], b_Aqk_own.to(Aqk.dtype.element_ty), mask=m_i[:, None])
                tl.store(A + p_i + own0 + o_c[None, :], b_L_own, mask=m_i[:, None])
    tl.debug_barrier()  # L is read back below by other threads of this program

    # (kda.5) block row i of A: D_i (E_i − Σ_{j<i} L_ij A_j), D_i = (I + L_ii)⁻¹, rows of blocks in order
    # (block rows j < i of the array already hold A, block row i still holds L); full float32, one
    # [BC, BC] × [BC, BT] product per earlier block
    for i_sub in range(0, BT // BC):
        rows_i = start + i_sub * BC + o_c
        m_i = rows_i < end
        p_i = A + (rows_i[:, None] * H + i_h) * BT
        b_D = _invert_unit_lower(tl.load(p_i + i_sub * BC + o_c[None, :], mask=m_i[:, None], other=0.0), INV_DOT)
        b_Y = tl.where(o_t[None, :] == (o_c + i_sub * BC)[:, None], 1.0, 0.0)  # E_i [BC, BT]
        for j in range(0, i_sub):
            rows_j = start + j * BC + o_c
            m_j = rows_j < end
            b_Lij = tl.load(p_i + j * BC + o_c[None, :], mask=m_i[:, None] & m_j[None, :], other=0.0)  # [BC, BC]
            b_Aj = tl.load(A + (rows_j[:, None] * H + i_h) * BT + o_t[None, :], mask=m_j[:, None] & m_t[None, :],
                           other=0.0)  # [BC, BT] finished rows of A
            b_Y -= tl.dot(b_Lij, b_Aj, input_precision=INV_DOT)
        tl.store(p_i + o_t[None, :], tl.dot(b_D, b_Y, input_precision=INV_DOT), mask=m_i[:, None])
        tl.debug_barrier()


# 1–3 pipeline stages: the best depends on the block and warps (NOTES.md, "Pipeline depth")
@triton.autotune(configs=_configs("BV", stages=(1, 2, 3)), key=["H", "K", "V", "BT"],
                 prune_configs_by={"early_config_prune": _prune("BV", "v")})
@triton.jit
def chunk_kda_wu_kernel(q, k, v, b, beta, A, bounds,  # inputs
                        w, u, qbar, khat,  # outputs in the inputs' dtype: w, q̄, k̂ [TT, H, K]; u [TT, H, V]
                        scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                        BV: tl.constexpr, F32_DOT: tl.constexpr):
    """(kda.3, kda.4, kda.6) w, u, k̂ and q̄ of one chunk (`_wu`)."""
    i_s, i_h = tl.program_id(0).to(tl.int64), tl.program_id(1)
    start, end = _chunk(bounds, i_s)
    if start >= end:
        return
    _wu(q, k, v, b, beta, A, w, u, qbar, khat, start, end, i_h, scale, H, K, V, BT, BV, F32_DOT)


@triton.jit
def _wu(q, k, v, b, beta, A, w, u, qbar, khat, start, end, i_h, scale: tl.constexpr, H: tl.constexpr,
        K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr):
    """(kda.3) w = A (β ⊙ k ⊙ exp b), u = A (β ⊙ v); and the sweep's k̂ = k ⊙ exp(b_L − b) (kda.4) and the
    output's q̄ = scale · q ⊙ exp b (kda.6), stored rounded as their products round them (the sweep and
    the output then read one tile in the inputs' dtype, not q or k and float32 b). Columns of K and V
    BV at a time."""
    rows = start + tl.arange(0, BT)
    m_t = rows < end
    dtype = w.dtype.element_ty
    b_A = _matrix(A, rows, m_t, i_h, H, BT).to(dtype)
    b_beta = tl.load(beta + rows * H + i_h, mask=m_t, other=0.0).to(tl.float32)
    for i_k in range(tl.cdiv(K, BV)):  # key columns BV at a time, as the value columns below
        o_k = i_k * BV + tl.arange(0, BV)
        m_k = o_k < K
        m_tk = m_t[:, None] & m_k[None, :]
        p_tk = (rows[:, None] * H + i_h) * K + o_k[None, :]
        b_b = _tile(b, rows, m_t, i_h, o_k, m_k, H, K)
        b_eb = _exp(b_b)
        b_k = _tile(k, rows, m_t, i_h, o_k, m_k, H, K)
        b_w = tl.dot(b_A, (b_k * b_eb * b_beta[:, None]).to(dtype), input_precision=F32_DOT)  # [BT, BV]
        tl.store(w + p_tk, b_w.to(dtype), mask=m_tk)
        b_khat = b_k * _khat_decay(b_b, _row(b, end - 1, i_h, o_k, m_k, H, K), rows, end)
        tl.store(khat + p_tk, b_khat.to(dtype), mask=m_tk)
        b_qbar = _tile(q, rows, m_t, i_h, o_k, m_k, H, K) * b_eb * scale
        tl.store(qbar + p_tk, b_qbar.to(dtype), mask=m_tk)
    for i_v in range(tl.cdiv(V, BV)):
        o_v = i_v * BV + tl.arange(0, BV)
        m_v = o_v < V
        b_vb = _rows(v, rows, m_t, i_h, o_v, m_v, H, V).to(tl.float32) * b_beta[:, None]
        b_u = tl.dot(b_A, b_vb.to(dtype), input_precision=F32_DOT)  # [BT, BV]
        tl.store(u + (rows[:, None] * H + i_h) * V + o_v[None, :], b_u.to(dtype), mask=m_t[:, None] & m_v[None, :])


def _prep_configs():
    """(BKC, BV) of the fused forward at 4 or 8 warps (at 2, where the intra kernel alone ran best, every
    config spills at K = V = 128), 1 or 2 pipeline stages."""
    return [triton.Config({"BKC": bkc, "BV": bv}, num_warps=w, num_stages=st)
            for bkc in (32, 64) for bv in (32, 64) for w in (4, 8) for st in (1, 2)]


def _prune_prep(configs, named_args, **_):
    return _prune("BV", "v")(_prune("BKC", "q")(configs, named_args), named_args)


@triton.autotune(configs=_prep_configs(), key=["H", "K", "V", "BT"],
                 prune_configs_by={"early_config_prune": _prune_prep})
@triton.jit
def chunk_kda_fwd_prep_kernel(q, k, v, g, beta, bounds,  # inputs
                              b, A, Aqk, w, u, qbar, khat,  # outputs: b, A float32; the rest in the inputs' dtype
                              scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                              BT: tl.constexpr, BK: tl.constexpr, BKC: tl.constexpr, BV: tl.constexpr,
                              F32_DOT: tl.constexpr, WHOLE_SPAN: tl.constexpr, INV_DOT: tl.constexpr):
    """Everything of one chunk before the state sweep, in one program: (kda.2) b = the chunk's prefix sums
    of g, then A and Aqk (`_intra`), then w, u, k̂, q̄ (`_wu`). Each part reads back what the part before
    stored (b; A) and the chunk's q, k: this program's own recent stores and loads, mostly from L2, where
    three kernels read them from memory three times."""
    i_s, i_h = tl.program_id(0).to(tl.int64), tl.program_id(1)
    start, end = _chunk(bounds, i_s)
    if start >= end:
        return
    rows = start + tl.arange(0, BT)
    m_t = rows < end
    for i_k in range(0, tl.cdiv(K, BKC)):
        o_k = i_k * BKC + tl.arange(0, BKC)
        m_k = o_k < K
        tl.store(b + (rows[:, None] * H + i_h) * K + o_k[None, :],
                 tl.cumsum(_tile(g, rows, m_t, i_h, o_k, m_k, H, K), axis=0), mask=m_t[:, None] & m_k[None, :])
    tl.debug_barrier()  # b is read back below by other threads of this program
    _intra(q, k, b, beta, A, Aqk, start, end, i_h, scale, H, K, BT, BK, BKC, F32_DOT, WHOLE_SPAN, INV_DOT)
    _wu(q, k, v, b, beta, A, w, u, qbar, khat, start, end, i_h, scale, H, K, V, BT, BV, F32_DOT)


@triton.autotune(configs=_configs("BV", (16, 32, 64)), key=["H", "K", "V", "BT"],
                 prune_configs_by={"early_config_prune": _prune("BV", "u")})
@triton.jit
def chunk_kda_h_kernel(khat, w, u, b, h0, cu_seqlens, bounds,  # inputs
                       ht, hs, delta,  # outputs: final states; states at chunk starts [NS, H, K, V]; δ [TT, H, V]
                       H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                       BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr):
    """(kda.4) Over the chunks of one sequence: δ = u − w h, then h ← exp(b_L) ⊙ h + k̂ᵀ δ (k̂ from the wu
    kernel). The chunk-start states are stored in hs's dtype: float32 for the backward, else the inputs'
    dtype, which the output's product rounds them to."""
    i_nh, i_h, first_slot, n_chunks, o_k, o_v, m_k, m_v, m_h, p_state = _sweep_prologue(cu_seqlens, H, K, V, BT,
                                                                                        BK, BV)
    b_h = tl.load(h0 + i_nh * K * V + p_state, mask=m_h, other=0.0)  # [BK, BV]
    for c in range(0, n_chunks):
        i_s = first_slot + c
        tl.store(hs + (i_s * H + i_h) * K * V + p_state, b_h.to(hs.dtype.element_ty), mask=m_h)
        start, end = _chunk(bounds, i_s)
        rows = start + tl.arange(0, BT)
        m_t = rows < end
        b_u = _rows(u, rows, m_t, i_h, o_v, m_v, H, V).to(tl.float32)
        b_h, b_delta = _kda_h_step(b_h, b_u, khat, w, b, rows, m_t, end, i_h, o_k, m_k, H, K, F32_DOT)
        tl.store(delta + (rows[:, None] * H + i_h) * V + o_v[None, :], b_delta, mask=m_t[:, None] & m_v[None, :])
    tl.store(ht + i_nh * K * V + p_state, b_h, mask=m_h)


@triton.jit
def _kda_h_step(b_h, b_u, khat, w, b, rows, m_t, end, i_h, o_k, m_k, H: tl.constexpr, K: tl.constexpr,
                F32_DOT: tl.constexpr):
    """(kda.4) One chunk of the forward sweep: (exp(b_L) ⊙ h + k̂ᵀ δ, δ) with δ = u − w h in the inputs' dtype."""
    b_w = _rows(w, rows, m_t, i_h, o_k, m_k, H, K)  # [BT, BK]
    dtype = b_w.dtype
    b_delta = (b_u - tl.dot(b_w, b_h.to(dtype), input_precision=F32_DOT)).to(dtype)  # [BT, BV]
    b_khat = _rows(khat, rows, m_t, i_h, o_k, m_k, H, K)  # [BT, BK]
    b_bL = _row(b, end - 1, i_h, o_k, m_k, H, K)
    return b_h * _exp(b_bL)[:, None] + tl.dot(tl.trans(b_khat), b_delta, input_precision=F32_DOT), b_delta


@triton.autotune(configs=_configs("BV"), key=["H", "K", "V", "BT"],
                 prune_configs_by={"early_config_prune": _prune("BV", "delta")})
@triton.jit
def chunk_kda_o_kernel(qbar, Aqk, delta, hs, bounds,  # inputs
                       o,  # output [TT, H, V]
                       H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                       BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr):
    """(kda.6) o = q̄ h + Aqk δ (q̄ = scale · q ⊙ exp b from the wu kernel)."""
    i_v, i_s, i_h = tl.program_id(0), tl.program_id(1).to(tl.int64), tl.program_id(2)
    start, end = _chunk(bounds, i_s)
    if start >= end:
        return
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    rows = start + tl.arange(0, BT)
    m_t = rows < end
    b_delta = _rows(delta, rows, m_t, i_h, o_v, m_v, H, V)  # [BT, BV]
    dtype = b_delta.dtype
    b_qbar = _rows(qbar, rows, m_t, i_h, o_k, m_k, H, K)  # [BT, BK]
    b_h = tl.load(hs + (i_s * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :], mask=m_k[:, None] & m_v[None, :],
                  other=0.0)
    b_Aqk = _matrix(Aqk, rows, m_t, i_h, H, BT)
    b_o = (tl.dot(b_qbar.to(dtype), b_h.to(dtype), input_precision=F32_DOT)
           + tl.dot(b_Aqk.to(dtype), b_delta, input_precision=F32_DOT))
    tl.store(o + (rows[:, None] * H + i_h) * V + o_v[None, :], b_o.to(o.dtype.element_ty),
             mask=m_t[:, None] & m_v[None, :])


# ----------------------------------------------------------------------------- backward: the dh sweep


@triton.autotune(configs=_configs("BV", (16, 32, 64)), key=["H", "K", "V", "BT"],
                 prune_configs_by={"early_config_prune": _prune("BV", "do")})
@triton.jit
def chunk_kda_dh_kernel(q, k, w, b, Aqk, do, dht, cu_seqlens, bounds,  # inputs
                        dh0, dhs, ddelta,  # outputs: dS_0; dH at each chunk's end [NS, H, K, V]; dδ [TT, H, V]
                        scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                        BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr):
    """(kda.9) Last chunk first: dδ = Aqkᵀ do + k̂ dH, then dH ← exp(b_L) ⊙ dH + q̄ᵀ do − wᵀ dδ."""
    i_nh, i_h, first_slot, n_chunks, o_k, o_v, m_k, m_v, m_h, p_state = _sweep_prologue(cu_seqlens, H, K, V, BT,
                                                                                        BK, BV)
    b_dh = tl.load(dht + i_nh * K * V + p_state, mask=m_h, other=0.0)  # [BK, BV]
    for c_rev in range(0, n_chunks):
        i_s = first_slot + n_chunks - 1 - c_rev
        tl.store(dhs + (i_s * H + i_h) * K * V + p_state, b_dh, mask=m_h)
        start, end = _chunk(bounds, i_s)
        rows = start + tl.arange(0, BT)
        m_t = rows < end
        b_do = _rows(do, rows, m_t, i_h, o_v, m_v, H, V)  # [BT, BV]
        b_dh, b_ddelta = _kda_dh_step(b_dh, b_do, q, k, w, b, Aqk, scale, rows, m_t, end, i_h, o_k, m_k, H, K, BT,
                                      F32_DOT)
        tl.store(ddelta + (rows[:, None] * H + i_h) * V + o_v[None, :], b_ddelta, mask=m_t[:, None] & m_v[None, :])
    tl.store(dh0 + i_nh * K * V + p_state, b_dh, mask=m_h)


@triton.jit
def _kda_dh_step(b_dh, b_do, q, k, w, b, Aqk, scale, rows, m_t, end, i_h, o_k, m_k, H: tl.constexpr, K: tl.constexpr,
                 BT: tl.constexpr, F32_DOT: tl.constexpr):
    """(kda.9) One chunk of the backward sweep: (exp(b_L) ⊙ dH + q̄ᵀ do − wᵀ dδ, dδ), dδ = Aqkᵀ do + k̂ dH."""
    dtype = b_do.dtype
    b_b = _tile(b, rows, m_t, i_h, o_k, m_k, H, K)
    b_bL = _row(b, end - 1, i_h, o_k, m_k, H, K)
    # k̂ as the forward rounded it, against the float32 dH (the reference's product keeps dH in float32)
    b_khat = (_tile(k, rows, m_t, i_h, o_k, m_k, H, K) * _khat_decay(b_b, b_bL, rows, end)).to(dtype)
    b_Aqk = _matrix(Aqk, rows, m_t, i_h, H, BT).to(dtype)
    b_ddelta = (tl.dot(tl.trans(b_Aqk), b_do, input_precision=F32_DOT)
                + tl.dot(b_khat.to(tl.float32), b_dh, input_precision=F32_DOT)).to(dtype)
    b_qbar = (_tile(q, rows, m_t, i_h, o_k, m_k, H, K) * _exp(b_b) * scale).to(dtype)
    b_w = _rows(w, rows, m_t, i_h, o_k, m_k, H, K)
    b_dh = (b_dh * _exp(b_bL)[:, None] + tl.dot(tl.trans(b_qbar), b_do, input_precision=F32_DOT)
            - tl.dot(tl.trans(b_w), b_ddelta, input_precision=F32_DOT))
    return b_dh, b_ddelta


# ----------------------------------------------------------------------------- two-level state pass (kda.18)


@triton.jit
def _kda_step(b_h, q, k, khat, w, u, do, b, Aqk, scale, rows, m_t, end, i_h, o_k, m_k, o_c, m_c, H: tl.constexpr,
              K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, REVERSE: tl.constexpr, F32_DOT: tl.constexpr):
    """One chunk of the forward sweep (u's columns o_c) or, with REVERSE, of the backward one (do's columns)."""
    if REVERSE:
        b_do = _rows(do, rows, m_t, i_h, o_c, m_c, H, V)
        return _kda_dh_step(b_h, b_do, q, k, w, b, Aqk, scale, rows, m_t, end, i_h, o_k, m_k, H, K, BT, F32_DOT)
    else:  # an explicit else: the compiler would build the code after a static if's return too (with dummies)
        b_u = _rows(u, rows, m_t, i_h, o_c, m_c, H, V).to(tl.float32)
        return _kda_h_step(b_h, b_u, khat, w, b, rows, m_t, end, i_h, o_k, m_k, H, K, F32_DOT)


def _prune_values(configs, named_args, **_):
    """`_prune("BV", ·)` by the value width of whichever of u (forward) and do (backward) is given."""
    values = named_args["u"] if len(named_args["u"].shape) > 1 else named_args["do"]
    return _prune("BV", "x")(configs, {"x": values})


@triton.jit
def _columns(i_v, BV: tl.constexpr, V: tl.constexpr, K: tl.constexpr):
    """Columns of block i_v of the segment sweep's [K, V + K] state: (o_c, the state's columns, the identity's)."""
    o_c = i_v * BV + tl.arange(0, BV)
    return o_c, o_c < V, (o_c >= V) & (o_c < V + K)


@triton.autotune(configs=_configs("BV", (16, 32, 64)), key=["H", "K", "V", "BT", "NSEG", "REVERSE"],
                 prune_configs_by={"early_config_prune": _prune_values})
@triton.jit
def chunk_kda_segment_kernel(q, k, khat, w, u, do, b, Aqk, cu_seqlens, bounds,  # inputs (forward: khat, w, u, b)
                             ends, trans,  # outputs: E_j [N·NSEG, H, K, V], P_j [N·NSEG, H, K, K]
                             scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                             BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, NSEG: tl.constexpr,
                             REVERSE: tl.constexpr, F32_DOT: tl.constexpr):
    """(kda.18) One segment of a sequence swept from zero beside the K × K identity, as one [K, V + K] state:
    the first V columns give E_j (u, or do with REVERSE, as in the one-sweep kernels), the last K columns,
    swept with u = 0 (do = 0), give P_j (its transpose's product with REVERSE: the backward map is Mᵀ)."""
    i_n, i_h, i_row, first_slot, c0, c1, o_k, _, m_k, _, _, _ = _segment_prologue(
        cu_seqlens, H, K, V, BT, BK, BV, NSEG)
    o_c, m_u, m_p = _columns(tl.program_id(0), BV, V, K)
    b_h = tl.where(m_k[:, None] & m_p[None, :] & (o_k[:, None] == o_c[None, :] - V), 1.0, 0.0)  # [BK, BV]
    for cc in range(0, c1 - c0):
        i_s = first_slot + (c1 - 1 - cc if REVERSE else c0 + cc)
        start, end = _chunk(bounds, i_s)
        rows = start + tl.arange(0, BT)
        m_t = rows < end
        b_h, b_step = _kda_step(b_h, q, k, khat, w, u, do, b, Aqk, scale, rows, m_t, end, i_h, o_k, m_k, o_c, m_u, H, K,
                                V, BT, REVERSE, F32_DOT)  # b_step (δ) unused: not `_`, which the prologue typed
    tl.store(ends + i_row * K * V + o_k[:, None] * V + o_c[None, :], b_h, mask=m_k[:, None] & m_u[None, :])
    tl.store(trans + i_row * K * K + o_k[:, None] * K + (o_c - V)[None, :], b_h, mask=m_k[:, None] & m_p[None, :])


@triton.autotune(configs=_configs("BV", (16, 32, 64)), key=["H", "K", "V", "BT", "NSEG", "REVERSE"],
                 prune_configs_by={"early_config_prune": _prune_values})
@triton.jit
def chunk_kda_resweep_kernel(q, k, khat, w, u, do, b, Aqk, starts, cu_seqlens, bounds,  # inputs
                             states, delta,  # outputs: hs (dH with REVERSE) [NS, H, K, V]; δ (dδ) [TT, H, V]
                             scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                             BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, NSEG: tl.constexpr,
                             REVERSE: tl.constexpr, F32_DOT: tl.constexpr):
    """(kda.18) Every segment swept again from its true entering state, in parallel: the per-chunk states and
    δ (forward, as `chunk_kda_h_kernel` stores them) or dH and dδ (REVERSE, as `chunk_kda_dh_kernel`)."""
    i_n, i_h, i_row, first_slot, c0, c1, o_k, o_v, m_k, m_v, m_h, p_state = _segment_prologue(
        cu_seqlens, H, K, V, BT, BK, BV, NSEG)
    b_h = tl.load(starts + i_row * K * V + p_state, mask=m_h, other=0.0)
    for cc in range(0, c1 - c0):
        i_s = first_slot + (c1 - 1 - cc if REVERSE else c0 + cc)
        tl.store(states + (i_s * H + i_h) * K * V + p_state, b_h.to(states.dtype.element_ty), mask=m_h)
        start, end = _chunk(bounds, i_s)
        rows = start + tl.arange(0, BT)
        m_t = rows < end
        b_h, b_d = _kda_step(b_h, q, k, khat, w, u, do, b, Aqk, scale, rows, m_t, end, i_h, o_k, m_k, o_v, m_v, H, K,
                             V, BT, REVERSE, F32_DOT)
        tl.store(delta + (rows[:, None] * H + i_h) * V + o_v[None, :], b_d, mask=m_t[:, None] & m_v[None, :])


@triton.autotune(configs=_configs("BV", (16, 32, 64)), key=["H", "K", "V", "BT", "NSEG", "STORE"],
                 prune_configs_by={"early_config_prune": _prune("BV", "u")})
@triton.jit
def chunk_kda_resweep_o_kernel(khat, w, u, b, qbar, Aqk, starts, cu_seqlens, bounds,  # inputs
                               o, states, delta,  # outputs: o [TT, H, V]; with STORE hs [NS, H, K, V], δ [TT, H, V]
                               H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                               BK: tl.constexpr, BV: tl.constexpr, NSEG: tl.constexpr, STORE: tl.constexpr,
                               F32_DOT: tl.constexpr):
    """(kda.18, kda.6) The forward re-sweep of `chunk_kda_resweep_kernel` that also forms each chunk's output
    o = q̄ h + Aqk δ from the state and δ it holds (the products and roundings of `chunk_kda_o_kernel`, so
    the same o), instead of storing them for an output kernel to read back. With STORE (a backward will
    need them) it stores hs and δ as well; without, `states` and `delta` are not touched."""
    i_n, i_h, i_row, first_slot, c0, c1, o_k, o_v, m_k, m_v, m_h, p_state = _segment_prologue(
        cu_seqlens, H, K, V, BT, BK, BV, NSEG)
    b_h = tl.load(starts + i_row * K * V + p_state, mask=m_h, other=0.0)
    for cc in range(0, c1 - c0):
        i_s = first_slot + c0 + cc
        if STORE:
            tl.store(states + (i_s * H + i_h) * K * V + p_state, b_h.to(states.dtype.element_ty), mask=m_h)
        start, end = _chunk(bounds, i_s)
        rows = start + tl.arange(0, BT)
        m_t = rows < end
        m_tv = m_t[:, None] & m_v[None, :]
        p_tv = (rows[:, None] * H + i_h) * V + o_v[None, :]
        b_u = _rows(u, rows, m_t, i_h, o_v, m_v, H, V).to(tl.float32)
        b_qbar = _rows(qbar, rows, m_t, i_h, o_k, m_k, H, K)  # [BT, BK]
        dtype = b_qbar.dtype
        b_o = tl.dot(b_qbar, b_h.to(dtype), input_precision=F32_DOT)  # the state at the chunk's start
        b_h, b_d = _kda_h_step(b_h, b_u, khat, w, b, rows, m_t, end, i_h, o_k, m_k, H, K, F32_DOT)
        if STORE:
            tl.store(delta + p_tv, b_d, mask=m_tv)
        b_o += tl.dot(_matrix(Aqk, rows, m_t, i_h, H, BT).to(dtype), b_d, input_precision=F32_DOT)
        tl.store(o + p_tv, b_o.to(o.dtype.element_ty), mask=m_tv)


# ----------------------------------------------------------------------------- backward: WY + dq/dk/dg


@triton.jit
def _load_A(A, rows, m_t, i_h, H: tl.constexpr, BT: tl.constexpr, A_T_POINTER: tl.constexpr):
    """(kda.8) The chunk's A as a [BT, BT] float32 tile: element [i, j] from A[i, j], or, with
    A_T_POINTER, through the transposed pointer (the seed's block pointer with shape (BT, T) and
    strides (1, H·BT)), element [i, j] from A[j, i]: the tile then holds Aᵀ."""
    o_t = tl.arange(0, BT)
    if A_T_POINTER:
        p = A + (rows[None, :] * H + i_h) * BT + o_t[:, None]
    else:
        p = A + (rows[:, None] * H + i_h) * BT + o_t[None, :]
    return tl.load(p, mask=m_t[:, None] & m_t[None, :], other=0.0)


@triton.jit
def _as_used(b_A, TRANS_A: tl.constexpr):
    """The loaded A tile as the disputed products use it: wrapped in tl.trans when TRANS_A (the
    review's suggestion), as loaded otherwise (the seed's code)."""
    if TRANS_A:
        b_A = tl.trans(b_A)
    return b_A


@triton.jit
def _dAqk(do, delta, rows, m_t, i_h, H: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
          F32_DOT: tl.constexpr):
    """(kda.9) dAqk = do δᵀ on and below the diagonal, [BT, BT] float32."""
    o_t = tl.arange(0, BT)
    b_dAqk = tl.zeros([BT, BT], tl.float32)
    for i_v in range(tl.cdiv(V, BV)):
        o_v = i_v * BV + tl.arange(0, BV)
        m_v = o_v < V
        b_do = _rows(do, rows, m_t, i_h, o_v, m_v, H, V)
        b_delta = _rows(delta, rows, m_t, i_h, o_v, m_v, H, V)
        b_dAqk += tl.dot(b_do, tl.trans(b_delta), input_precision=F32_DOT)
    return tl.where((o_t[:, None] >= o_t[None, :]) & m_t[:, None] & m_t[None, :], b_dAqk, 0.0)


@triton.jit
def _wy_values(v, ddelta, dv, b_A, b_beta, rows, m_t, i_h, H: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
               BV: tl.constexpr, F32_DOT: tl.constexpr, TRANS_A: tl.constexpr):
    """(kda.10) The value half of the WY backward, u = A (β ⊙ v) with du = dδ:
    dA = du (β ⊙ v)ᵀ, d(β ⊙ v) = Aᵀ du → dv = β ⊙ d(β ⊙ v) (stored), dβ = rowsum(d(β ⊙ v) ⊙ v).
    Returns (dA [BT, BT], dβ [BT]) float32."""
    b_dA = tl.zeros([BT, BT], tl.float32)
    b_dbeta = tl.zeros([BT], tl.float32)
    for i_v in range(tl.cdiv(V, BV)):
        o_v = i_v * BV + tl.arange(0, BV)
        m_v = o_v < V
        b_du = _rows(ddelta, rows, m_t, i_h, o_v, m_v, H, V)  # [BT, BV]
        b_v = _rows(v, rows, m_t, i_h, o_v, m_v, H, V).to(tl.float32)
        b_dA += tl.dot(b_du, tl.trans((b_v * b_beta[:, None]).to(b_du.dtype)), input_precision=F32_DOT)
        b_dvb = tl.dot(_as_used(b_A, TRANS_A), b_du, input_precision=F32_DOT)  # disputed: Aᵀ du
        tl.store(dv + (rows[:, None] * H + i_h) * V + o_v[None, :], (b_dvb * b_beta[:, None]).to(dv.dtype.element_ty),
                 mask=m_t[:, None] & m_v[None, :])
        b_dbeta += tl.sum(b_dvb * b_v, axis=1)
    return b_dA, b_dbeta


@triton.jit
def _inter_keys(delta, ddelta, do, hs, dhs, i_s, rows, m_t, i_h, o_k, m_k, H: tl.constexpr, K: tl.constexpr,
                V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr):
    """(kda.9, kda.10) For one block of keys, summed over value blocks: dq̄ = do hᵀ, dk̂ = δ dHᵀ,
    dw = −dδ hᵀ ([BT, BK] float32) and rowsum(h ⊙ dH) ([BK]), h the chunk's start state and dH the
    gradient of its end state."""
    b_dqbar = tl.zeros([BT, BK], tl.float32)
    b_dkhat = tl.zeros([BT, BK], tl.float32)
    b_dw = tl.zeros([BT, BK], tl.float32)
    b_hdh = tl.zeros([BK], tl.float32)
    for i_v in range(tl.cdiv(V, BV)):
        o_v = i_v * BV + tl.arange(0, BV)
        m_v = o_v < V
        p_state = (i_s * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :]
        m_h = m_k[:, None] & m_v[None, :]
        b_h = tl.load(hs + p_state, mask=m_h, other=0.0)  # [BK, BV]
        b_dh = tl.load(dhs + p_state, mask=m_h, other=0.0)
        b_do = _rows(do, rows, m_t, i_h, o_v, m_v, H, V)  # [BT, BV]
        dtype = b_do.dtype
        b_delta = _rows(delta, rows, m_t, i_h, o_v, m_v, H, V)
        b_du = _rows(ddelta, rows, m_t, i_h, o_v, m_v, H, V)
        b_dqbar += tl.dot(b_do, tl.trans(b_h.to(dtype)), input_precision=F32_DOT)
        b_dkhat += tl.dot(b_delta.to(tl.float32), tl.trans(b_dh), input_precision=F32_DOT)  # dH stays float32
        b_dw -= tl.dot(b_du, tl.trans(b_h.to(dtype)), input_precision=F32_DOT)
        b_hdh += tl.sum(b_h * b_dh, axis=1)
    return b_dqbar, b_dkhat, b_dw, b_hdh


@triton.jit
def _wy_keys(b_dw, b_A, b_kg, b_beta, F32_DOT: tl.constexpr, TRANS_A: tl.constexpr):
    """(kda.10) The key half of the WY backward for one block of keys, w = A (β ⊙ k̃), k̃ = k ⊙ exp b:
    dA = dw (β ⊙ k̃)ᵀ, d(β ⊙ k̃) = Aᵀ dw → (dA [BT, BT], dk̃ = β ⊙ d(β ⊙ k̃), dβ = rowsum(d(β ⊙ k̃) ⊙ k̃))."""
    dtype = b_A.dtype
    b_dA = tl.dot(b_dw.to(dtype), tl.trans((b_kg * b_beta[:, None]).to(dtype)), input_precision=F32_DOT)
    b_dkgb = tl.dot(_as_used(b_A, TRANS_A), b_dw.to(dtype), input_precision=F32_DOT)  # disputed: Aᵀ dw
    return b_dA, b_dkgb * b_beta[:, None], tl.sum(b_dkgb * b_kg, axis=1)


@triton.jit
def _inter_outputs(b_q, b_k, b_b, b_bL, rows, end, b_dqbar, b_dkhat, b_hdh, dg, p_k, m_tk, scale: tl.constexpr,
                   H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr):
    """(kda.11, kda.13) The state parts of dq, dk and dg for one block of keys:
    dq = scale exp(b) ⊙ dq̄, dk = exp(b_L − b) ⊙ dk̂, dg = Σ_{r≥t} q̄_r ⊙ dq̄_r + Σ_{s<t} X_s +
    exp(b_L) ⊙ rowsum(h ⊙ dH), X_s = k̂_s ⊙ dk̂_s, summed forward (no total − suffix difference): X is
    parked in dg's rows (p_k) and read back one row down, then summed inclusively. The caller stores
    dg over it afterwards."""
    o_t = tl.arange(0, BT)
    b_eb = _exp(b_b)
    b_ehat = _khat_decay(b_b, b_bL, rows, end)
    b_dq = b_dqbar * b_eb * scale
    b_dk = b_dkhat * b_ehat
    tl.store(dg + p_k, b_k * b_ehat * b_dkhat, mask=m_tk)
    tl.debug_barrier()  # X is read back by other threads of this program
    b_xprev = tl.load(dg + p_k - H * K, mask=m_tk & (o_t > 0)[:, None], other=0.0)  # X_{t−1}, 0 at t = 0
    tl.debug_barrier()  # read before the caller overwrites dg
    b_dg = (tl.cumsum(b_q * b_eb * scale * b_dqbar, axis=0, reverse=True) + tl.cumsum(b_xprev, axis=0)
            + (_exp(b_bL) * b_hdh)[None, :])
    return b_dq, b_dk, b_dg


@triton.jit
def _A_part(A, start, end, i_h, o_r, o_c, H: tl.constexpr, BT: tl.constexpr, A_T_POINTER: tl.constexpr):
    """Positions [o_r, o_c] (chunk-local) of `_load_A`'s tile: A[o_r, o_c], or with A_T_POINTER through
    the transposed pointer, A[o_c, o_r]; float32, 0 past the chunk's end."""
    m = ((start + o_r) < end)[:, None] & ((start + o_c) < end)[None, :]
    if A_T_POINTER:
        p = A + ((start + o_c)[None, :] * H + i_h) * BT + o_r[:, None]
    else:
        p = A + ((start + o_r)[:, None] * H + i_h) * BT + o_c[None, :]
    return tl.load(p, mask=m, other=0.0)


@triton.jit
def _A_used(A, start, end, i_h, o_r, o_c, H: tl.constexpr, BT: tl.constexpr, A_T_POINTER: tl.constexpr,
            TRANS_A: tl.constexpr):
    """Rows o_r, columns o_c of the tile as `_as_used` gives it (wrapped in tl.trans when TRANS_A)."""
    if TRANS_A:
        b = tl.trans(_A_part(A, start, end, i_h, o_c, o_r, H, BT, A_T_POINTER))
    else:
        b = _A_part(A, start, end, i_h, o_r, o_c, H, BT, A_T_POINTER)
    return b


@triton.jit
def _store_dL(dL, A, b_dA, start, end, i_h, H: tl.constexpr, BT: tl.constexpr, A_T_POINTER: tl.constexpr,
              TRANS_A: tl.constexpr):
    """(kda.7) dL = −Aᵀ dA Aᵀ on the strictly lower triangle (L = X − I, A = X⁻¹), as the disputed
    products compute it: Au (dA Au) with Au the A tile as used (Aᵀ when right). Full float32, 16 columns
    of the inner dimension per product: dA, then M = dA Au, are parked in dL's own rows and read back a
    slice at a time, and Au is read from A a slice at a time (one [BT, BT] × [BT, BT] float32 product
    would hold whole rows and columns of both operands in registers)."""
    o_t = tl.arange(0, BT)
    o_16 = tl.arange(0, 16)
    m_t = (start + o_t) < end
    p_rows = dL + ((start + o_t)[:, None] * H + i_h) * BT  # [BT, 1] the chunk's rows of dL
    tl.store(p_rows + o_t[None, :], b_dA, mask=m_t[:, None])
    tl.debug_barrier()  # read back by other threads of this program
    b_M = tl.zeros([BT, BT], tl.float32)
    for jj in range(0, BT // 16):
        b_dAj = tl.load(p_rows + jj * 16 + o_16[None, :], mask=m_t[:, None], other=0.0)  # dA[:, j] [BT, 16]
        b_M += tl.dot(b_dAj, _A_used(A, start, end, i_h, jj * 16 + o_16, o_t, H, BT, A_T_POINTER, TRANS_A),
                      input_precision="ieee")  # disputed: dA Aᵀ
    tl.debug_barrier()  # every slice of dA read before M replaces it
    tl.store(p_rows + o_t[None, :], b_M, mask=m_t[:, None])
    tl.debug_barrier()
    b_dL = tl.zeros([BT, BT], tl.float32)
    for jj in range(0, BT // 16):
        o_j = jj * 16 + o_16
        b_Mj = tl.load(dL + ((start + o_j)[:, None] * H + i_h) * BT + o_t[None, :],
                       mask=((start + o_j) < end)[:, None], other=0.0)  # M[j, :] [16, BT]
        b_dL += tl.dot(_A_used(A, start, end, i_h, o_t, o_j, H, BT, A_T_POINTER, TRANS_A), b_Mj,
                       input_precision="ieee")  # disputed: Aᵀ M
    tl.debug_barrier()  # every slice of M read before dL replaces it
    tl.store(p_rows + o_t[None, :], tl.where((o_t[:, None] > o_t[None, :]) & m_t[:, None] & m_t[None, :], -b_dL, 0.0),
             mask=m_t[:, None])


@triton.autotune(configs=_block_configs(), key=["H", "K", "V", "BT"],
                 prune_configs_by={"early_config_prune": _prune_blocks})
@triton.jit
def chunk_kda_bwd_wy_dqkg_fused_kernel(
        q, k, v, b, beta, A, delta, ddelta, do, hs, dhs, bounds,  # inputs
        dq, dk, dv, dg, dbeta, dAqk, dL,  # outputs: dq, dk, dg [TT, H, K] f32 (state + WY parts), dv, dβ
        scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
        BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr, A_T_POINTER: tl.constexpr,
        TRANS_A: tl.constexpr):
    """(kda.9–kda.13) The fused backward of one chunk: dw is made per key block and used at once."""
    i_s, i_h = tl.program_id(0).to(tl.int64), tl.program_id(1)
    start, end = _chunk(bounds, i_s)
    if start >= end:
        return
    o_t = tl.arange(0, BT)
    rows = start + o_t
    m_t = rows < end
    dtype = v.dtype.element_ty
    b_beta = tl.load(beta + rows * H + i_h, mask=m_t, other=0.0).to(tl.float32)
    b_A = _load_A(A, rows, m_t, i_h, H, BT, A_T_POINTER).to(dtype)  # Aᵀ with the transposed pointer
    p_mat = (rows[:, None] * H + i_h) * BT + o_t[None, :]
    tl.store(dAqk + p_mat, _dAqk(do, delta, rows, m_t, i_h, H, V, BT, BV, F32_DOT), mask=m_t[:, None])
    b_dA, b_dbeta = _wy_values(v, ddelta, dv, b_A, b_beta, rows, m_t, i_h, H, V, BT, BV, F32_DOT, TRANS_A)
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        b_k = _tile(k, rows, m_t, i_h, o_k, m_k, H, K)
        b_b = _tile(b, rows, m_t, i_h, o_k, m_k, H, K)
        b_bL = _row(b, end - 1, i_h, o_k, m_k, H, K)
        b_dqbar, b_dkhat, b_dw, b_hdh = _inter_keys(delta, ddelta, do, hs, dhs, i_s, rows, m_t, i_h, o_k, m_k,
                                                    H, K, V, BT, BK, BV, F32_DOT)
        b_kg = b_k * _exp(b_b)
        b_dA_k, b_dkg, b_dbeta_k = _wy_keys(b_dw, b_A, b_kg, b_beta, F32_DOT, TRANS_A)  # dw from registers
        b_dA += b_dA_k
        b_dbeta += b_dbeta_k
        p_k = (rows[:, None] * H + i_h) * K + o_k[None, :]
        m_tk = m_t[:, None] & m_k[None, :]
        b_dq, b_dk, b_dg = _inter_outputs(_tile(q, rows, m_t, i_h, o_k, m_k, H, K), b_k, b_b, b_bL, rows, end,
                                          b_dqbar, b_dkhat, b_hdh, dg, p_k, m_tk, scale, H, K, BT)
        b_dk += b_dkg * _exp(b_b)
        b_dg += tl.cumsum(b_kg * b_dkg, axis=0, reverse=True)
        tl.store(dq + p_k, b_dq, mask=m_tk)
        tl.store(dk + p_k, b_dk, mask=m_tk)
        tl.store(dg + p_k, b_dg, mask=m_tk)
    _store_dL(dL, A, b_dA, start, end, i_h, H, BT, A_T_POINTER, TRANS_A)
    tl.store(dbeta + rows * H + i_h, b_dbeta, mask=m_t)


@triton.autotune(configs=_block_configs(), key=["H", "K", "V", "BT"],
                 prune_configs_by={"early_config_prune": _prune_blocks})
@triton.jit
def chunk_kda_bwd_inter_kernel(q, k, v, b, delta, ddelta, do, hs, dhs, bounds,  # inputs
                               dq, dk, dg, dw, dAqk,  # outputs [TT, H, K] f32 (state parts; dw); dAqk
                               scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                               BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr):
    """Unfused, first half: the state parts of dq, dk, dg and dAqk; dw = −dδ hᵀ goes to memory."""
    i_s, i_h = tl.program_id(0).to(tl.int64), tl.program_id(1)
    start, end = _chunk(bounds, i_s)
    if start >= end:
        return
    o_t = tl.arange(0, BT)
    rows = start + o_t
    m_t = rows < end
    tl.store(dAqk + (rows[:, None] * H + i_h) * BT + o_t[None, :], _dAqk(do, delta, rows, m_t, i_h, H, V, BT, BV,
                                                                         F32_DOT), mask=m_t[:, None])
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        b_b = _tile(b, rows, m_t, i_h, o_k, m_k, H, K)
        b_dqbar, b_dkhat, b_dw, b_hdh = _inter_keys(delta, ddelta, do, hs, dhs, i_s, rows, m_t, i_h, o_k, m_k,
                                                    H, K, V, BT, BK, BV, F32_DOT)
        p_k = (rows[:, None] * H + i_h) * K + o_k[None, :]
        m_tk = m_t[:, None] & m_k[None, :]
        b_dq, b_dk, b_dg = _inter_outputs(_tile(q, rows, m_t, i_h, o_k, m_k, H, K),
                                          _tile(k, rows, m_t, i_h, o_k, m_k, H, K), b_b,
                                          _row(b, end - 1, i_h, o_k, m_k, H, K), rows, end, b_dqbar, b_dkhat, b_hdh,
                                          dg, p_k, m_tk, scale, H, K, BT)
        tl.store(dq + p_k, b_dq, mask=m_tk)
        tl.store(dk + p_k, b_dk, mask=m_tk)
        tl.store(dg + p_k, b_dg, mask=m_tk)
        tl.store(dw + p_k, b_dw, mask=m_tk)


@triton.autotune(configs=_block_configs(), key=["H", "K", "V", "BT"],
                 prune_configs_by={"early_config_prune": _prune_blocks})
@triton.jit
def chunk_kda_bwd_wy_kernel(q, k, v, b, beta, A, ddelta, dw, dk_state, dg_state, bounds,  # inputs
                            dk, dg, dv, dbeta, dL,  # outputs: dk, dg [TT, H, K] f32 (+ WY parts), dv, dβ, dL
                            H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                            BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr):
    """Unfused, second half: the WY backward, dw read back from memory (A read as in the seed)."""
    i_s, i_h = tl.program_id(0).to(tl.int64), tl.program_id(1)
    start, end = _chunk(bounds, i_s)
    if start >= end:
        return
    o_t = tl.arange(0, BT)
    rows = start + o_t
    m_t = rows < end
    dtype = v.dtype.element_ty
    b_beta = tl.load(beta + rows * H + i_h, mask=m_t, other=0.0).to(tl.float32)
    b_A = _load_A(A, rows, m_t, i_h, H, BT, True).to(dtype)
    b_dA, b_dbeta = _wy_values(v, ddelta, dv, b_A, b_beta, rows, m_t, i_h, H, V, BT, BV, F32_DOT, False)
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        p_k = (rows[:, None] * H + i_h) * K + o_k[None, :]
        m_tk = m_t[:, None] & m_k[None, :]
        b_b = _tile(b, rows, m_t, i_h, o_k, m_k, H, K)
        b_kg = _tile(k, rows, m_t, i_h, o_k, m_k, H, K) * _exp(b_b)
        b_dA_k, b_dkg, b_dbeta_k = _wy_keys(tl.load(dw + p_k, mask=m_tk, other=0.0), b_A, b_kg, b_beta, F32_DOT,
                                            False)
        b_dA += b_dA_k
        b_dbeta += b_dbeta_k
        tl.store(dk + p_k, tl.load(dk_state + p_k, mask=m_tk, other=0.0) + b_dkg * _exp(b_b), mask=m_tk)
        tl.store(dg + p_k, tl.load(dg_state + p_k, mask=m_tk, other=0.0)
                 + tl.cumsum(b_kg * b_dkg, axis=0, reverse=True), mask=m_tk)
    _store_dL(dL, A, b_dA, start, end, i_h, H, BT, True, False)
    tl.store(dbeta + rows * H + i_h, b_dbeta, mask=m_t)


# ----------------------------------------------------------------------------- backward: intra-chunk


@triton.jit
def _own_row_bwd(b_dqs, b_dks, b_Y, b_Z, j, q, k, b, beta, row0, end, b_bi, b_bm, b_dAqk_o, b_dL_o, i_h, o_k, m_k,
                 scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr):
    """(kda.11) Row j of a sub-chunk's own block (rows row0 …, b_bi [BC, BK] their b): as a key it adds
    scale dAqk[r, j] k_j e_rj to dq°_r and dL[r, j] k_j e_rj to Y_r for r > j; as a row, scale dAqk[j, s]
    q_j e_js to dk°_s and dL[j, s] β_j k_j e_js to Z_s for s < j. One [BC, BK] tile exp(−|b_x − b_j|)
    serves both (b never increases down a chunk). Past the chunk's end b_j = b_m, the last valid row's."""
    o_c = tl.arange(0, BC)
    row = row0 + j
    m_r = row < end
    p_j = (row * H + i_h) * K + o_k
    b_kj = tl.load(k + p_j, mask=m_k & m_r, other=0.0).to(tl.float32)
    b_qj = tl.load(q + p_j, mask=m_k & m_r, other=0.0).to(tl.float32)
    b_bj = tl.where(m_r, tl.load(b + p_j, mask=m_k & m_r, other=0.0), b_bm)
    b_betaj = tl.load(beta + row * H + i_h, mask=m_r, other=0.0).to(tl.float32)
    below = o_c > j  # rows r > j
    above = o_c < j  # keys s < j
    b_e = _exp(tl.where(below[:, None], b_bi - b_bj[None, :], tl.where(above[:, None], b_bj[None, :] - b_bi, 0.0)))
    col = o_c[None, :] == j
    b_aq = tl.where(below, tl.sum(tl.where(col, b_dAqk_o, 0.0), axis=1), 0.0)  # dAqk[r, j] over r
    b_al = tl.where(below, tl.sum(tl.where(col, b_dL_o, 0.0), axis=1), 0.0)
    row_j = o_c[:, None] == j
    b_rq = tl.where(above, tl.sum(tl.where(row_j, b_dAqk_o, 0.0), axis=0), 0.0)  # dAqk[j, s] over s
    b_rl = tl.where(above, tl.sum(tl.where(row_j, b_dL_o, 0.0), axis=0), 0.0)
    b_dqs += scale * b_aq[:, None] * b_kj[None, :] * b_e
    b_Y += b_al[:, None] * b_kj[None, :] * b_e
    b_dks += scale * b_rq[:, None] * b_qj[None, :] * b_e
    b_Z += b_rl[:, None] * (b_betaj * b_kj)[None, :] * b_e
    return b_dqs, b_dks, b_Y, b_Z


def _prune_intra(configs, named_args, **_):
    """Key blocks not wider than K; with float32 inputs at most 32 (BK = 64 asked sm_90 for 283 KiB of
    shared memory at K = 128, chunk 64, over its 227 KiB, while the sub-chunk loop was unrolled; now
    91 KiB, but it spills 1.6 KB at 4 warps: `scripts/compile_check.py`)."""
    kept = _prune("BK", "q")(configs, named_args)
    if getattr(named_args["q"].dtype, "itemsize", 2) >= 4:
        kept = [c for c in kept if c.kwargs["BK"] <= 32] or [min(kept, key=lambda c: c.kwargs["BK"])]
    return kept


@triton.autotune(configs=_configs("BK", (16, 32, 64)), key=["H", "K", "BT"],
                 prune_configs_by={"early_config_prune": _prune_intra})
@triton.jit
def chunk_kda_bwd_intra_kernel(q, k, b, beta, dAqk, dL, dq_in, dk_in, dg_in, dbeta_in, bounds,  # inputs
                               dq, dk, dg, dbeta,  # outputs: dq, dk in the inputs' dtype; dg, dβ float32
                               scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr,
                               BK: tl.constexpr, F32_DOT: tl.constexpr, WHOLE_SPAN: tl.constexpr):
    """(kda.11–kda.13) What flows through Aqk and L: with e_rs = exp(b_r − b_s),

        dq°_r = scale Σ_{s<r} dAqk[r, s] k_s e_rs,   dk°_s = scale Σ_{r>s} dAqk[r, s] q_r e_rs,
        Y_r = Σ_{s<r} dL[r, s] k_s e_rs,             Z_s = Σ_{r>s} dL[r, s] β_r k_r e_rs,

    added to the inputs' dq, dk (with the diagonal of Aqk and β_r Y_r), dβ_r += k_r · Y_r, and
    dg += Σ_{r≥t} P_r, P = q ⊙ dq° − k ⊙ dk° + k ⊙ β Y − k ⊙ Z (no diagonal term). Per key block:
    where its columns of b span at most WHOLE_SPAN (kda.17), four whole-chunk products through b_mid;
    otherwise sub-chunks are visited last first, carrying Σ P of the later ones; ratios as in the forward (both factors ≤ 1, or
    within e^±RHO where a sub-chunk's own block joins the products, kda.16)."""
    i_s, i_h = tl.program_id(0).to(tl.int64), tl.program_id(1)
    start, end = _chunk(bounds, i_s)
    if start >= end:
        return
    o_t = tl.arange(0, BT)
    rows = start + o_t
    m_t = rows < end
    o_c = tl.arange(0, BC)
    b_beta = tl.load(beta + rows * H + i_h, mask=m_t, other=0.0).to(tl.float32)
    b_dbeta = tl.load(dbeta_in + rows * H + i_h, mask=m_t, other=0.0)
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        b_b0 = _row(b, start, i_h, o_k, m_k, H, K)
        b_bl = _row(b, end - 1, i_h, o_k, m_k, H, K)
        if tl.max(b_b0 - b_bl, axis=0) <= WHOLE_SPAN:
            # (kda.17) the whole chunk at once through b_mid, every factor within e^(WHOLE_SPAN / 2)
            b_d = tl.where(m_t[:, None], _tile(b, rows, m_t, i_h, o_k, m_k, H, K) - 0.5 * (b_b0 + b_bl)[None, :], 0.0)
            b_up = _exp(b_d)  # exp(b_r − b_mid)
            b_down = _exp(-b_d)  # exp(b_mid − b_s)
            b_q = _tile(q, rows, m_t, i_h, o_k, m_k, H, K)
            b_k = _tile(k, rows, m_t, i_h, o_k, m_k, H, K)
            p_mat = (rows[:, None] * H + i_h) * BT + o_t[None, :]
            m_mat = m_t[:, None] & m_t[None, :]
            strict = o_t[None, :] < o_t[:, None]  # s < r
            b_dAqk = tl.load(dAqk + p_mat, mask=m_mat, other=0.0)
            b_diag = tl.sum(tl.where(o_t[None, :] == o_t[:, None], b_dAqk, 0.0), axis=1)  # dAqk[r, r]
            b_dAqk = tl.where(strict, b_dAqk, 0.0)
            b_dL = tl.where(strict, tl.load(dL + p_mat, mask=m_mat, other=0.0), 0.0)
            b_kdown = b_k * b_down
            b_dqs = b_up * tl.dot(b_dAqk, b_kdown, input_precision=F32_DOT) * scale
            b_Y = b_up * tl.dot(b_dL, b_kdown, input_precision=F32_DOT)
            b_dks = b_down * tl.dot(tl.trans(b_dAqk), b_q * b_up, input_precision=F32_DOT) * scale
            b_Z = b_down * tl.dot(tl.trans(b_dL), b_k * (b_beta[:, None] * b_up), input_precision=F32_DOT)
            b_dkrow = b_Y * b_beta[:, None]
            b_p = b_q * b_dqs - b_k * b_dks + b_k * b_dkrow - b_k * b_Z  # (kda.13) P
            p_k = (rows[:, None] * H + i_h) * K + o_k[None, :]
            m_tk = m_t[:, None] & m_k[None, :]
            b_dq = tl.load(dq_in + p_k, mask=m_tk, other=0.0) + b_dqs + scale * b_diag[:, None] * b_k
            b_dk = (tl.load(dk_in + p_k, mask=m_tk, other=0.0) + b_dks + scale * b_diag[:, None] * b_q + b_dkrow
                    + b_Z)
            b_dg = tl.load(dg_in + p_k, mask=m_tk, other=0.0) + tl.cumsum(b_p, axis=0, reverse=True)
            tl.store(dq + p_k, b_dq.to(dq.dtype.element_ty), mask=m_tk)
            tl.store(dk + p_k, b_dk.to(dk.dtype.element_ty), mask=m_tk)
            tl.store(dg + p_k, b_dg, mask=m_tk)
            b_dbeta += tl.sum(b_k * b_Y, axis=1)  # (kda.12)
        else:
            b_tail = tl.zeros([BK], tl.float32)  # Σ P over the later sub-chunks
            for i_rev in range(0, BT // BC):  # a device loop: one sub-chunk's tiles live at a time
                i_sub = BT // BC - 1 - i_rev
                rows_i, m_i, b_qi, b_ki, b_bi, b_k, b_b, b_bn, b_bm = _intra_tiles(q, k, b, i_sub, start, end, i_h,
                                                                                   o_k, m_k, H, K, BT)
                b_q = _tile(q, rows, m_t, i_h, o_k, m_k, H, K)
                b_betai = tl.load(beta + rows_i * H + i_h, mask=m_i, other=0.0).to(tl.float32)
                p_rows = (rows_i[:, None] * H + i_h) * BT + o_t[None, :]  # this sub-chunk's rows [BC, BT]
                p_cols = (rows[:, None] * H + i_h) * BT + i_sub * BC + o_c[None, :]  # its columns [BT, BC]
                p_own = (rows_i[:, None] * H + i_h) * BT + i_sub * BC + o_c[None, :]  # its own block [BC, BC]
                m_rows = m_i[:, None] & m_t[None, :]
                m_cols = m_t[:, None] & m_i[None, :]
                # rows of this sub-chunk against earlier keys, through its first row n; (kda.16) with a span of
                # at most RHO in this block's key columns, its own keys s < r too (exp(b_n − b_s) ≤ exp(RHO))
                own0 = i_sub * BC
                o_r = o_c + own0  # the sub-chunk's positions in the chunk
                direct = tl.max(b_bn - b_bm, axis=0) <= RHO
                keys = o_t < tl.where(direct, own0 + BC, own0)
                b_kn = tl.where(keys[:, None], b_k * _exp(tl.where(keys[:, None], b_bn[None, :] - b_b, 0.0)), 0.0)
                b_en = _exp(b_bi - b_bn[None, :])
                b_dAqk_r = tl.load(dAqk + p_rows, mask=m_rows, other=0.0)  # [BC, BT]
                b_diag = tl.sum(tl.where(o_t[None, :] == o_r[:, None], b_dAqk_r, 0.0), axis=1)  # [BC] dAqk[r, r]
                strict_rows = o_t[None, :] < o_r[:, None]  # s < r
                b_dAqk_r = tl.where(strict_rows, b_dAqk_r, 0.0)
                b_dL_r = tl.where(strict_rows, tl.load(dL + p_rows, mask=m_rows, other=0.0), 0.0)
                b_dqs = b_en * tl.dot(b_dAqk_r, b_kn, input_precision=F32_DOT) * scale  # [BC, BK]
                b_Y = b_en * tl.dot(b_dL_r, b_kn, input_precision=F32_DOT)
                # keys of this sub-chunk against later rows, through its last row m; (kda.16) its own rows r > s
                # too (exp(b_r − b_m) ≤ exp(RHO))
                queries = o_t >= tl.where(direct, own0, own0 + BC)
                b_xm = tl.where(queries[:, None], _exp(tl.where(queries[:, None], b_b - b_bm[None, :], 0.0)), 0.0)
                b_em = _exp(b_bm[None, :] - b_bi)
                strict_cols = o_t[:, None] > o_r[None, :]  # r > s
                b_dAqk_c = tl.where(strict_cols, tl.load(dAqk + p_cols, mask=m_cols, other=0.0), 0.0)
                b_dL_c = tl.where(strict_cols, tl.load(dL + p_cols, mask=m_cols, other=0.0), 0.0)
                b_dks = b_em * tl.dot(tl.trans(b_dAqk_c), b_q * b_xm, input_precision=F32_DOT) * scale
                b_Z = b_em * tl.dot(tl.trans(b_dL_c), b_k * b_beta[:, None] * b_xm, input_precision=F32_DOT)
                if not direct:
                    # the own block, strictly below its diagonal, elementwise one row j at a time (every kept
                    # exponent ≤ 0): as a key, row j feeds the rows r > j; as a row, the keys s < j
                    b_dAqk_o = tl.load(dAqk + p_own, mask=m_i[:, None] & m_i[None, :], other=0.0)
                    b_dL_o = tl.load(dL + p_own, mask=m_i[:, None] & m_i[None, :], other=0.0)
                    for j in range(0, BC):
                        b_dqs, b_dks, b_Y, b_Z = _own_row_bwd(b_dqs, b_dks, b_Y, b_Z, j, q, k, b, beta, start + own0, end,
                                                              b_bi, b_bm, b_dAqk_o, b_dL_o, i_h, o_k, m_k, scale, H, K)
                # (kda.13) P, every diagonal term left out
                b_dkrow = b_Y * b_betai[:, None]
                b_p = b_qi * b_dqs - b_ki * b_dks + b_ki * b_dkrow - b_ki * b_Z
                p_i = (rows_i[:, None] * H + i_h) * K + o_k[None, :]
                m_ik = m_i[:, None] & m_k[None, :]
                b_dq = tl.load(dq_in + p_i, mask=m_ik, other=0.0) + b_dqs + scale * b_diag[:, None] * b_ki
                b_dk = (tl.load(dk_in + p_i, mask=m_ik, other=0.0) + b_dks + scale * b_diag[:, None] * b_qi + b_dkrow
                        + b_Z)
                b_dg = tl.load(dg_in + p_i, mask=m_ik, other=0.0) + tl.cumsum(b_p, axis=0, reverse=True) + b_tail[None, :]
                b_tail += tl.sum(b_p, axis=0)
                tl.store(dq + p_i, b_dq.to(dq.dtype.element_ty), mask=m_ik)
                tl.store(dk + p_i, b_dk.to(dk.dtype.element_ty), mask=m_ik)
                tl.store(dg + p_i, b_dg, mask=m_ik)
                # (kda.12) dβ_r += k_r · Y_r, placed at this sub-chunk's rows of the chunk
                b_dbi = tl.sum(b_ki * b_Y, axis=1)  # [BC]
                b_dbeta += tl.sum(tl.where(o_t[None, :] == o_r[:, None], b_dbi[:, None], 0.0), axis=0)
    tl.store(dbeta + rows * H + i_h, b_dbeta, mask=m_t)


# ----------------------------------------------------------------------------- recurrent form


def _recurrent_configs():
    return [triton.Config({"BV": bv}, num_warps=w) for bv in (16, 32, 64) for w in (2, 4)]


def _prune_recurrent(configs, named_args, **_):
    """Block sizes that fit V, and [BK, BV] state tiles that fit in registers."""
    BK = triton.next_power_of_2(named_args["q"].shape[-1])
    BVmax = max(16, triton.next_power_of_2(named_args["v"].shape[-1]))
    kept = [c for c in configs if c.kwargs["BV"] <= BVmax and BK * c.kwargs["BV"] <= 8192]
    return kept or [min(configs, key=lambda c: c.kwargs["BV"])]


@triton.jit
def _token(q, k, v, g, beta, t, i_h, o_k, o_v, m_k, m_v, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr):
    """Row t of q, k, g ([BK]), v ([BV]) and β, as float32."""
    b_q = tl.load(q + (t * H + i_h) * K + o_k, mask=m_k, other=0.0).to(tl.float32)
    b_k = tl.load(k + (t * H + i_h) * K + o_k, mask=m_k, other=0.0).to(tl.float32)
    b_g = tl.load(g + (t * H + i_h) * K + o_k, mask=m_k, other=0.0).to(tl.float32)
    b_v = tl.load(v + (t * H + i_h) * V + o_v, mask=m_v, other=0.0).to(tl.float32)
    b_beta = tl.load(beta + t * H + i_h).to(tl.float32)
    return b_q, b_k, b_v, b_g, b_beta


@triton.jit
def _delta_step(b_h, b_k, b_v, b_g, b_beta):
    """(kda.1) S' = diag(exp g) S, r = v − S'ᵀ k, S = S' + β k rᵀ; returns (S', r, S)."""
    b_hp = b_h * _exp(b_g)[:, None]
    b_r = b_v - tl.sum(b_hp * b_k[:, None], axis=0)  # [BV]
    return b_hp, b_r, b_hp + b_k[:, None] * (b_beta * b_r)[None, :]


@triton.autotune(configs=_recurrent_configs(), key=["H", "K", "V", "SAVE"],
                 prune_configs_by={"early_config_prune": _prune_recurrent})
@triton.heuristics({"SAVE": given("ckpt")})
@triton.jit
def recurrent_kda_fwd_kernel(q, k, v, g, beta, h0, cu_seqlens,  # inputs
                             o, ht, ckpt,  # outputs; ckpt [TT // CHUNK + N + 1, H, K, V]: the state every CHUNK steps
                             scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                             BK: tl.constexpr, BV: tl.constexpr, CHUNK: tl.constexpr, SAVE: tl.constexpr):
    """(kda.1) One sequence·head, one value block, token by token; the state stays in registers."""
    i_v, i_nh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    i_n, i_h = i_nh // H, i_nh % H
    bos, eos = sequence_bounds(cu_seqlens, i_n)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    m_h = m_k[:, None] & m_v[None, :]
    p_state = o_k[:, None] * V + o_v[None, :]
    p_ckpt = ckpt + ((bos // CHUNK + i_n) * H + i_h) * K * V + p_state  # checkpoint 0 of this sequence
    b_h = tl.load(h0 + i_nh * K * V + p_state, mask=m_h, other=0.0)  # [BK, BV]
    for i in range(0, eos - bos):
        if SAVE:
            tl.store(p_ckpt + (i // CHUNK) * H * K * V, b_h, mask=m_h & (i % CHUNK == 0))
        t = bos + i
        b_q, b_k, b_v, b_g, b_beta = _token(q, k, v, g, beta, t, i_h, o_k, o_v, m_k, m_v, H, K, V)
        _, _, b_h = _delta_step(b_h, b_k, b_v, b_g, b_beta)
        b_o = tl.sum(b_h * (b_q * scale)[:, None], axis=0)
        tl.store(o + (t * H + i_h) * V + o_v, b_o.to(o.dtype.element_ty), mask=m_v)
    tl.store(ht + i_nh * K * V + p_state, b_h, mask=m_h)


@triton.jit
def recurrent_kda_bwd_kernel(q, k, v, g, beta, do, dht, ckpt, cu_seqlens,  # inputs
                             dq, dk, dg, dbeta, dv, dh0, scratch,
                             # outputs: dq, dk, dg [NV, TT, H, K] and dβ [NV, TT, H] partial over value blocks
                             # (f32); dv [TT, H, V]; dS_0; scratch [NV·N·H, CHUNK, BK, BV]
                             scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                             BK: tl.constexpr, BV: tl.constexpr, CHUNK: tl.constexpr):
    """(kda.14) One sequence·head, one value block, last token first. Each chunk of CHUNK steps is
    recomputed from its checkpoint into the scratch (the state before every step), then walked back."""
    i_v, i_nh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    NH = tl.num_programs(1)
    i_n, i_h = i_nh // H, i_nh % H
    bos, eos = sequence_bounds(cu_seqlens, i_n)
    n = eos - bos
    TT = tl.load(cu_seqlens + NH // H)  # the packed length: the last bound
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    m_h = m_k[:, None] & m_v[None, :]
    p_state = o_k[:, None] * V + o_v[None, :]
    p_tile = o_k[:, None] * BV + tl.arange(0, BV)[None, :]
    p_scratch = scratch + (i_v * NH + i_nh) * CHUNK * BK * BV
    p_ckpt = ckpt + ((bos // CHUNK + i_n) * H + i_h) * K * V + p_state
    b_dh = tl.load(dht + i_nh * K * V + p_state, mask=m_h, other=0.0)  # [BK, BV]
    n_chunks = tl.cdiv(n, CHUNK)
    for c_rev in range(0, n_chunks):
        c = n_chunks - 1 - c_rev
        b_h = tl.load(p_ckpt + c * H * K * V, mask=m_h, other=0.0)
        t0 = c * CHUNK
        steps = tl.minimum(n - t0, CHUNK)
        for j in range(0, steps):  # the state before each step of the chunk
            tl.store(p_scratch + j * BK * BV + p_tile, b_h)
            _, b_k, b_v, b_g, b_beta = _token(q, k, v, g, beta, bos + t0 + j, i_h, o_k, o_v, m_k, m_v, H, K, V)
            _, _, b_h = _delta_step(b_h, b_k, b_v, b_g, b_beta)
        tl.debug_barrier()
        for j_rev in range(0, steps):
            j = steps - 1 - j_rev
            t = bos + t0 + j
            b_prev = tl.load(p_scratch + j * BK * BV + p_tile)
            b_q, b_k, b_v, b_g, b_beta = _token(q, k, v, g, beta, t, i_h, o_k, o_v, m_k, m_v, H, K, V)
            b_do = tl.load(do + (t * H + i_h) * V + o_v, mask=m_v, other=0.0).to(tl.float32)
            b_hp, b_r, b_h = _delta_step(b_prev, b_k, b_v, b_g, b_beta)
            b_dh += (b_q * scale)[:, None] * b_do[None, :]  # dS_t
            b_ddelta = tl.sum(b_dh * b_k[:, None], axis=0)  # [BV] dδ = dS_tᵀ k
            b_dp = -b_beta * b_ddelta  # the gradient of S'ᵀ k
            b_dhp = b_dh + b_k[:, None] * b_dp[None, :]  # dS'
            b_dq = tl.sum(b_h * b_do[None, :], axis=1) * scale
            b_dk = tl.sum(b_dh * (b_beta * b_r)[None, :], axis=1) + tl.sum(b_hp * b_dp[None, :], axis=1)
            b_dg = tl.sum(b_dhp * b_hp, axis=1)
            p_k = ((i_v * TT + t) * H + i_h) * K + o_k
            tl.store(dq + p_k, b_dq, mask=m_k)
            tl.store(dk + p_k, b_dk, mask=m_k)
            tl.store(dg + p_k, b_dg, mask=m_k)
            tl.store(dbeta + (i_v * TT + t) * H + i_h, tl.sum(b_ddelta * b_r, axis=0))
            tl.store(dv + (t * H + i_h) * V + o_v, (b_beta * b_ddelta).to(dv.dtype.element_ty), mask=m_v)
            b_dh = b_dhp * _exp(b_g)[:, None]  # dS_{t−1}
        tl.debug_barrier()  # the next chunk overwrites the scratch
    tl.store(dh0 + i_nh * K * V + p_state, b_dh, mask=m_h)

"""Triton kernels of chunked KDA's forward before the state sweep, and its output. Tags refer to NOTES.md.

Every chunked kernel sees packed sequences (`[TT, H, ·]` rows) cut into chunks of BT rows, in the
chunk slots of `workbench._bounds.chunk_slots` (`bounds[slot] = (start, end)` rows, start = end for an
unused slot; per-chunk states stored by slot). The per-chunk matrices A, Aqk, dAqk and dL are stored
`[TT, H, BT]` (float32, but Aqk in the inputs' dtype, which its products round it to): row r of its
chunk's matrix at the row of token r, columns by position in the chunk (NOTES.md, "Where A lives").

* `chunk_kda_fwd_prep_kernel` (slot, head): the next three kernels' work in one program per chunk (the
  default; `Tuning(fused_forward=False)` runs the three).
* `chunk_cumsum_kernel` (`workbench.tl_chunked`): b, chunk-local prefix sums of the log-decays (kda.2).
* `chunk_kda_intra_kernel` (slot, head): L and Aqk (kda.3, kda.6; whole-chunk products by kda.17 where
  the decays allow, else by sub-chunks, the own block by kda.16 where it can), then A = (I + L)⁻¹ in
  place by blocked forward substitution (kda.5).
* `chunk_kda_wu_kernel` (slot, head): the WY vectors w, u (kda.3); k̂ for the sweep, q̄ for the output.
* `chunk_kda_o_kernel` (V block, slot, head): o = q̄ h + Aqk δ (kda.6), after the sweep (sweep_kernels).

Matrix products take the inputs' dtype where the reference rounds to it (bfloat16 tensor cores),
and float32 (`F32_DOT`: "ieee" for float32 inputs, tf32 otherwise) where the reference keeps
float32; A's inversion in full float32 for float32 inputs and in tf32x3 (float32 to ~1e-6 on tensor
cores) for bfloat16 inputs (`INV_DOT`).
"""

import triton
import triton.language as tl

from ..tl_chunked import BC, RHO, SUB_CHUNK, block_configs, load_row, load_tile, prune_blocks, slot_rows
from ..tl_helpers import exp_e
from .steps import khat_decay, load_matrix, tile_rows


LOG2_BC = tl.constexpr(SUB_CHUNK.bit_length() - 1)  # BC = 2^LOG2_BC


@triton.jit
def _invert_unit_lower(b_L, INV_DOT: tl.constexpr):
    """(kda.5b) (I + L)⁻¹ of a batch of strictly lower [BC, BC] tiles (b_L [NB, BC, BC]) as a product: with
    N = −L (nilpotent, N^BC = 0), (I + L)⁻¹ = Σ_{k<BC} N^k = (I + N)(I + N²)(I + N⁴)(I + N⁸) for BC = 16, in six
    full-float32 products. Row-by-row substitution took two dependent cross-thread reductions per row
    (0.30 ms of the kernel's 1.23 at the target shape on an H200; this: 0.10)."""
    o_c = tl.arange(0, BC)
    b_N = -b_L
    b_X = tl.where(o_c[:, None] == o_c[None, :], 1.0, 0.0)[None, :, :] + b_N  # Σ_{k<2} N^k
    b_P = b_N
    for _ in tl.static_range(1, LOG2_BC):
        b_P = tl.dot(b_P, b_P, input_precision=INV_DOT)  # N^(2^i)
        b_X = b_X + tl.dot(b_X, b_P, input_precision=INV_DOT)  # Σ_{k<2^(i+1)} N^k
    return b_X


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
    b_ke = b_kj[None, :] * exp_e(tl.where(keep[:, None], b_bi - b_bj[None, :], 0.0))  # [BC, BK]
    col = (o_c[None, :] == j) & keep[:, None]
    b_Aqk_own = tl.where(col, tl.sum(b_qi * b_ke, axis=1)[:, None], b_Aqk_own)
    b_L_own = tl.where(col, tl.sum(b_ki * b_ke, axis=1)[:, None], b_L_own)
    return b_Aqk_own, b_L_own


# Key blocks of the forward's intra products (BKC) at 2, 4 or 8 warps (2 the fastest on an H200 at the target shape:
# the [16, ·] tiles are small), 1 or 2 pipeline stages (NOTES.md, "Pipeline depth")
@triton.autotune(configs=block_configs("BKC", (32, 64), warps=(2, 4, 8), stages=(1, 2)), key=["H", "K", "BT"],
                 prune_configs_by={"early_config_prune": prune_blocks("BKC", "q")})
@triton.jit
def chunk_kda_intra_kernel(q, k, b, beta, bounds,  # inputs
                           A, Aqk,  # outputs [TT, H, BT]: A float32, Aqk in the inputs' dtype
                           scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr,
                           BK: tl.constexpr, BKC: tl.constexpr, F32_DOT: tl.constexpr, WHOLE_SPAN: tl.constexpr,
                           INV_DOT: tl.constexpr):
    """(kda.3, kda.6, kda.5) A and Aqk of one chunk (`_intra`)."""
    i_s, i_h = tl.program_id(0).to(tl.int64), tl.program_id(1)
    start, end = slot_rows(bounds, i_s)
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
    span = tl.max(load_row(b, start, i_h, o_kf, m_kf, H, K) - load_row(b, end - 1, i_h, o_kf, m_kf, H, K), axis=0)
    if span <= WHOLE_SPAN:
        # (kda.17) every factor exp(±(b − b_mid)) within e^(WHOLE_SPAN / 2); rows past the end are 0
        b_Aqk = tl.zeros([BT, BT], tl.float32)
        b_L = tl.zeros([BT, BT], tl.float32)
        for i_k in range(0, tl.cdiv(K, BKC)):
            o_k = i_k * BKC + tl.arange(0, BKC)
            m_k = o_k < K
            b_mid = 0.5 * (load_row(b, start, i_h, o_k, m_k, H, K) + load_row(b, end - 1, i_h, o_k, m_k, H, K))
            b_d = tl.where(m_t[:, None], load_tile(b, rows, m_t, i_h, o_k, m_k, H, K) - b_mid[None, :], 0.0)
            b_k = load_tile(k, rows, m_t, i_h, o_k, m_k, H, K)
            b_kcol = tl.trans(b_k * exp_e(-b_d))  # [BKC, BT]: k_s exp(b_mid − b_s)
            b_up = exp_e(b_d)  # exp(b_r − b_mid)
            b_Aqk += tl.dot(load_tile(q, rows, m_t, i_h, o_k, m_k, H, K) * b_up, b_kcol, input_precision=F32_DOT)
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
            b_bm = load_row(b, row_m, i_h, o_kf, m_kf, H, K)
            direct = tl.max(load_row(b, row_n, i_h, o_kf, m_kf, H, K) - b_bm, axis=0) <= RHO
            keys = (o_t < tl.where(direct, own0 + BC, own0)) & m_t
            b_Aqk = tl.zeros([BC, BT], tl.float32)
            b_L = tl.zeros([BC, BT], tl.float32)
            for i_k in range(0, tl.cdiv(K, BKC)):
                o_k = i_k * BKC + tl.arange(0, BKC)
                m_k = o_k < K
                b_bn = load_row(b, row_n, i_h, o_k, m_k, H, K)
                b_en = exp_e(tl.where(m_i[:, None], load_tile(b, rows_i, m_i, i_h, o_k, m_k, H, K) - b_bn[None, :], 0.0))
                b_kn = load_tile(k, rows, keys, i_h, o_k, m_k, H, K)  # [BT, BKC], 0 outside the keys
                b_kn *= exp_e(tl.where(keys[:, None], b_bn[None, :] - load_tile(b, rows, keys, i_h, o_k, m_k, H, K), 0.0))
                b_Aqk += tl.dot(load_tile(q, rows_i, m_i, i_h, o_k, m_k, H, K) * b_en, tl.trans(b_kn), input_precision=F32_DOT)
                b_L += tl.dot(load_tile(k, rows_i, m_i, i_h, o_k, m_k, H, K) * b_en, tl.trans(b_kn), input_precision=F32_DOT)
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
                b_qi = load_tile(q, rows_i, m_i, i_h, o_kf, m_kf, H, K)
                b_ki = load_tile(k, rows_i, m_i, i_h, o_kf, m_kf, H, K)
                b_bi = tl.where(m_i[:, None], load_tile(b, rows_i, m_i, i_h, o_kf, m_kf, H, K), b_bm[None, :])
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

    # (kda.5b) every diagonal block's D_i = (I + L_ii)⁻¹ at once (a batch of BT / BC blocks), stored over L_ii
    o_b = tl.arange(0, BT // BC)[:, None, None]
    rows3 = start + o_b * BC + o_c[None, :, None]
    p_3 = A + (rows3 * H + i_h) * BT + o_b * BC + o_c[None, None, :]  # [BT / BC, BC, BC]: the diagonal blocks
    b_D3 = _invert_unit_lower(tl.load(p_3, mask=rows3 < end, other=0.0), INV_DOT)
    tl.debug_barrier()  # every thread has read its blocks
    tl.store(p_3, b_D3, mask=rows3 < end)
    tl.debug_barrier()
    # (kda.5) block row i of A: D_i (E_i − L_{i,<i} A_{<i}), rows of blocks in order (block rows j < i of the array
    # already hold A, block row i still holds L and D_i on its diagonal); the sum over j < i as one
    # [BC, BT] × [BT, BT] product of the row's L left of its diagonal block and the finished rows
    for i_sub in range(0, BT // BC):
        own0 = i_sub * BC
        rows_i = start + own0 + o_c
        m_i = rows_i < end
        p_i = A + (rows_i[:, None] * H + i_h) * BT
        b_D = tl.load(p_i + own0 + o_c[None, :], mask=m_i[:, None], other=0.0)
        b_Y = tl.where(o_t[None, :] == (o_c + own0)[:, None], 1.0, 0.0)  # E_i [BC, BT]
        if i_sub > 0:
            b_L = tl.load(p_i + o_t[None, :], mask=m_i[:, None] & (o_t < own0)[None, :], other=0.0)  # [BC, BT]
            b_Adone = tl.load(A + (rows[:, None] * H + i_h) * BT + o_t[None, :],
                              mask=(m_t & (o_t < own0))[:, None] & m_t[None, :], other=0.0)  # [BT, BT] rows < own0
            b_Y -= tl.dot(b_L, b_Adone, input_precision=INV_DOT)
        tl.store(p_i + o_t[None, :], tl.dot(b_D, b_Y, input_precision=INV_DOT), mask=m_i[:, None])
        tl.debug_barrier()


# 1–3 pipeline stages: the best depends on the block and warps (NOTES.md, "Pipeline depth")
@triton.autotune(configs=block_configs("BV", stages=(1, 2, 3)), key=["H", "K", "V", "BT"],
                 prune_configs_by={"early_config_prune": prune_blocks("BV", "v")})
@triton.jit
def chunk_kda_wu_kernel(q, k, v, b, beta, A, bounds,  # inputs
                        w, u, qbar, khat,  # outputs in the inputs' dtype: w, q̄, k̂ [TT, H, K]; u [TT, H, V]
                        scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                        BV: tl.constexpr, F32_DOT: tl.constexpr):
    """(kda.3, kda.4, kda.6) w, u, k̂ and q̄ of one chunk (`_wu`)."""
    i_s, i_h = tl.program_id(0).to(tl.int64), tl.program_id(1)
    start, end = slot_rows(bounds, i_s)
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
    b_A = load_matrix(A, rows, m_t, i_h, H, BT).to(dtype)
    b_beta = tl.load(beta + rows * H + i_h, mask=m_t, other=0.0).to(tl.float32)
    # key and value columns BV at a time in one loop (a block past K or V is masked out whole), so that each
    # step's loads of b, k, q and v are in flight together: the step waits on memory once, not twice
    for i_c in range(tl.cdiv(tl.maximum(K, V), BV)):
        o_k = i_c * BV + tl.arange(0, BV)
        m_k = o_k < K
        m_tk = m_t[:, None] & m_k[None, :]
        p_tk = (rows[:, None] * H + i_h) * K + o_k[None, :]
        o_v = o_k
        m_v = o_v < V
        b_b = load_tile(b, rows, m_t, i_h, o_k, m_k, H, K)
        b_k = load_tile(k, rows, m_t, i_h, o_k, m_k, H, K)
        b_q = load_tile(q, rows, m_t, i_h, o_k, m_k, H, K)
        b_vb = tile_rows(v, rows, m_t, i_h, o_v, m_v, H, V).to(tl.float32) * b_beta[:, None]
        b_eb = exp_e(b_b)
        b_w = tl.dot(b_A, (b_k * b_eb * b_beta[:, None]).to(dtype), input_precision=F32_DOT)  # [BT, BV]
        tl.store(w + p_tk, b_w.to(dtype), mask=m_tk)
        b_khat = b_k * khat_decay(b_b, load_row(b, end - 1, i_h, o_k, m_k, H, K), rows, end)
        tl.store(khat + p_tk, b_khat.to(dtype), mask=m_tk)
        tl.store(qbar + p_tk, (b_q * b_eb * scale).to(dtype), mask=m_tk)
        b_u = tl.dot(b_A, b_vb.to(dtype), input_precision=F32_DOT)  # [BT, BV]
        tl.store(u + (rows[:, None] * H + i_h) * V + o_v[None, :], b_u.to(dtype), mask=m_t[:, None] & m_v[None, :])


def _prep_configs():
    """(BKC, BV) of the fused forward at 4 or 8 warps (at 2, where the intra kernel alone ran best, every
    config spills at K = V = 128), 1 or 2 pipeline stages."""
    return [triton.Config({"BKC": bkc, "BV": bv}, num_warps=w, num_stages=st)
            for bkc in (32, 64) for bv in (32, 64) for w in (4, 8) for st in (1, 2)]


def _prune_prep(configs, named_args, **_):
    return prune_blocks("BV", "v")(prune_blocks("BKC", "q")(configs, named_args), named_args)


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
    start, end = slot_rows(bounds, i_s)
    if start >= end:
        return
    rows = start + tl.arange(0, BT)
    m_t = rows < end
    o_kf = tl.arange(0, BK)  # all of K at once: one wait on g's load, not one per key block
    m_kf = o_kf < K
    tl.store(b + (rows[:, None] * H + i_h) * K + o_kf[None, :],
             tl.cumsum(load_tile(g, rows, m_t, i_h, o_kf, m_kf, H, K), axis=0), mask=m_t[:, None] & m_kf[None, :])
    tl.debug_barrier()  # b is read back below by other threads of this program
    _intra(q, k, b, beta, A, Aqk, start, end, i_h, scale, H, K, BT, BK, BKC, F32_DOT, WHOLE_SPAN, INV_DOT)
    _wu(q, k, v, b, beta, A, w, u, qbar, khat, start, end, i_h, scale, H, K, V, BT, BV, F32_DOT)


@triton.autotune(configs=block_configs("BV"), key=["H", "K", "V", "BT"],
                 prune_configs_by={"early_config_prune": prune_blocks("BV", "delta")})
@triton.jit
def chunk_kda_o_kernel(qbar, Aqk, delta, hs, bounds,  # inputs
                       o,  # output [TT, H, V]
                       H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                       BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr):
    """(kda.6) o = q̄ h + Aqk δ (q̄ = scale · q ⊙ exp b from the wu kernel)."""
    i_v, i_s, i_h = tl.program_id(0), tl.program_id(1).to(tl.int64), tl.program_id(2)
    start, end = slot_rows(bounds, i_s)
    if start >= end:
        return
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    rows = start + tl.arange(0, BT)
    m_t = rows < end
    b_delta = tile_rows(delta, rows, m_t, i_h, o_v, m_v, H, V)  # [BT, BV]
    dtype = b_delta.dtype
    b_qbar = tile_rows(qbar, rows, m_t, i_h, o_k, m_k, H, K)  # [BT, BK]
    b_h = tl.load(hs + (i_s * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :], mask=m_k[:, None] & m_v[None, :],
                  other=0.0)
    b_Aqk = load_matrix(Aqk, rows, m_t, i_h, H, BT)
    b_o = (tl.dot(b_qbar.to(dtype), b_h.to(dtype), input_precision=F32_DOT)
           + tl.dot(b_Aqk.to(dtype), b_delta, input_precision=F32_DOT))
    tl.store(o + (rows[:, None] * H + i_h) * V + o_v[None, :], b_o.to(o.dtype.element_ty),
             mask=m_t[:, None] & m_v[None, :])

"""Triton kernels of chunked KDA's backward after the dh sweep: the WY part and the intra-chunk part. Tags: NOTES.md.

Every chunked kernel sees packed sequences (`[TT, H, ·]` rows) cut into chunks of BT rows, in the
chunk slots of `workbench._bounds.chunk_slots` (`bounds[slot] = (start, end)` rows, start = end for an
unused slot; per-chunk states stored by slot). The per-chunk matrices A, Aqk, dAqk and dL are stored
`[TT, H, BT]` (float32, but Aqk in the inputs' dtype, which its products round it to): row r of its
chunk's matrix at the row of token r, columns by position in the chunk (NOTES.md, "Where A lives").

* `chunk_kda_bwd_prep_kernel` (slot, head): b, w and δ formed again from g, k, v, β and the kept A and
  chunk-start states (kda.2, kda.3), before the dh sweep; one config (`_bwd_prep_config` in `workbench/kda/__init__.py`).
* `chunk_kda_bwd_wy_dqkg_fused_kernel` (slot, head): the WY backward and the state parts of
  dq/dk/dg in one kernel; dw never leaves registers (kda.10, kda.11, kda.13). It also gives dv,
  dAqk, dL = −Aᵀ dA Aᵀ (kda.7) and the WY part of dβ (kda.12).
  `chunk_kda_bwd_inter_kernel` + `chunk_kda_bwd_wy_kernel` are the same work unfused (dw through
  memory), kept for timing the fusion.
* `chunk_kda_bwd_intra_kernel` (slot, head): the intra-chunk parts (through L and Aqk) of dq, dk,
  dβ, and dg's reverse cumulative sum (kda.11–kda.13).

dL = −Aᵀ dA Aᵀ is formed in float32 precision: three tf32 passes on the tensor cores for 16-bit inputs, full
float32 for float32 inputs (`_store_dL`).
"""

import triton
import triton.language as tl

from ..tl_chunked import BC, RHO, block_configs, intra_tiles, load_row, load_tile, prune_blocks, slot_rows
from ..tl_helpers import exp_e
from .steps import khat_decay, load_matrix, tile_rows


def _block_configs():
    """(BK, BV) pairs for the kernels that loop over both key and value blocks."""
    return [triton.Config({"BK": bk, "BV": bv}, num_warps=w, num_stages=2)
            for bk, bv, w in ((32, 32, 4), (64, 64, 8), (32, 64, 4), (32, 32, 8), (32, 64, 8))]


def _prune_blocks(configs, named_args, **_):
    K = max(16, triton.next_power_of_2(named_args["q"].shape[-1]))
    V = max(16, triton.next_power_of_2(named_args["v"].shape[-1]))
    kept = [c for c in configs if c.kwargs["BK"] <= K and c.kwargs["BV"] <= V]
    return kept or [min(configs, key=lambda c: c.kwargs["BK"] * c.kwargs["BV"])]


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
        b_do = tile_rows(do, rows, m_t, i_h, o_v, m_v, H, V)
        b_delta = tile_rows(delta, rows, m_t, i_h, o_v, m_v, H, V)
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
        b_du = tile_rows(ddelta, rows, m_t, i_h, o_v, m_v, H, V)  # [BT, BV]
        b_v = tile_rows(v, rows, m_t, i_h, o_v, m_v, H, V).to(tl.float32)
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
        b_do = tile_rows(do, rows, m_t, i_h, o_v, m_v, H, V)  # [BT, BV]
        dtype = b_do.dtype
        b_delta = tile_rows(delta, rows, m_t, i_h, o_v, m_v, H, V)
        b_du = tile_rows(ddelta, rows, m_t, i_h, o_v, m_v, H, V)
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
def _inter_outputs(b_q, b_k, b_b, b_bL, rows, end, b_dqbar, b_dkhat, b_hdh, scale: tl.constexpr, BT: tl.constexpr):
    """(kda.11, kda.13) The state parts of dq, dk and dg for one block of keys:
    dq = scale exp(b) ⊙ dq̄, dk = exp(b_L − b) ⊙ dk̂, dg = Σ_{r≥t} q̄_r ⊙ dq̄_r + Σ_{s<t} X_s +
    exp(b_L) ⊙ rowsum(h ⊙ dH), X_s = k̂_s ⊙ dk̂_s, summed forward (no total − suffix difference): X moved
    down one row in registers (row t takes row t − 1, row 0 takes 0), then summed inclusively."""
    o_t = tl.arange(0, BT)
    b_eb = exp_e(b_b)
    b_ehat = khat_decay(b_b, b_bL, rows, end)
    b_dq = b_dqbar * b_eb * scale
    b_dk = b_dkhat * b_ehat
    b_x = b_k * b_ehat * b_dkhat
    up = tl.broadcast_to(tl.maximum(o_t - 1, 0)[:, None], b_x.shape)
    b_xprev = tl.where((o_t > 0)[:, None], tl.gather(b_x, up, axis=0), 0.0)  # X_{t−1}, 0 at t = 0
    b_dg = (tl.cumsum(b_q * b_eb * scale * b_dqbar, axis=0, reverse=True) + tl.cumsum(b_xprev, axis=0)
            + (exp_e(b_bL) * b_hdh)[None, :])
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
              TRANS_A: tl.constexpr, DL_DOT: tl.constexpr):
    """(kda.7) dL = −Aᵀ dA Aᵀ on the strictly lower triangle (L = X − I, A = X⁻¹), as the disputed
    products compute it: Au (dA Au) with Au the A tile as used (Aᵀ when right), in float32 precision.
    DL_DOT "tf32x3" (16-bit inputs): two whole [BT, BT] products of three tf32 passes each on the tensor cores
    (float32 to about 1e-6 relative, as the forward's inversion takes them: dL then enters tf32 products).
    "ieee" (float32 inputs): full float32 on the FMA units, 16 columns of the inner dimension per product: dA,
    then M = dA Au, are parked in dL's own rows and read back a slice at a time, and Au is read from A a slice
    at a time (one [BT, BT] × [BT, BT] float32 product would hold whole rows and columns of both operands in
    registers)."""
    o_t = tl.arange(0, BT)
    m_t = (start + o_t) < end
    p_rows = dL + ((start + o_t)[:, None] * H + i_h) * BT  # [BT, 1] the chunk's rows of dL
    if DL_DOT == "ieee":
        o_16 = tl.arange(0, 16)
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
    else:
        b_Au = _A_used(A, start, end, i_h, o_t, o_t, H, BT, A_T_POINTER, TRANS_A)
        b_dL = tl.dot(b_Au, tl.dot(b_dA, b_Au, input_precision=DL_DOT), input_precision=DL_DOT)  # disputed: Aᵀ (dA Aᵀ)
    tl.store(p_rows + o_t[None, :], tl.where((o_t[:, None] > o_t[None, :]) & m_t[:, None] & m_t[None, :], -b_dL, 0.0),
             mask=m_t[:, None])


@triton.jit
def chunk_kda_bwd_prep_kernel(g, k, v, beta, A, hs, bounds,  # inputs
                              b, w, delta,  # outputs: b float32 [TT, H, K]; w [TT, H, K], δ [TT, H, V] in the inputs' dtype
                              H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
                              BKC: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr):
    """(kda.2, kda.3) What the backward reads that the forward does not keep, formed again for one chunk from
    the kept A and chunk-start state h: b = the chunk's prefix sums of g, w = A (β ⊙ k ⊙ exp b) and
    δ = u − w h with u = A (β ⊙ v), each rounded where the forward's kernels round it (w and u stored in the
    inputs' dtype; δ from one product over all K with h in hs's dtype, as the forward sweep's step). b and w
    BKC key columns at a time; δ then reads w back whole (this program's own stores, from cache). Offsets
    within the chunk are int32 from the chunk's first row (few registers: no int64 address tiles kept)."""
    i_s, i_h = tl.program_id(0).to(tl.int64), tl.program_id(1)
    start, end = slot_rows(bounds, i_s)
    if start >= end:
        return
    o_t = tl.arange(0, BT)
    m_t = o_t < end - start
    rows_k = (start * H + i_h) * K  # the chunk's first row of every [TT, H, K] array, at head i_h
    rows_v = (start * H + i_h) * V
    dtype = w.dtype.element_ty
    b_A = load_matrix(A, start + o_t, m_t, i_h, H, BT).to(dtype)
    b_beta = tl.load(beta + (start + o_t) * H + i_h, mask=m_t, other=0.0).to(tl.float32)
    for i_k in range(tl.cdiv(K, BKC)):
        o_k = i_k * BKC + tl.arange(0, BKC)
        off = o_t[:, None] * (H * K) + o_k[None, :]
        m_tk = m_t[:, None] & (o_k < K)[None, :]
        b_b = tl.cumsum(tl.load(g + rows_k + off, mask=m_tk, other=0.0).to(tl.float32), axis=0)  # [BT, BKC]
        tl.store(b + rows_k + off, b_b, mask=m_tk)
        b_kg = tl.load(k + rows_k + off, mask=m_tk, other=0.0).to(tl.float32) * exp_e(b_b) * b_beta[:, None]
        b_w = tl.dot(b_A, b_kg.to(dtype), input_precision=F32_DOT)
        tl.store(w + rows_k + off, b_w.to(dtype), mask=m_tk)
    tl.debug_barrier()  # w is read back whole below by other threads of this program
    o_k = tl.arange(0, BK)
    m_k = o_k < K
    b_w = tl.load(w + rows_k + o_t[:, None] * (H * K) + o_k[None, :], mask=m_t[:, None] & m_k[None, :], other=0.0)
    for i_v in range(tl.cdiv(V, BV)):
        o_v = i_v * BV + tl.arange(0, BV)
        m_v = o_v < V
        off = o_t[:, None] * (H * V) + o_v[None, :]
        m_tv = m_t[:, None] & m_v[None, :]
        b_vb = tl.load(v + rows_v + off, mask=m_tv, other=0.0).to(tl.float32) * b_beta[:, None]
        b_u = tl.dot(b_A, b_vb.to(dtype), input_precision=F32_DOT).to(dtype).to(tl.float32)  # [BT, BV]
        b_h = tl.load(hs + (i_s * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :],
                      mask=m_k[:, None] & m_v[None, :], other=0.0)  # [BK, BV]
        b_delta = b_u - tl.dot(b_w, b_h.to(dtype), input_precision=F32_DOT)
        tl.store(delta + rows_v + off, b_delta.to(dtype), mask=m_tv)


@triton.autotune(configs=_block_configs(), key=["H", "K", "V", "BT"],
                 prune_configs_by={"early_config_prune": _prune_blocks})
@triton.jit
def chunk_kda_bwd_wy_dqkg_fused_kernel(
        q, k, v, b, beta, A, delta, ddelta, do, hs, dhs, bounds,  # inputs
        dq, dk, dv, dg, dbeta, dAqk, dL,  # outputs: dq, dk, dg [TT, H, K] f32 (state + WY parts), dv, dβ
        dq_f, dk_f, dg_f, dbeta_f,  # with WHOLE_IN: dq, dk, dg, dβ whole, in their inputs' dtypes
        scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
        BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr, A_T_POINTER: tl.constexpr,
        TRANS_A: tl.constexpr, WHOLE_IN: tl.constexpr, WHOLE_SPAN: tl.constexpr, DL_DOT: tl.constexpr):
    """(kda.9–kda.13) The fused backward of one chunk: dw is made per key block and used at once. With WHOLE_IN,
    a chunk whose every key column spans at most WHOLE_SPAN (`_chunk_whole`) also gets its intra-chunk parts here
    (`_whole_chunk_grads`, as `chunk_kda_bwd_intra_kernel` would form them, which then skips it): the state and WY
    parts just stored, dAqk and dL are read back by this program (from cache) and the whole gradients stored in
    dq_f, dk_f, dg_f, dbeta_f."""
    i_s, i_h = tl.program_id(0).to(tl.int64), tl.program_id(1)
    start, end = slot_rows(bounds, i_s)
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
        b_k = load_tile(k, rows, m_t, i_h, o_k, m_k, H, K)
        b_b = load_tile(b, rows, m_t, i_h, o_k, m_k, H, K)
        b_bL = load_row(b, end - 1, i_h, o_k, m_k, H, K)
        b_dqbar, b_dkhat, b_dw, b_hdh = _inter_keys(delta, ddelta, do, hs, dhs, i_s, rows, m_t, i_h, o_k, m_k,
                                                    H, K, V, BT, BK, BV, F32_DOT)
        b_kg = b_k * exp_e(b_b)
        b_dA_k, b_dkg, b_dbeta_k = _wy_keys(b_dw, b_A, b_kg, b_beta, F32_DOT, TRANS_A)  # dw from registers
        b_dA += b_dA_k
        b_dbeta += b_dbeta_k
        p_k = (rows[:, None] * H + i_h) * K + o_k[None, :]
        m_tk = m_t[:, None] & m_k[None, :]
        b_dq, b_dk, b_dg = _inter_outputs(load_tile(q, rows, m_t, i_h, o_k, m_k, H, K), b_k, b_b, b_bL, rows, end,
                                          b_dqbar, b_dkhat, b_hdh, scale, BT)
        b_dk += b_dkg * exp_e(b_b)
        b_dg += tl.cumsum(b_kg * b_dkg, axis=0, reverse=True)
        tl.store(dq + p_k, b_dq, mask=m_tk)
        tl.store(dk + p_k, b_dk, mask=m_tk)
        tl.store(dg + p_k, b_dg, mask=m_tk)
    _store_dL(dL, A, b_dA, start, end, i_h, H, BT, A_T_POINTER, TRANS_A, DL_DOT)
    tl.store(dbeta + rows * H + i_h, b_dbeta, mask=m_t)
    if WHOLE_IN:
        if _chunk_whole(b, start, end, i_h, H, K, WHOLE_SPAN):
            tl.debug_barrier()  # dq, dk, dg, dAqk and dL of this chunk are read back by other threads
            b_dbeta_f = b_dbeta  # the intra kernel's dbeta_in, as stored above
            for i_k in range(tl.cdiv(K, BK)):
                o_k = i_k * BK + tl.arange(0, BK)
                m_k = o_k < K
                b_dbeta_f += _whole_chunk_grads(q, k, b, dAqk, dL, dq, dk, dg, dq_f, dk_f, dg_f, b_beta,
                                                load_row(b, start, i_h, o_k, m_k, H, K),
                                                load_row(b, end - 1, i_h, o_k, m_k, H, K), rows, m_t, i_h, o_k,
                                                m_k, scale, H, K, BT, F32_DOT)
            tl.store(dbeta_f + rows * H + i_h, b_dbeta_f, mask=m_t)


@triton.autotune(configs=_block_configs(), key=["H", "K", "V", "BT"],
                 prune_configs_by={"early_config_prune": _prune_blocks})
@triton.jit
def chunk_kda_bwd_inter_kernel(q, k, v, b, delta, ddelta, do, hs, dhs, bounds,  # inputs
                               dq, dk, dg, dw, dAqk,  # outputs [TT, H, K] f32 (state parts; dw); dAqk
                               scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                               BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr):
    """Unfused, first half: the state parts of dq, dk, dg and dAqk; dw = −dδ hᵀ goes to memory."""
    i_s, i_h = tl.program_id(0).to(tl.int64), tl.program_id(1)
    start, end = slot_rows(bounds, i_s)
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
        b_b = load_tile(b, rows, m_t, i_h, o_k, m_k, H, K)
        b_dqbar, b_dkhat, b_dw, b_hdh = _inter_keys(delta, ddelta, do, hs, dhs, i_s, rows, m_t, i_h, o_k, m_k,
                                                    H, K, V, BT, BK, BV, F32_DOT)
        p_k = (rows[:, None] * H + i_h) * K + o_k[None, :]
        m_tk = m_t[:, None] & m_k[None, :]
        b_dq, b_dk, b_dg = _inter_outputs(load_tile(q, rows, m_t, i_h, o_k, m_k, H, K),
                                          load_tile(k, rows, m_t, i_h, o_k, m_k, H, K), b_b,
                                          load_row(b, end - 1, i_h, o_k, m_k, H, K), rows, end, b_dqbar, b_dkhat, b_hdh,
                                          scale, BT)
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
                            BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr, DL_DOT: tl.constexpr):
    """Unfused, second half: the WY backward, dw read back from memory (A read as in the seed)."""
    i_s, i_h = tl.program_id(0).to(tl.int64), tl.program_id(1)
    start, end = slot_rows(bounds, i_s)
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
        b_b = load_tile(b, rows, m_t, i_h, o_k, m_k, H, K)
        b_kg = load_tile(k, rows, m_t, i_h, o_k, m_k, H, K) * exp_e(b_b)
        b_dA_k, b_dkg, b_dbeta_k = _wy_keys(tl.load(dw + p_k, mask=m_tk, other=0.0), b_A, b_kg, b_beta, F32_DOT,
                                            False)
        b_dA += b_dA_k
        b_dbeta += b_dbeta_k
        tl.store(dk + p_k, tl.load(dk_state + p_k, mask=m_tk, other=0.0) + b_dkg * exp_e(b_b), mask=m_tk)
        tl.store(dg + p_k, tl.load(dg_state + p_k, mask=m_tk, other=0.0)
                 + tl.cumsum(b_kg * b_dkg, axis=0, reverse=True), mask=m_tk)
    _store_dL(dL, A, b_dA, start, end, i_h, H, BT, True, False, DL_DOT)
    tl.store(dbeta + rows * H + i_h, b_dbeta, mask=m_t)


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
    b_e = exp_e(tl.where(below[:, None], b_bi - b_bj[None, :], tl.where(above[:, None], b_bj[None, :] - b_bi, 0.0)))
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
    kept = prune_blocks("BK", "q")(configs, named_args)
    if getattr(named_args["q"].dtype, "itemsize", 2) >= 4:
        kept = [c for c in kept if c.kwargs["BK"] <= 32] or [min(kept, key=lambda c: c.kwargs["BK"])]
    return kept


@triton.jit
def _whole_chunk_grads(q, k, b, dAqk, dL, dq_in, dk_in, dg_in, dq, dk, dg, b_beta, b_b0, b_bl, rows, m_t, i_h, o_k,
                       m_k, scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr,
                       F32_DOT: tl.constexpr):
    """(kda.11–kda.13, kda.17) The intra-chunk parts of one key block of a chunk whose columns of b span at most
    WHOLE_SPAN, through b_mid = (b_0 + b_L) / 2 in four whole-chunk products: dq, dk, dg (dq_in, dk_in, dg_in plus
    these parts) stored in the outputs' dtypes; returns the block's part of dβ, Σ_i k ⊙ Y ([BT])."""
    o_t = tl.arange(0, BT)
    b_d = tl.where(m_t[:, None], load_tile(b, rows, m_t, i_h, o_k, m_k, H, K) - 0.5 * (b_b0 + b_bl)[None, :], 0.0)
    b_up = exp_e(b_d)  # exp(b_r − b_mid)
    b_down = exp_e(-b_d)  # exp(b_mid − b_s)
    b_q = load_tile(q, rows, m_t, i_h, o_k, m_k, H, K)
    b_k = load_tile(k, rows, m_t, i_h, o_k, m_k, H, K)
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
    return tl.sum(b_k * b_Y, axis=1)  # (kda.12)


@triton.jit
def _chunk_whole(b, start, end, i_h, H: tl.constexpr, K: tl.constexpr, WHOLE_SPAN: tl.constexpr):
    """Whether every key column of the chunk's b spans at most WHOLE_SPAN (max over K of b_0 − b_L, exact: a
    maximum rounds nothing), so that every key block of any width takes the whole-chunk path."""
    BW: tl.constexpr = 64
    span = tl.full([], float("-inf"), tl.float32)
    for i in range(tl.cdiv(K, BW)):
        o_k = i * BW + tl.arange(0, BW)
        m_k = o_k < K
        b_d = load_row(b, start, i_h, o_k, m_k, H, K) - load_row(b, end - 1, i_h, o_k, m_k, H, K)
        span = tl.maximum(span, tl.max(tl.where(m_k, b_d, float("-inf")), axis=0))
    return span <= WHOLE_SPAN


@triton.autotune(configs=block_configs("BK", (16, 32, 64)), key=["H", "K", "BT"],
                 prune_configs_by={"early_config_prune": _prune_intra})
@triton.jit
def chunk_kda_bwd_intra_kernel(q, k, b, beta, dAqk, dL, dq_in, dk_in, dg_in, dbeta_in, bounds,  # inputs
                               dq_done, dk_done, dg_done, dbeta_done,  # with SKIP_WHOLE: the outputs, aliased
                               dq, dk, dg, dbeta,  # outputs: dq, dk, dg, dβ in their inputs' dtypes
                               scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr,
                               BK: tl.constexpr, F32_DOT: tl.constexpr, WHOLE_SPAN: tl.constexpr,
                               SKIP_WHOLE: tl.constexpr):
    """(kda.11–kda.13) What flows through Aqk and L: with e_rs = exp(b_r − b_s),

        dq°_r = scale Σ_{s<r} dAqk[r, s] k_s e_rs,   dk°_s = scale Σ_{r>s} dAqk[r, s] q_r e_rs,
        Y_r = Σ_{s<r} dL[r, s] k_s e_rs,             Z_s = Σ_{r>s} dL[r, s] β_r k_r e_rs,

    added to the inputs' dq, dk (with the diagonal of Aqk and β_r Y_r), dβ_r += k_r · Y_r, and
    dg += Σ_{r≥t} P_r, P = q ⊙ dq° − k ⊙ dk° + k ⊙ β Y − k ⊙ Z (no diagonal term). Per key block:
    where its columns of b span at most WHOLE_SPAN (kda.17), four whole-chunk products through b_mid;
    otherwise sub-chunks are visited last first, carrying Σ P of the later ones; ratios as in the forward (both factors ≤ 1, or
    within e^±RHO where a sub-chunk's own block joins the products, kda.16). With SKIP_WHOLE a chunk whose every key
    column takes the whole-chunk path is left as it is: the fused kernel formed it (`_chunk_whole`; the outputs are
    the *_done arrays it wrote, aliased)."""
    i_s, i_h = tl.program_id(0).to(tl.int64), tl.program_id(1)
    start, end = slot_rows(bounds, i_s)
    if start >= end:
        return
    if SKIP_WHOLE:
        if _chunk_whole(b, start, end, i_h, H, K, WHOLE_SPAN):
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
        b_b0 = load_row(b, start, i_h, o_k, m_k, H, K)
        b_bl = load_row(b, end - 1, i_h, o_k, m_k, H, K)
        if tl.max(b_b0 - b_bl, axis=0) <= WHOLE_SPAN:
            # (kda.17) the whole chunk at once through b_mid, every factor within e^(WHOLE_SPAN / 2)
            b_dbeta += _whole_chunk_grads(q, k, b, dAqk, dL, dq_in, dk_in, dg_in, dq, dk, dg, b_beta, b_b0, b_bl, rows,
                                          m_t, i_h, o_k, m_k, scale, H, K, BT, F32_DOT)
        else:
            b_tail = tl.zeros([BK], tl.float32)  # Σ P over the later sub-chunks
            for i_rev in range(0, BT // BC):  # a device loop: one sub-chunk's tiles live at a time
                i_sub = BT // BC - 1 - i_rev
                rows_i, m_i, b_qi, b_ki, b_bi, b_k, b_b, b_bn, b_bm = intra_tiles(q, k, b, i_sub, start, end, i_h,
                                                                                   o_k, m_k, H, K, BT)
                b_q = load_tile(q, rows, m_t, i_h, o_k, m_k, H, K)
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
                b_kn = tl.where(keys[:, None], b_k * exp_e(tl.where(keys[:, None], b_bn[None, :] - b_b, 0.0)), 0.0)
                b_en = exp_e(b_bi - b_bn[None, :])
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
                b_xm = tl.where(queries[:, None], exp_e(tl.where(queries[:, None], b_b - b_bm[None, :], 0.0)), 0.0)
                b_em = exp_e(b_bm[None, :] - b_bi)
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

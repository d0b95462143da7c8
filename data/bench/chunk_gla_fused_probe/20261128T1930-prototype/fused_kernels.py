"""Issue 48 prototype (not the op's path): chunk_gla's forward in one kernel after the cumsum. One program per
(value block, sequence·head) sweeps the sequence's chunks with the state h [K, BV] in registers, and per chunk
forms A (gla.5; gla.12's whole-chunk product where the chunk is direct, else sub-chunk by sub-chunk, gla.6 and
gla.11), o = q̄ h + A v, and h ← exp(b_L) ⊙ h + k̂ᵀ v (gla.4): the states and A never reach memory. The
arithmetic is the op's kernels' (chunk_h_kernel, chunk_a_kernel, chunk_o_kernel) in the same order, so o and
the final state should match the op's up to the non-direct chunks' A (formed here in the chunk's frame).
`chunk_fused_fwd_kernel` sweeps each sequence once (B·H·V/BV programs); for few sequences the two-level pass
(gla.13) splits it: `chunk_segment_ends_kernel` (each segment's end state from zero and its decay; no chunk
states), the op's `chunk_state_pass_kernel`, then `chunk_fused_segment_kernel` (every segment from its true
entering state)."""
import triton
import triton.language as tl

from workbench.chunk_gla import kernels as gla
from workbench.tl_chunked import BC, RHO, load_row, load_tile, segment_prologue, sweep_chunk, sweep_prologue
from workbench.tl_helpers import exp_e


@triton.jit
def _a_not_direct(q, k, b, start, end, b_q, b_k, b_b, b_bL, i_h, o_k, m_k, scale, H: tl.constexpr, K: tl.constexpr,
                  BT: tl.constexpr, BK: tl.constexpr, F32_DOT: tl.constexpr):
    """(gla.5, gla.6, gla.11) A [BT, BT] of a chunk whose log-decays span more than RHO, one sub-chunk of rows at
    a time in the chunk's frame (rows of other sub-chunks masked): earlier keys through the sub-chunk's first row
    n, its own keys in the same product where the sub-chunk spans at most RHO, else one key column at a time."""
    o_t = tl.arange(0, BT)
    rows = start + o_t
    m_t = rows < end
    b_A = tl.zeros([BT, BT], dtype=tl.float32)
    for i_c in tl.static_range(BT // BC):
        own0 = i_c * BC
        in_sub = (o_t >= own0) & (o_t < own0 + BC) & m_t
        b_bn = load_row(b, tl.minimum(start + own0, end - 1), i_h, o_k, m_k, H, K)
        b_bm = load_row(b, tl.minimum(start + own0 + BC, end) - 1, i_h, o_k, m_k, H, K)
        direct = tl.max(b_bn - b_bm, axis=0) <= RHO
        keys = o_t < tl.where(direct, own0 + BC, own0)
        b_qn = tl.where(in_sub[:, None], b_q * exp_e(tl.where(in_sub[:, None], b_b - b_bn[None, :], 0.0)), 0.0)
        b_kn = tl.where(keys[:, None], b_k * exp_e(tl.where(keys[:, None], b_bn[None, :] - b_b, 0.0)), 0.0)
        b_Ai = tl.dot(b_qn, tl.trans(b_kn), input_precision=F32_DOT)
        b_A += tl.where(in_sub[:, None] & (o_t[None, :] <= o_t[:, None]), b_Ai, 0.0)
        if not direct:
            for j in range(0, BC):
                b_kj, b_bj = gla._key_row(k, b, start + own0 + j, end, b_bL, i_h, o_k, m_k, H, K)
                keep = in_sub & (o_t >= own0 + j)
                b_e = exp_e(tl.where(keep[:, None], b_b - b_bj[None, :], 0.0))
                b_col = tl.where(keep, tl.sum(b_q * b_kj[None, :] * b_e, axis=1), 0.0)
                b_A += tl.where(o_t[None, :] == own0 + j, b_col[:, None], 0.0)
    return b_A * scale


@triton.jit
def _fused_chunk(q, k, v, b, o, b_h, start, end, i_h, o_k, m_k, o_v, m_v, scale, H: tl.constexpr, K: tl.constexpr,
                 V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, F32_DOT: tl.constexpr):
    """One chunk: o = q̄ h + A v stored (gla.5, as chunk_o_kernel: the state and A rounded to the inputs' dtype),
    and the state after it (gla.4, as chunk_h_kernel: the chunk's two halves, then one addition)."""
    o_t = tl.arange(0, BT)
    rows = start + o_t
    m_t = rows < end
    b_v = tl.load(v + (rows[:, None] * H + i_h) * V + o_v[None, :], mask=m_t[:, None] & m_v[None, :], other=0.0)
    dtype = b_v.dtype
    b_bL = load_row(b, end - 1, i_h, o_k, m_k, H, K)
    b_q = load_tile(q, rows, m_t, i_h, o_k, m_k, H, K)
    b_k = load_tile(k, rows, m_t, i_h, o_k, m_k, H, K)
    b_b = tl.where(m_t[:, None], load_tile(b, rows, m_t, i_h, o_k, m_k, H, K), b_bL[None, :])
    b_qbar = (b_q * exp_e(b_b) * scale).to(dtype)
    if gla._chunk_direct(b, start, end, i_h, H, K, BK):
        b_A = gla._chunk_A(b_q, b_k, b_b, load_row(b, start, i_h, o_k, m_k, H, K), m_t, scale, F32_DOT, BT)
    else:
        b_A = _a_not_direct(q, k, b, start, end, b_q, b_k, b_b, b_bL, i_h, o_k, m_k, scale, H, K, BT, BK, F32_DOT)
    b_o = tl.dot(b_qbar, b_h.to(dtype), input_precision=F32_DOT) + tl.dot(b_A.to(dtype), b_v,
                                                                         input_precision=F32_DOT)
    tl.store(o + (rows[:, None] * H + i_h) * V + o_v[None, :], b_o.to(o.dtype.element_ty),
             mask=m_t[:, None] & m_v[None, :])
    rows0, m_t0 = gla._half_rows(start, end, 0, BT)
    rows1, m_t1 = gla._half_rows(start, end, 1, BT)
    b_khat0, b_v0 = gla._khat_v(k, v, b, b_bL, rows0, m_t0, i_h, o_k, m_k, o_v, m_v, H, K, V)
    b_khat1, b_v1 = gla._khat_v(k, v, b, b_bL, rows1, m_t1, i_h, o_k, m_k, o_v, m_v, H, K, V)
    return b_h * exp_e(b_bL)[:, None] + gla._chunk_product(b_khat0, b_v0, b_khat1, b_v1, F32_DOT)


@triton.jit
def chunk_fused_fwd_kernel(q, k, v, b, h0, cu_seqlens,  # inputs
                           o, ht,  # outputs
                           scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                           BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr):
    """One sweep per (value block, sequence·head): every chunk by `_fused_chunk` from h0; the final state."""
    i_nh, i_h, first_slot, n_chunks, o_k, o_v, m_k, m_v, m_h, p_state = sweep_prologue(cu_seqlens, H, K, V, BT,
                                                                                        BK, BV)
    b_h = tl.load(h0 + i_nh * K * V + p_state, mask=m_h, other=0.0)  # [BK, BV] float32
    for c in range(0, n_chunks):
        start, end = sweep_chunk(cu_seqlens, i_nh // H, c, BT)
        b_h = _fused_chunk(q, k, v, b, o, b_h, start, end, i_h, o_k, m_k, o_v, m_v, scale, H, K, V, BT, BK, F32_DOT)
    tl.store(ht + i_nh * K * V + p_state, b_h, mask=m_h)


@triton.jit
def chunk_segment_ends_kernel(k, v, b, cu_seqlens,  # inputs
                              ends, decay,  # outputs: [N·NSEG, H, K, V], [N·NSEG, H, K]
                              H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                              BK: tl.constexpr, BV: tl.constexpr, NSEG: tl.constexpr, F32_DOT: tl.constexpr):
    """(gla.13) The first pass: each segment's end state from a zero state and its total log-decay Λ = Σ b_L,
    as `chunk_segment_sweep_kernel` makes them, without writing the chunk states."""
    (i_n, i_h, i_row, first_slot, c0, c1, o_k, o_v, m_k, m_v, m_h, p_state) = segment_prologue(
        cu_seqlens, H, K, V, BT, BK, BV, NSEG)
    b_h = tl.zeros([BK, BV], tl.float32)
    b_d = tl.zeros([BK], tl.float32)
    for c in range(c0, c1):
        start, end = sweep_chunk(cu_seqlens, i_n, c, BT)
        b_bL = load_row(b, end - 1, i_h, o_k, m_k, H, K)
        rows0, m_t0 = gla._half_rows(start, end, 0, BT)
        rows1, m_t1 = gla._half_rows(start, end, 1, BT)
        b_x0, b_y0 = gla._khat_v(k, v, b, b_bL, rows0, m_t0, i_h, o_k, m_k, o_v, m_v, H, K, V)
        b_x1, b_y1 = gla._khat_v(k, v, b, b_bL, rows1, m_t1, i_h, o_k, m_k, o_v, m_v, H, K, V)
        b_h = b_h * exp_e(b_bL)[:, None] + gla._chunk_product(b_x0, b_y0, b_x1, b_y1, F32_DOT)
        b_d += b_bL
    tl.store(ends + i_row * K * V + p_state, b_h, mask=m_h)
    if tl.program_id(0) == 0:
        tl.store(decay + i_row * K + o_k, b_d, mask=m_k)


@triton.jit
def chunk_fused_segment_kernel(q, k, v, b, starts, cu_seqlens,  # inputs: starts [N·NSEG, H, K, V] (true)
                               o,  # output
                               scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                               BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, NSEG: tl.constexpr,
                               F32_DOT: tl.constexpr):
    """(gla.13) The second pass: each segment's chunks by `_fused_chunk` from the segment's true entering state
    (`chunk_state_pass_kernel`'s `starts`)."""
    (i_n, i_h, i_row, first_slot, c0, c1, o_k, o_v, m_k, m_v, m_h, p_state) = segment_prologue(
        cu_seqlens, H, K, V, BT, BK, BV, NSEG)
    b_h = tl.load(starts + i_row * K * V + p_state, mask=m_h, other=0.0)
    for c in range(c0, c1):
        start, end = sweep_chunk(cu_seqlens, i_n, c, BT)
        b_h = _fused_chunk(q, k, v, b, o, b_h, start, end, i_h, o_k, m_k, o_v, m_v, scale, H, K, V, BT, BK, F32_DOT)

"""The two-level state pass's fix-up (NOTES.md, gla.13): the segments' local states, from
`kernels.chunk_segment_sweep_kernel`, plus the parts their true entering states contribute, in parallel over each
segment's chunks. Not autotuned (a fixed launch: `workbench.chunk_gla._state_sweep`)."""
import triton
import triton.language as tl

from ..tl_chunked import load_row, segment_chunks, sweep_chunk
from ..tl_helpers import exp_e


@triton.jit
def _chunk_b_L(b, cu_seqlens, i_n, first_slot, c, m_c, i_h, o_k, m_k, H: tl.constexpr, K: tl.constexpr,
               BT: tl.constexpr, B_LOCAL: tl.constexpr):
    """b_L of chunks c (a vector of chunk indices of sequence i_n, those outside m_c read 0): [len(c), BK]. From
    the row of b at each chunk's end, or with B_LOCAL from the sweep's b_L by chunk slot."""
    if B_LOCAL:
        rows = first_slot + c
    else:
        _, end = sweep_chunk(cu_seqlens, i_n, c, BT)
        rows = end - 1
    return tl.load(b + (rows[:, None] * H + i_h) * K + o_k[None, :], mask=m_c[:, None] & m_k[None, :], other=0.0)


@triton.jit
def chunk_state_fixup_kernel(b, cu_seqlens, starts, local,  # inputs: local float32 [NS, H, K, V]
                             states,  # output [NS, H, K, V] (`local` itself where both are float32)
                             H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                             BK: tl.constexpr, BV: tl.constexpr, NSEG: tl.constexpr, REVERSE: tl.constexpr,
                             B_LOCAL: tl.constexpr, CB: tl.constexpr):
    """(gla.13) Every state of a segment: its local state plus the part its entering state S_j contributes, at
    chunk c exp(D_c) ⊙ S_j with D_c = Σ b_L over the segment's chunks before c (after c with REVERSE), stored in
    the states' dtype (`_chunk_b_L`). Program (chunk block · V block, sequence·head·segment, K block): the
    segment's chunks CB·i … CB·i + CB − 1, so that a segment's chunks are fixed in parallel (one program walking
    all of them waited a load and a store per chunk: 0.22 ms at B1 T64k on an H200); D at the block's first chunk
    is summed from the b_L rows of the chunks before it, 64 at a time."""
    NV: tl.constexpr = (V + BV - 1) // BV
    i_cv, i_nhj, i_k = tl.program_id(0), tl.program_id(1).to(tl.int64), tl.program_id(2)
    i_cb, i_v = i_cv // NV, i_cv % NV
    i_nh, i_j = i_nhj // NSEG, i_nhj % NSEG
    i_n, i_h = i_nh // H, i_nh % H
    first_slot, c0, c1 = segment_chunks(cu_seqlens, i_n, i_j, NSEG, BT)
    cs = c0 + i_cb * CB
    if cs >= c1:
        return
    ce = tl.minimum(cs + CB, c1)
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    m_h = m_k[:, None] & m_v[None, :]
    p_state = o_k[:, None] * V + o_v[None, :]
    b_s = tl.load(starts + ((i_n * NSEG + i_j) * H + i_h) * K * V + p_state, mask=m_h, other=0.0)
    # D at the block's first chunk in its order: the chunks [c0, cs), or with REVERSE [ce, c1)
    lo = ce if REVERSE else c0
    hi = c1 if REVERSE else cs
    b_d = tl.zeros([BK], tl.float32)
    for r in range(lo, hi, 64):
        c = r + tl.arange(0, 64)
        b_d += tl.sum(_chunk_b_L(b, cu_seqlens, i_n, first_slot, c, c < hi, i_h, o_k, m_k, H, K, BT, B_LOCAL),
                      axis=0)
    for cc in range(0, ce - cs):
        c = ce - 1 - cc if REVERSE else cs + cc
        p = ((first_slot + c) * H + i_h) * K * V + p_state
        tl.store(states + p, tl.load(local + p, mask=m_h, other=0.0) + exp_e(b_d)[:, None] * b_s, mask=m_h)
        if B_LOCAL:
            b_d += load_row(b, first_slot + c, i_h, o_k, m_k, H, K)
        else:
            _, end = sweep_chunk(cu_seqlens, i_n, c, BT)
            b_d += load_row(b, end - 1, i_h, o_k, m_k, H, K)

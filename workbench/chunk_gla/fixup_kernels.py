"""The two-level state pass's fix-up (NOTES.md, gla.13): the segments' local states, from
`kernels.chunk_segment_sweep_kernel`, plus the parts their true entering states contribute. `fixed_state` is the
one expression of it, used where the states are read — by the o kernel (forward) and the dv kernel (backward),
through `fixed_slot_state` — and by `chunk_state_fixup_kernel` (in parallel over each segment's chunks; not
autotuned, a fixed launch: `workbench.chunk_gla._state_sweep`) for the states that `Tuning(residuals="recompute")`
forms again."""
import triton
import triton.language as tl

from ..tl_chunked import segment_chunks
from ..tl_helpers import exp_e


@triton.jit
def fixed_state(local, b_s, dec, slot, i_h, o_k, m_k, p_state, m_h, H: tl.constexpr, K: tl.constexpr,
                V: tl.constexpr):
    """(gla.13, step 3) The state of the chunk in `slot`, [BK, BV] float32: its segment's local state there plus
    exp(D_c) ⊙ S_j, S_j the segment's entering state (the tile b_s) and D_c the decay the sweep stored by slot in
    `dec` (Σ b_L over the segment's chunks before c, after c backward)."""
    b_d = tl.load(dec + (slot * H + i_h) * K + o_k, mask=m_k, other=0.0)
    return tl.load(local + (slot * H + i_h) * K * V + p_state, mask=m_h, other=0.0) + exp_e(b_d)[:, None] * b_s


@triton.jit
def fixed_slot_state(local, starts, dec, seg, out, slot, i_h, o_k, m_k, o_v, m_v, H: tl.constexpr, K: tl.constexpr,
                     V: tl.constexpr, STORE: tl.constexpr):
    """`fixed_state` of the chunk in `slot` for one reader of it ([BK, BV] of the state, float32): S_j is the row
    `seg[slot]` of `starts`; with STORE also stored into `out` [NS, H, K, V] (rounded to its dtype)."""
    m_h = m_k[:, None] & m_v[None, :]
    p_state = o_k[:, None] * V + o_v[None, :]
    b_s = tl.load(starts + (tl.load(seg + slot).to(tl.int64) * H + i_h) * K * V + p_state, mask=m_h, other=0.0)
    b_h = fixed_state(local, b_s, dec, slot, i_h, o_k, m_k, p_state, m_h, H, K, V)
    if STORE:
        tl.store(out + (slot * H + i_h) * K * V + p_state, b_h, mask=m_h)
    return b_h


@triton.jit
def store_segment_row(seg, first_slot, c0, c1, row):
    """`seg[slot] = row` for the slots of chunks c0 … c1 − 1 (a segment's, from its sequence's first slot): where a
    reader of one chunk finds its segment's row of the [N·NSEG] buffers."""
    for r in range(c0, c1, 64):
        o_c = r + tl.arange(0, 64)
        tl.store(seg + first_slot + o_c, row.to(tl.int32) + tl.zeros([64], tl.int32), mask=o_c < c1)


@triton.jit
def chunk_state_fixup_kernel(dec, cu_seqlens, starts, local,  # inputs: D_c [NS, H, K]; local float32 [NS, H, K, V]
                             states,  # output [NS, H, K, V] (`local` itself where both are float32)
                             H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                             BK: tl.constexpr, BV: tl.constexpr, NSEG: tl.constexpr, CB: tl.constexpr):
    """(gla.13) Every state of a segment (`fixed_state`), stored in the states' dtype. Program (chunk block · V
    block, sequence·head·segment, K block): the segment's chunks CB·i … CB·i + CB − 1, sharing one load of the
    entering state (one program walking all of a segment's chunks waited a load and a store per chunk: 0.22 ms at
    B1 T64k on an H200)."""
    NV: tl.constexpr = (V + BV - 1) // BV
    i_cv, i_nhj, i_k = tl.program_id(0), tl.program_id(1).to(tl.int64), tl.program_id(2)
    i_cb, i_v = i_cv // NV, i_cv % NV
    i_nh, i_j = i_nhj // NSEG, i_nhj % NSEG
    i_n, i_h = i_nh // H, i_nh % H
    first_slot, c0, c1 = segment_chunks(cu_seqlens, i_n, i_j, NSEG, BT)
    cs = c0 + i_cb * CB
    if cs >= c1:
        return
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    m_h = m_k[:, None] & m_v[None, :]
    p_state = o_k[:, None] * V + o_v[None, :]
    b_s = tl.load(starts + ((i_n * NSEG + i_j) * H + i_h) * K * V + p_state, mask=m_h, other=0.0)
    for c in range(cs, tl.minimum(cs + CB, c1)):
        slot = first_slot + c
        tl.store(states + (slot * H + i_h) * K * V + p_state,
                 fixed_state(local, b_s, dec, slot, i_h, o_k, m_k, p_state, m_h, H, K, V), mask=m_h)

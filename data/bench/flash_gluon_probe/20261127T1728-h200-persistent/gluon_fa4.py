"""PROTOTYPE (issue 47, next session): the Hopper forward, persistent. The Hopper forward in Gluon (Triton 3.9 or later, sm_90, compiled only): plain or causal attention with the
same results as `kernels.py`'s forward (NOTES.md fa.2, fa.4), scheduled by hand as FlashAttention-3 does.

One program owns a 128-row block of one (batch, head): q, o `[B, T, H, D]`, k, v `[B, T, HKV, D]` (one T, causal
aligned at the top-left, which for Tq = Tk is the op's bottom-right), lse `[B, H, T]` (natural log). Three
partitions share its shared memory:

  - a loading warp fills a ring of NBUF K and V tiles through tensor descriptors (TMA, made on the device; rows
    past T read as 0);
  - two warp groups of 4 warps each own 64 of the rows (group 0 the first half, group 1 the second) and take
    turns (mbarriers `turn`): one group issues its matrix products while the other runs its softmax, so the
    tensor cores are fed while a group's exponentials run (ping-pong);
  - inside a group the next tile's q kᵀ and this tile's P V are both in flight before the softmax of the tile
    just scored (`warpgroup_mma(..., is_async=True)`, waited on one at a time).

Registers move from the loading warp (24 per thread) to the groups (`REGS`, `setmaxnreg` under the hood), so
that a group's 64×128 float32 accumulator and its 64×BN scores fit without spilling. Masks beyond causal (window,
softcap, sinks, bias, segments, dropout, packed sequences) and Tq ≠ Tk stay on `kernels.py` (the glue chooses).
"""

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

BR = gl.constexpr(64)  # rows of one warp group; a program's block is 2·BR
LN2 = gl.constexpr(0.6931471805599453)
LOG2E = gl.constexpr(1.4426950408889634)


@gluon.jit
def _load_kv(k_desc, v_desc, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, n_tiles,
             BN: gl.constexpr, NBUF: gl.constexpr):
    """The loading warp: tile j goes to slot j % NBUF once both groups released the tile that was there."""
    for j in range(n_tiles):
        i = j % NBUF
        phase = (j // NBUF) & 1
        mbarrier.wait(k_empty.index(i), phase ^ 1)
        mbarrier.expect(k_ready.index(i), k_desc.block_type.nbytes)
        tma.async_load(k_desc, [j * BN, 0], k_ready.index(i), k_bufs.index(i))
        mbarrier.wait(v_empty.index(i), phase ^ 1)
        mbarrier.expect(v_ready.index(i), v_desc.block_type.nbytes)
        tma.async_load(v_desc, [j * BN, 0], v_ready.index(i), v_bufs.index(i))


@gluon.jit
def _online_softmax(s, m_i, l_i, r0, j0, T, qk_scale, layout: gl.constexpr, BN: gl.constexpr, masked,
                    CAUSAL: gl.constexpr):
    """(fa.2) One tile's step of the online softmax in base 2: P = 2^(s·scale·log2 e − m), the rescale α of what
    came before, the new running max and sum. `masked`: the tile holds the causal diagonal or keys past T."""
    s = s * qk_scale
    if masked:
        o_m = r0 + gl.arange(0, BR, layout=gl.SliceLayout(1, layout))
        o_n = j0 + gl.arange(0, BN, layout=gl.SliceLayout(0, layout))
        seen = gl.expand_dims(o_n, 0) < T
        if CAUSAL:
            seen = seen & (gl.expand_dims(o_m, 1) >= gl.expand_dims(o_n, 0))
        s = gl.where(seen, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, axis=1))
    p = gl.exp2(s - gl.expand_dims(m_new, 1))
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha + gl.sum(p, axis=1)
    return p, alpha, m_new, l_i



@gluon.jit
def _tile(t, n_m, BH, CAUSAL: gl.constexpr):
    """(row block, batch·head) of work item t: causal blocks longest first across heads; else a head's blocks
    one after another (its K and V stay in L2)."""
    if CAUSAL:
        i_m = n_m - 1 - t // BH
        i_bh = t % BH
    else:
        i_bh = t // n_m
        i_m = t % n_m
    return i_m, i_bh


@gluon.jit
def _tiles_of(i_m, T, BN: gl.constexpr, CAUSAL: gl.constexpr):
    m0 = i_m * (2 * BR)
    n_tiles = gl.cdiv(T, BN)
    n_full = T // BN
    if CAUSAL:
        n_tiles = gl.cdiv(gl.minimum(m0 + 2 * BR, T), BN)
        n_full = gl.minimum(m0 // BN, n_full)
    return m0, n_tiles, n_full


@gluon.jit
def _load_kv_persistent(k_desc, v_desc, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, T, n_m, n_work,
                        H: gl.constexpr, HKV: gl.constexpr, D: gl.constexpr, BN: gl.constexpr, NBUF: gl.constexpr,
                        CAUSAL: gl.constexpr):
    c = 0
    for t in range(gl.program_id(0), n_work, gl.num_programs(0)):
        i_m, i_bh = _tile(t, n_m, n_work // n_m, CAUSAL)
        i_b = i_bh // H
        i_hk = (i_bh % H) // (H // HKV)
        m0, n_tiles, n_full = _tiles_of(i_m, T, BN, CAUSAL)
        for j in range(n_tiles):
            i = c % NBUF
            phase = (c // NBUF) & 1
            mbarrier.wait(k_empty.index(i), phase ^ 1)
            mbarrier.expect(k_ready.index(i), k_desc.block_type.nbytes)
            tma.async_load(k_desc, [i_b, j * BN, i_hk * D], k_ready.index(i), k_bufs.index(i))
            mbarrier.wait(v_empty.index(i), phase ^ 1)
            mbarrier.expect(v_ready.index(i), v_desc.block_type.nbytes)
            tma.async_load(v_desc, [i_b, j * BN, i_hk * D], v_ready.index(i), v_bufs.index(i))
            c += 1


@gluon.jit
def _step(q_tile, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, mine, other, p, m_i, l_i, acc, s_zero, c, j, u,
          r0, T, qk_scale, layout: gl.constexpr, p_layout: gl.constexpr, row_layout: gl.constexpr, masked,
          WG: gl.constexpr, BN: gl.constexpr, D: gl.constexpr, NBUF: gl.constexpr, CAUSAL: gl.constexpr):
    """Key tile j of the work item: its q kᵀ and the previous tile's P V in flight, then this tile's softmax."""
    dtype: gl.constexpr = q_tile.dtype
    i = (c + j) % NBUF
    i_prev = (c + j - 1) % NBUF
    mbarrier.wait(k_ready.index(i), ((c + j) // NBUF) & 1)
    mbarrier.wait(v_ready.index(i_prev), ((c + j - 1) // NBUF) & 1)
    mbarrier.wait(mine, (u & 1) ^ WG ^ 1)
    s = warpgroup_mma(q_tile, k_bufs.index(i).reshape([BN, D]).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    acc = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), v_bufs.index(i_prev).reshape([BN, D]), acc,
                        is_async=True)
    mbarrier.arrive(other, count=1)
    s = warpgroup_mma_wait(1, deps=(s, ))
    mbarrier.arrive(k_empty.index(i), count=1)
    p, alpha, m_i, l_i = _online_softmax(s, m_i, l_i, r0, j * BN, T, qk_scale, layout, BN, masked, CAUSAL)
    acc = warpgroup_mma_wait(0, deps=(acc, ))
    mbarrier.arrive(v_empty.index(i_prev), count=1)
    acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_layout), 1)
    return p, alpha, m_i, l_i, acc, u + 1


@gluon.jit
def _group_persistent(q_desc, q_smem, q_bar, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, turn, o, o32, lse,
                      T, n_m, n_work, qk_scale, WG: gl.constexpr, H: gl.constexpr, D: gl.constexpr,
                      BN: gl.constexpr, NBUF: gl.constexpr, CAUSAL: gl.constexpr, KEEP_F32: gl.constexpr,
                      SPLIT: gl.constexpr):
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_layout: gl.constexpr = gl.SliceLayout(1, o_layout)
    dtype: gl.constexpr = q_smem.dtype
    q_tile = q_smem.reshape([BR, D])
    mine = turn.index(WG)
    other = turn.index(1 - WG)
    c = 0  # K, V tiles consumed (the ring's counter, as the loader's)
    u = 0  # product issues of this group (the turns' counter)
    n = 0  # work items done
    for t in range(gl.program_id(0), n_work, gl.num_programs(0)):
        i_m, i_bh = _tile(t, n_m, n_work // n_m, CAUSAL)
        i_b = i_bh // H
        i_h = i_bh % H
        m0, n_tiles, n_full = _tiles_of(i_m, T, BN, CAUSAL)
        r0 = m0 + WG * BR
        mbarrier.expect(q_bar, q_desc.block_type.nbytes)
        tma.async_load(q_desc, [i_b, r0, i_h * D], q_bar, q_smem)
        m_i = gl.full([BR], float("-inf"), gl.float32, layout=gl.SliceLayout(1, layout))
        l_i = gl.zeros([BR], gl.float32, layout=gl.SliceLayout(1, layout))
        acc = gl.zeros([BR, D], gl.float32, layout=o_layout)
        s_zero = gl.zeros([BR, BN], gl.float32, layout=layout)
        mbarrier.wait(q_bar, n & 1)

        i = c % NBUF
        mbarrier.wait(k_ready.index(i), (c // NBUF) & 1)
        mbarrier.wait(mine, (u & 1) ^ WG ^ 1)
        s = warpgroup_mma(q_tile, k_bufs.index(i).reshape([BN, D]).permute((1, 0)), s_zero, use_acc=False,
                          is_async=True)
        mbarrier.arrive(other, count=1)
        u += 1
        s = warpgroup_mma_wait(0, deps=(s, ))
        mbarrier.arrive(k_empty.index(i), count=1)
        p, alpha, m_i, l_i = _online_softmax(s, m_i, l_i, r0, 0, T, qk_scale, layout, BN, n_full == 0, CAUSAL)
        if SPLIT:  # the tiles no mask cuts, then those it does, each loop with one softmax
            for j in range(1, gl.maximum(n_full, 1)):
                p, alpha, m_i, l_i, acc, u = _step(q_tile, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, mine,
                                                  other, p, m_i, l_i, acc, s_zero, c, j, u, r0, T, qk_scale, layout,
                                                  p_layout, row_layout, False, WG, BN, D, NBUF, CAUSAL)
            for j in range(gl.maximum(n_full, 1), n_tiles):
                p, alpha, m_i, l_i, acc, u = _step(q_tile, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, mine,
                                                  other, p, m_i, l_i, acc, s_zero, c, j, u, r0, T, qk_scale, layout,
                                                  p_layout, row_layout, True, WG, BN, D, NBUF, CAUSAL)
        else:
            for j in range(1, n_tiles):
                p, alpha, m_i, l_i, acc, u = _step(q_tile, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, mine,
                                                  other, p, m_i, l_i, acc, s_zero, c, j, u, r0, T, qk_scale, layout,
                                                  p_layout, row_layout, j >= n_full, WG, BN, D, NBUF, CAUSAL)
        i_last = (c + n_tiles - 1) % NBUF
        mbarrier.wait(v_ready.index(i_last), ((c + n_tiles - 1) // NBUF) & 1)
        mbarrier.wait(mine, (u & 1) ^ WG ^ 1)
        acc = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), v_bufs.index(i_last).reshape([BN, D]), acc,
                            is_async=True)
        mbarrier.arrive(other, count=1)
        u += 1
        acc = warpgroup_mma_wait(0, deps=(acc, ))
        mbarrier.arrive(v_empty.index(i_last), count=1)
        c += n_tiles
        n += 1

        acc = acc / gl.expand_dims(gl.convert_layout(l_i, row_layout), 1)  # (fa.4)
        o_m = r0 + gl.arange(0, BR, layout=row_layout)
        o_d = gl.arange(0, D, layout=gl.SliceLayout(0, o_layout))
        inside = gl.expand_dims(o_m < T, 1) & gl.expand_dims(o_d < D, 0)
        head = (i_b.to(gl.int64) * T * H + i_h) * D
        offsets = head + gl.expand_dims(o_m.to(gl.int64) * (H * D), 1) + gl.expand_dims(o_d, 0)
        gl.store(o + offsets, acc.to(dtype), mask=inside)
        if KEEP_F32:
            gl.store(o32 + offsets, acc, mask=inside)
        lse_rows = r0 + gl.arange(0, BR, layout=gl.SliceLayout(1, layout))
        gl.store(lse + i_bh.to(gl.int64) * T + lse_rows, (m_i + gl.log2(l_i)) * LN2, mask=lse_rows < T)


@gluon.jit
def _group_persistent_1(q_desc, q_smem, q_bar, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, turn, o, o32,
                        lse, T, n_m, n_work, qk_scale, H: gl.constexpr, D: gl.constexpr, BN: gl.constexpr,
                        NBUF: gl.constexpr, CAUSAL: gl.constexpr, KEEP_F32: gl.constexpr, SPLIT: gl.constexpr):
    _group_persistent(q_desc, q_smem, q_bar, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, turn, o, o32, lse,
                      T, n_m, n_work, qk_scale, 1, H, D, BN, NBUF, CAUSAL, KEEP_F32, SPLIT)


@gluon.jit
def flash_fwd_persistent_kernel(q, k, v, T, scale, n_m, n_work, o, lse, o32, B: gl.constexpr, H: gl.constexpr,
                                HKV: gl.constexpr, D: gl.constexpr, BN: gl.constexpr, NBUF: gl.constexpr,
                                REGS: gl.constexpr, CAUSAL: gl.constexpr, KEEP_F32: gl.constexpr,
                                SPLIT: gl.constexpr = False):
    """grid (number of SMs or fewer,): each program walks work items pid, pid + grid, …; descriptors made once."""
    dtype: gl.constexpr = q.dtype.element_ty
    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([1, BR, D], dtype)
    kv_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([1, BN, D], dtype)
    Tl = T.to(gl.int64)
    q_desc = tma.make_tensor_descriptor(q, [B, T, H * D], [Tl * (H * D), H * D, 1], [1, BR, D], q_layout)
    k_desc = tma.make_tensor_descriptor(k, [B, T, HKV * D], [Tl * (HKV * D), HKV * D, 1], [1, BN, D], kv_layout)
    v_desc = tma.make_tensor_descriptor(v, [B, T, HKV * D], [Tl * (HKV * D), HKV * D, 1], [1, BN, D], kv_layout)
    qk_scale = scale * LOG2E

    q_smem = gl.allocate_shared_memory(dtype, [2, 1, BR, D], q_layout)
    k_bufs = gl.allocate_shared_memory(dtype, [NBUF, 1, BN, D], kv_layout)
    v_bufs = gl.allocate_shared_memory(dtype, [NBUF, 1, BN, D], kv_layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
    for g in gl.static_range(2):
        mbarrier.init(q_bar.index(g), count=1)
        mbarrier.init(turn.index(g), count=1)
    for i in gl.static_range(NBUF):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)
        mbarrier.init(v_empty.index(i), count=2)
    gl.warp_specialize([
        (_group_persistent, (q_desc, q_smem.index(0), q_bar.index(0), k_bufs, v_bufs, k_ready, v_ready, k_empty,
                             v_empty, turn, o, o32, lse, T, n_m, n_work, qk_scale, 0, H, D, BN, NBUF, CAUSAL,
                             KEEP_F32, SPLIT)),
        (_group_persistent_1, (q_desc, q_smem.index(1), q_bar.index(1), k_bufs, v_bufs, k_ready, v_ready, k_empty,
                               v_empty, turn, o, o32, lse, T, n_m, n_work, qk_scale, H, D, BN, NBUF, CAUSAL,
                               KEEP_F32, SPLIT)),
        (_load_kv_persistent, (k_desc, v_desc, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, T, n_m, n_work, H,
                               HKV, D, BN, NBUF, CAUSAL)),
    ], [4, 1], [REGS, 24])

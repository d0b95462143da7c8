"""Issue 47 prototype: a Hopper attention forward in Gluon (explicit warp specialization). q, k, v, o as [B*H*T, D]
rows (head-major), lse [B*H*T] (base-2). A loading warp fills a ring of K and V tiles through TMA; the default
partition (8 warps: two warp groups of 64 rows) issues the next tile's q kᵀ and this tile's p v as asynchronous
warpgroup MMAs and computes the softmax while they run (PIPE), or one step after the other (not PIPE)."""
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)


@gluon.jit
def _loader(k_desc, v_desc, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, row, n_tiles,
            BN: gl.constexpr, NBUF: gl.constexpr):
    for j in range(n_tiles):
        i = j % NBUF
        ph = (j // NBUF) & 1
        mbarrier.wait(k_empty.index(i), ph ^ 1)
        mbarrier.expect(k_ready.index(i), k_desc.block_type.nbytes)
        tma.async_load(k_desc, [row + j * BN, 0], k_ready.index(i), k_bufs.index(i))
        mbarrier.wait(v_empty.index(i), ph ^ 1)
        mbarrier.expect(v_ready.index(i), v_desc.block_type.nbytes)
        tma.async_load(v_desc, [row + j * BN, 0], v_ready.index(i), v_bufs.index(i))


@gluon.jit
def _softmax(s, m_i, l_i, m0, j0, qk_scale, layout: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr,
             MASK: gl.constexpr):
    s = s * qk_scale
    if MASK:
        o_m = m0 + gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
        o_n = j0 + gl.arange(0, BN, layout=gl.SliceLayout(0, layout))
        s = gl.where(gl.expand_dims(o_m, 1) >= gl.expand_dims(o_n, 0), s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, axis=1))
    p = gl.exp2(s - gl.expand_dims(m_new, 1))
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha + gl.sum(p, axis=1)
    return p, alpha, m_new, l_i


@gluon.jit
def _consumer(q_smem, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, q_bar, m0, n_tiles, n_full, qk_scale,
              BM: gl.constexpr, BN: gl.constexpr, D: gl.constexpr, NBUF: gl.constexpr, CAUSAL: gl.constexpr,
              PIPE: gl.constexpr, NW: gl.constexpr):
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                     instr_shape=[16, BN, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=layout, k_width=2)
    m_i = gl.full([BM], float("-inf"), gl.float32, layout=gl.SliceLayout(1, layout))
    l_i = gl.zeros([BM], gl.float32, layout=gl.SliceLayout(1, layout))
    acc = gl.zeros([BM, D], gl.float32, layout=layout)
    s_zero = gl.zeros([BM, BN], gl.float32, layout=layout)
    mbarrier.wait(q_bar, 0)
    if PIPE:
        mbarrier.wait(k_ready.index(0), 0)
        s = warpgroup_mma(q_smem, k_bufs.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        s = warpgroup_mma_wait(0, deps=(s, ))
        mbarrier.arrive(k_empty.index(0), count=1)
        p, alpha, m_i, l_i = _softmax(s, m_i, l_i, m0, 0, qk_scale, layout, BM, BN, CAUSAL and n_full == 0)
        for j in range(1, n_tiles):
            i = j % NBUF
            ph = (j // NBUF) & 1
            ip = (j - 1) % NBUF
            php = ((j - 1) // NBUF) & 1
            mbarrier.wait(k_ready.index(i), ph)
            s = warpgroup_mma(q_smem, k_bufs.index(i).permute((1, 0)), s_zero, use_acc=False, is_async=True)
            mbarrier.wait(v_ready.index(ip), php)
            acc = warpgroup_mma(gl.convert_layout(p.to(gl.bfloat16), p_layout), v_bufs.index(ip), acc, is_async=True)
            s = warpgroup_mma_wait(1, deps=(s, ))
            mbarrier.arrive(k_empty.index(i), count=1)
            p, alpha, m_i, l_i = _softmax(s, m_i, l_i, m0, j * BN, qk_scale, layout, BM, BN, CAUSAL and j >= n_full)
            acc = warpgroup_mma_wait(0, deps=(acc, ))
            mbarrier.arrive(v_empty.index(ip), count=1)
            acc = acc * gl.expand_dims(alpha, 1)
        il = (n_tiles - 1) % NBUF
        mbarrier.wait(v_ready.index(il), ((n_tiles - 1) // NBUF) & 1)
        acc = warpgroup_mma(gl.convert_layout(p.to(gl.bfloat16), p_layout), v_bufs.index(il), acc, is_async=True)
        acc = warpgroup_mma_wait(0, deps=(acc, ))
        mbarrier.arrive(v_empty.index(il), count=1)
    else:
        for j in range(n_tiles):
            i = j % NBUF
            ph = (j // NBUF) & 1
            mbarrier.wait(k_ready.index(i), ph)
            s = warpgroup_mma(q_smem, k_bufs.index(i).permute((1, 0)), s_zero, use_acc=False, is_async=True)
            s = warpgroup_mma_wait(0, deps=(s, ))
            mbarrier.arrive(k_empty.index(i), count=1)
            p, alpha, m_i, l_i = _softmax(s, m_i, l_i, m0, j * BN, qk_scale, layout, BM, BN, CAUSAL and j >= n_full)
            acc = acc * gl.expand_dims(alpha, 1)
            mbarrier.wait(v_ready.index(i), ph)
            acc = warpgroup_mma(gl.convert_layout(p.to(gl.bfloat16), p_layout), v_bufs.index(i), acc, is_async=True)
            acc = warpgroup_mma_wait(0, deps=(acc, ))
            mbarrier.arrive(v_empty.index(i), count=1)
    return acc, m_i, l_i


@gluon.jit
def gluon_attn_fwd(q, k, v, T, NROWS, qk_scale, o, lse, D: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr,
                   NBUF: gl.constexpr, CAUSAL: gl.constexpr, PIPE: gl.constexpr, NW: gl.constexpr):
    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BM, D], gl.bfloat16)
    kv_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BN, D], gl.bfloat16)
    q_desc = tma.make_tensor_descriptor(q, [NROWS, D], [D, 1], [BM, D], q_layout)
    k_desc = tma.make_tensor_descriptor(k, [NROWS, D], [D, 1], [BN, D], kv_layout)
    v_desc = tma.make_tensor_descriptor(v, [NROWS, D], [D, 1], [BN, D], kv_layout)
    o_desc = tma.make_tensor_descriptor(o, [NROWS, D], [D, 1], [BM, D], q_layout)
    i_m = gl.num_programs(0) - 1 - gl.program_id(0)
    row = gl.program_id(1) * T
    m0 = i_m * BM
    n_tiles = gl.cdiv(T, BN)
    n_full = n_tiles
    if CAUSAL:
        n_tiles = gl.cdiv(m0 + BM, BN)
        n_full = m0 // BN

    q_smem = gl.allocate_shared_memory(gl.bfloat16, [BM, D], q_layout)
    k_bufs = gl.allocate_shared_memory(gl.bfloat16, [NBUF, BN, D], kv_layout)
    v_bufs = gl.allocate_shared_memory(gl.bfloat16, [NBUF, BN, D], kv_layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(NBUF):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=1)
        mbarrier.init(v_empty.index(i), count=1)
    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_load(q_desc, [row + m0, 0], q_bar, q_smem)

    acc, m_i, l_i = gl.warp_specialize([
        (_consumer, (q_smem, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, q_bar, m0, n_tiles, n_full, qk_scale,
                     BM, BN, D, NBUF, CAUSAL, PIPE, NW)),
        (_loader, (k_desc, v_desc, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, row, n_tiles, BN, NBUF)),
    ], [1], [24])

    acc = acc / gl.expand_dims(l_i, 1)
    q_smem.store(acc.to(gl.bfloat16))
    fence_async_shared()
    tma.async_store(o_desc, [row + m0, 0], q_smem)
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                     instr_shape=[16, BN, 16])
    o_m = m0 + gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
    gl.store(lse + row + o_m, m_i + gl.log2(l_i))
    tma.store_wait(0)

"""Issue 47 prototype: a Hopper attention backward (dK, dV, and dQ by atomics) in Gluon. q, k, v, do as
[B*H*T, D] rows (head-major), lse2 = lse·log2(e) and delta = rowsum(dO·O) as [B*H*T] float32, dq [B*H*T, D]
float32 zeroed (unscaled: the caller multiplies by scale). One program per block of BN keys of one (batch,
head): a loading warp fills a ring of q and dO tiles by TMA; 8 computing warps (two warp groups of 64 keys) form
Sᵀ = K Qᵀ, Pᵀ, dV += Pᵀ dO, dPᵀ = V dOᵀ, dSᵀ, dK += dSᵀ Q with asynchronous warp-group MMAs, and dQ = dS K through
shared memory, added into dq with atomics."""
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)


@gluon.jit
def _bwd_loader(q_desc, do_desc, q_bufs, do_bufs, q_ready, do_ready, q_empty, do_empty, row, lo, n_tiles,
                BM: gl.constexpr, NBUF: gl.constexpr):
    for j in range(n_tiles):
        i = j % NBUF
        ph = (j // NBUF) & 1
        m0 = lo + j * BM
        mbarrier.wait(q_empty.index(i), ph ^ 1)
        mbarrier.expect(q_ready.index(i), q_desc.block_type.nbytes)
        tma.async_load(q_desc, [row + m0, 0], q_ready.index(i), q_bufs.index(i))
        mbarrier.wait(do_empty.index(i), ph ^ 1)
        mbarrier.expect(do_ready.index(i), do_desc.block_type.nbytes)
        tma.async_load(do_desc, [row + m0, 0], do_ready.index(i), do_bufs.index(i))


@gluon.jit
def _bwd_compute(k_smem, v_smem, kv_bar, q_bufs, do_bufs, ds_smem, q_ready, do_ready, q_empty, do_empty, lse2, delta,
                 dq, row, n0, lo, n_tiles, T, qk_scale, BM: gl.constexpr, BN: gl.constexpr, D: gl.constexpr,
                 NBUF: gl.constexpr, CAUSAL: gl.constexpr, NW: gl.constexpr):
    st_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, BM, 16])
    kv_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, D, 16])
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, NW // 4],
                                                        instr_shape=[16, D // (NW // 4), 16])
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=kv_layout, k_width=2)
    dk = gl.zeros([BN, D], gl.float32, layout=kv_layout)
    dv = gl.zeros([BN, D], gl.float32, layout=kv_layout)
    st_zero = gl.zeros([BN, BM], gl.float32, layout=st_layout)
    dq_zero = gl.zeros([BM, D], gl.float32, layout=dq_layout)
    o_n = n0 + gl.arange(0, BN, layout=gl.SliceLayout(1, st_layout))
    mbarrier.wait(kv_bar, 0)
    for j in range(n_tiles):
        i = j % NBUF
        ph = (j // NBUF) & 1
        m0 = lo + j * BM
        o_m = m0 + gl.arange(0, BM, layout=gl.SliceLayout(0, st_layout))
        mbarrier.wait(q_ready.index(i), ph)
        st = warpgroup_mma(k_smem, q_bufs.index(i).permute((1, 0)), st_zero, use_acc=False, is_async=True)
        b_lse2 = gl.load(lse2 + row + o_m, mask=o_m < T, other=float("inf"))
        b_delta = gl.load(delta + row + o_m, mask=o_m < T, other=0.0)
        st = warpgroup_mma_wait(0, deps=(st, ))
        pt = gl.exp2(st * qk_scale - gl.expand_dims(b_lse2, 0))
        if CAUSAL:
            pt = gl.where(gl.expand_dims(o_m, 0) >= gl.expand_dims(o_n, 1), pt, 0.0)
        mbarrier.wait(do_ready.index(i), ph)
        dpt = warpgroup_mma(v_smem, do_bufs.index(i).permute((1, 0)), st_zero, use_acc=False, is_async=True)
        dv = warpgroup_mma(gl.convert_layout(pt.to(gl.bfloat16), op_layout), do_bufs.index(i), dv, is_async=True)
        dpt, dv = warpgroup_mma_wait(0, deps=(dpt, dv))
        mbarrier.arrive(do_empty.index(i), count=1)
        dst = pt * (dpt - gl.expand_dims(b_delta, 0))
        dst16 = dst.to(gl.bfloat16)
        dk = warpgroup_mma(gl.convert_layout(dst16, op_layout), q_bufs.index(i), dk, is_async=True)
        ds_smem.store(dst16)
        fence_async_shared()
        b_dq = warpgroup_mma(ds_smem.permute((1, 0)), k_smem, dq_zero, use_acc=False, is_async=True)
        dk, b_dq = warpgroup_mma_wait(0, deps=(dk, b_dq))
        mbarrier.arrive(q_empty.index(i), count=1)
        o_qm = m0 + gl.arange(0, BM, layout=gl.SliceLayout(1, dq_layout))
        o_d = gl.arange(0, D, layout=gl.SliceLayout(0, dq_layout))
        ptrs = dq + gl.expand_dims((row + o_qm).to(gl.int64) * D, 1) + gl.expand_dims(o_d, 0)
        gl.atomic_add(ptrs, b_dq, mask=gl.expand_dims(o_qm < T, 1) & gl.expand_dims(o_d < D, 0), sem="relaxed")
    return dk, dv


@gluon.jit
def gluon_attn_bwd(q, k, v, do, lse2, delta, T, NROWS, qk_scale, scale, dk, dv, dq, D: gl.constexpr,
                   BM: gl.constexpr, BN: gl.constexpr, NBUF: gl.constexpr, CAUSAL: gl.constexpr, NW: gl.constexpr):
    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BM, D], gl.bfloat16)
    kv_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BN, D], gl.bfloat16)
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BN, BM], gl.bfloat16)
    q_desc = tma.make_tensor_descriptor(q, [NROWS, D], [D, 1], [BM, D], q_layout)
    do_desc = tma.make_tensor_descriptor(do, [NROWS, D], [D, 1], [BM, D], q_layout)
    k_desc = tma.make_tensor_descriptor(k, [NROWS, D], [D, 1], [BN, D], kv_layout)
    v_desc = tma.make_tensor_descriptor(v, [NROWS, D], [D, 1], [BN, D], kv_layout)
    n0 = gl.program_id(0) * BN
    row = gl.program_id(1) * T
    lo = 0
    if CAUSAL:
        lo = (n0 // BM) * BM
    n_tiles = gl.cdiv(T - lo, BM)

    k_smem = gl.allocate_shared_memory(gl.bfloat16, [BN, D], kv_layout)
    v_smem = gl.allocate_shared_memory(gl.bfloat16, [BN, D], kv_layout)
    q_bufs = gl.allocate_shared_memory(gl.bfloat16, [NBUF, BM, D], q_layout)
    do_bufs = gl.allocate_shared_memory(gl.bfloat16, [NBUF, BM, D], q_layout)
    ds_smem = gl.allocate_shared_memory(gl.bfloat16, [BN, BM], ds_layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_ready = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
    do_ready = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
    do_empty = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    for i in gl.static_range(NBUF):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(do_ready.index(i), count=1)
        mbarrier.init(q_empty.index(i), count=1)
        mbarrier.init(do_empty.index(i), count=1)
    mbarrier.expect(kv_bar, 2 * k_desc.block_type.nbytes)
    tma.async_load(k_desc, [row + n0, 0], kv_bar, k_smem)
    tma.async_load(v_desc, [row + n0, 0], kv_bar, v_smem)

    b_dk, b_dv = gl.warp_specialize([
        (_bwd_compute, (k_smem, v_smem, kv_bar, q_bufs, do_bufs, ds_smem, q_ready, do_ready, q_empty, do_empty, lse2,
                        delta, dq, row, n0, lo, n_tiles, T, qk_scale, BM, BN, D, NBUF, CAUSAL, NW)),
        (_bwd_loader, (q_desc, do_desc, q_bufs, do_bufs, q_ready, do_ready, q_empty, do_empty, row, lo, n_tiles, BM,
                       NBUF)),
    ], [1], [24])

    out_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                         instr_shape=[16, D, 16])
    o_n = n0 + gl.arange(0, BN, layout=gl.SliceLayout(1, out_layout))
    o_d = gl.arange(0, D, layout=gl.SliceLayout(0, out_layout))
    offs = gl.expand_dims((row + o_n).to(gl.int64) * D, 1) + gl.expand_dims(o_d, 0)
    keep = gl.expand_dims(o_n < T, 1) & gl.expand_dims(o_d < D, 0)
    gl.store(dk + offs, (b_dk * scale).to(gl.bfloat16), mask=keep)
    gl.store(dv + offs, b_dv.to(gl.bfloat16), mask=keep)

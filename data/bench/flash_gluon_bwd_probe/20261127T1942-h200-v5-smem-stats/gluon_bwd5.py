"""Issue 47 probe (fifteenth session), v5: v4 with lse and δ brought to shared memory by the loading warp
(1-D TMA, on the q and dO barriers) and read by the groups just before use, not held in registers across
the products.

v4: v3 (below) with dQ split between the groups by columns of D, as
FlashAttention-3 does: both groups' dS go to shared memory, a named barrier (13) lets each group read the
other's, and each group forms dQ[:, its 64 columns] = dS (64 q rows × 128 keys) K[:, its columns] and adds it
with one TMA reduction. Against v3: half the dQ reduction bytes (v3 added each group's 64-key share of all of
dQ) and a 64×64 float32 dQ tile in registers, not 64×128. dS is double-buffered, so one barrier a tile suffices.

v3: the second Gluon backward with the forward's signals (turns on named
barriers 14/15, q/dO slots released by one elected lane per warp: no partition barrier before each arrive).

A Hopper attention backward in Gluon, second version. q, k, v, do as
[B*H*T, D] rows (head-major), lse2 = lse·log2(e) and delta = rowsum(dO·O) as [B*H*T] float32, dq [B*H*T, D]
float32 zeroed (unscaled: the caller multiplies by scale).

One program per 128-key block of one (batch, head), three partitions: a loading warp fills a ring of q and dO
tiles (64 rows) through TMA; two warp groups each own 64 of the keys (their K, V rows resident in shared memory,
their dK, dV accumulators in registers) and take turns issuing Sᵀ = K qᵀ and dPᵀ = V dOᵀ, so that one group's
exponentials run while the other's products do. Each group then forms dV += Pᵀ dO, dK += dSᵀ q and its share of
dQ = dS K, which it stages in shared memory and adds into dq with one TMA reduction (cp.reduce.async.bulk), not
per-thread atomics. Against the first version (one partition of 8 warps waiting on every product, per-thread dQ
atomics): the two groups' turns, and the bulk reduction."""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

BK = gl.constexpr(64)  # keys of one warp group; a program's block is 2·BK
TURN0 = gl.constexpr(14)


@gluon.constexpr_function
def _named_barrier(op, barrier):
    return f"bar.{op} {barrier}, 256;"


@gluon.jit
def _turn_wait(WG: gl.constexpr):
    gl.inline_asm(_named_barrier("sync", TURN0 + WG))


@gluon.jit
def _turn_pass(WG: gl.constexpr):
    gl.inline_asm(_named_barrier("arrive", TURN0 + 1 - WG))


@gluon.jit
def _ds_ready():
    """Both groups' dS of this tile are in shared memory (named barrier 13, both groups' 256 threads)."""
    gl.inline_asm("bar.sync 13, 256;")


@gluon.jit
def _release(bar):
    gl.inline_asm("{\n.reg .pred p;\nelect.sync _|p, 0xffffffff;\n@p mbarrier.arrive.shared::cta.b64 _, [$0];\n}",
                  "r", [bar])


@gluon.jit
def _bwd_loader(q_desc, do_desc, lse_desc, delta_desc, q_bufs, do_bufs, lse_bufs, delta_bufs, q_ready, do_ready,
                q_empty, do_empty, row, lo, n_tiles, BM: gl.constexpr, NBUF: gl.constexpr):
    for j in range(n_tiles):
        i = j % NBUF
        ph = (j // NBUF) & 1
        m0 = lo + j * BM
        mbarrier.wait(q_empty.index(i), ph ^ 1)
        mbarrier.expect(q_ready.index(i), q_desc.block_type.nbytes + lse_desc.block_type.nbytes)
        tma.async_load(q_desc, [row + m0, 0], q_ready.index(i), q_bufs.index(i))
        tma.async_load(lse_desc, [row + m0], q_ready.index(i), lse_bufs.index(i))
        mbarrier.wait(do_empty.index(i), ph ^ 1)
        mbarrier.expect(do_ready.index(i), do_desc.block_type.nbytes + delta_desc.block_type.nbytes)
        tma.async_load(do_desc, [row + m0, 0], do_ready.index(i), do_bufs.index(i))
        tma.async_load(delta_desc, [row + m0], do_ready.index(i), delta_bufs.index(i))


@gluon.jit
def _bwd_group(k_smem, v_smem, kv_bar, q_bufs, do_bufs, ds_smem, dq_smem, q_ready, do_ready, q_empty, do_empty,
               turn, lse2, delta, dq_desc, dk, dv, row, n0, lo, n_tiles, T, qk_scale, scale, WG: gl.constexpr,
               BM: gl.constexpr, D: gl.constexpr, NBUF: gl.constexpr, CAUSAL: gl.constexpr):
    st_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BM, 16])
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    dtype: gl.constexpr = k_smem.dtype
    k_g = k_smem.slice(WG * BK, BK)
    v_g = v_smem.slice(WG * BK, BK)
    dk_acc = gl.zeros([BK, D], gl.float32, layout=acc_layout)
    dv_acc = gl.zeros([BK, D], gl.float32, layout=acc_layout)
    st_zero = gl.zeros([BK, BM], gl.float32, layout=st_layout)
    dq_layout_r: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D // 2, 16])
    dq_zero = gl.zeros([BM, D // 2], gl.float32, layout=dq_layout_r)
    k_cols = k_smem.slice(WG * (D // 2), D // 2, dim=1)  # [2·BK keys, D/2]: this group's columns of dQ
    o_n = n0 + WG * BK + gl.arange(0, BK, layout=gl.SliceLayout(1, st_layout))
    if WG == 1:
        _turn_pass(1)  # group 0 goes first
    mbarrier.wait(kv_bar, 0)
    for j in range(n_tiles):
        i = j % NBUF
        ph = (j // NBUF) & 1
        m0 = lo + j * BM
        o_m = m0 + gl.arange(0, BM, layout=gl.SliceLayout(0, st_layout))
        mbarrier.wait(q_ready.index(i), ph)
        mbarrier.wait(do_ready.index(i), ph)
        _turn_wait(WG)
        st = warpgroup_mma(k_g, q_bufs.index(i).permute((1, 0)), st_zero, use_acc=False, is_async=True)
        dpt = warpgroup_mma(v_g, do_bufs.index(i).permute((1, 0)), st_zero, use_acc=False, is_async=True)
        if (WG == 0) | (j < n_tiles - 1):  # group 1's last pass would meet no wait
            _turn_pass(WG)
        st = warpgroup_mma_wait(1, deps=(st, ))
        b_lse2 = lse2.index(i).load(gl.SliceLayout(0, st_layout))  # lse2, delta: this slot's rows in shared memory
        b_lse2 = gl.where(o_m < T, b_lse2, float("inf"))  # rows past T (another head's): P = 0
        pt = gl.exp2(st * qk_scale - gl.expand_dims(b_lse2, 0))
        seen = gl.expand_dims(o_n < T, 1)
        if CAUSAL:
            seen = seen & (gl.expand_dims(o_m, 0) >= gl.expand_dims(o_n, 1))
        pt = gl.where(seen, pt, 0.0)
        dpt = warpgroup_mma_wait(0, deps=(dpt, ))
        b_delta = delta.index(i).load(gl.SliceLayout(0, st_layout))
        dst = (pt * (dpt - gl.expand_dims(b_delta, 0))).to(dtype)
        dv_acc = warpgroup_mma(gl.convert_layout(pt.to(dtype), op_layout), do_bufs.index(i), dv_acc, is_async=True)
        dk_acc = warpgroup_mma(gl.convert_layout(dst, op_layout), q_bufs.index(i), dk_acc, is_async=True)
        ds_both = ds_smem.index(j % 2)  # [2·BK keys of both groups, BM]
        ds_both.slice(WG * BK, BK).store(dst)
        fence_async_shared()
        _ds_ready()
        dq_part = warpgroup_mma(ds_both.permute((1, 0)), k_cols, dq_zero, use_acc=False,
                                is_async=True)
        dv_acc, dk_acc, dq_part = warpgroup_mma_wait(0, deps=(dv_acc, dk_acc, dq_part))
        _release(q_empty.index(i))
        _release(do_empty.index(i))
        tma.store_wait(0)  # the last reduction has read dq_smem
        dq_smem.store(dq_part)
        fence_async_shared()
        tma.async_atomic_add(dq_desc, [row + m0, WG * (D // 2)], dq_smem)
    tma.store_wait(0)
    o_k = n0 + WG * BK + gl.arange(0, BK, layout=gl.SliceLayout(1, acc_layout))
    o_d = gl.arange(0, D, layout=gl.SliceLayout(0, acc_layout))
    offs = gl.expand_dims((row + o_k).to(gl.int64) * D, 1) + gl.expand_dims(o_d, 0)
    keep = gl.expand_dims(o_k < T, 1) & gl.expand_dims(o_d < D, 0)
    gl.store(dk + offs, (dk_acc * scale).to(dtype), mask=keep)
    gl.store(dv + offs, dv_acc.to(dtype), mask=keep)


@gluon.jit
def _bwd_group_1(k_smem, v_smem, kv_bar, q_bufs, do_bufs, ds_smem, dq_smem, q_ready, do_ready, q_empty, do_empty,
                 turn, lse2, delta, dq_desc, dk, dv, row, n0, lo, n_tiles, T, qk_scale, scale, BM: gl.constexpr,
                 D: gl.constexpr, NBUF: gl.constexpr, CAUSAL: gl.constexpr):
    _bwd_group(k_smem, v_smem, kv_bar, q_bufs, do_bufs, ds_smem, dq_smem, q_ready, do_ready, q_empty, do_empty,
               turn, lse2, delta, dq_desc, dk, dv, row, n0, lo, n_tiles, T, qk_scale, scale, 1, BM, D, NBUF, CAUSAL)


@gluon.jit
def gluon_attn_bwd2(q, k, v, do, lse2, delta, T, NROWS, qk_scale, scale, dk, dv, dq, D: gl.constexpr,
                    BM: gl.constexpr, NBUF: gl.constexpr, CAUSAL: gl.constexpr, REGS: gl.constexpr):
    """grid (cdiv(T, 128), B·H), num_warps 4 (group 0; group 1 and the loading warp are workers)."""
    dtype: gl.constexpr = q.dtype.element_ty
    BN: gl.constexpr = 2 * BK
    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BM, D], dtype)
    kv_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BN, D], dtype)
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([2 * BK, BM], dtype)
    dq_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)
    q_desc = tma.make_tensor_descriptor(q, [NROWS, D], [D, 1], [BM, D], q_layout)
    do_desc = tma.make_tensor_descriptor(do, [NROWS, D], [D, 1], [BM, D], q_layout)
    k_desc = tma.make_tensor_descriptor(k, [NROWS, D], [D, 1], [BN, D], kv_layout)
    v_desc = tma.make_tensor_descriptor(v, [NROWS, D], [D, 1], [BN, D], kv_layout)
    dq_desc = tma.make_tensor_descriptor(dq, [NROWS, D], [D, 1], [BM, D // 2], dq_layout)
    vec_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=1)
    lse_desc = tma.make_tensor_descriptor(lse2, [NROWS], [1], [BM], vec_layout)
    delta_desc = tma.make_tensor_descriptor(delta, [NROWS], [1], [BM], vec_layout)
    n0 = gl.program_id(0) * BN
    row = gl.program_id(1) * T
    lo = 0
    if CAUSAL:
        lo = (n0 // BM) * BM
    n_tiles = gl.cdiv(T - lo, BM)

    k_smem = gl.allocate_shared_memory(dtype, [BN, D], kv_layout)
    v_smem = gl.allocate_shared_memory(dtype, [BN, D], kv_layout)
    q_bufs = gl.allocate_shared_memory(dtype, [NBUF, BM, D], q_layout)
    do_bufs = gl.allocate_shared_memory(dtype, [NBUF, BM, D], q_layout)
    ds_smem = gl.allocate_shared_memory(dtype, [2, 2 * BK, BM], ds_layout)  # [stage, both groups' keys, q rows]
    dq_smem = gl.allocate_shared_memory(gl.float32, [2, BM, D // 2], dq_layout)
    lse_bufs = gl.allocate_shared_memory(gl.float32, [NBUF, BM], vec_layout)
    delta_bufs = gl.allocate_shared_memory(gl.float32, [NBUF, BM], vec_layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    q_ready = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
    do_ready = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
    do_empty = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    for g in gl.static_range(2):
        mbarrier.init(turn.index(g), count=1)
    for i in gl.static_range(NBUF):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(do_ready.index(i), count=1)
        mbarrier.init(q_empty.index(i), count=8)  # every warp of both groups reads every tile
        mbarrier.init(do_empty.index(i), count=8)
    mbarrier.expect(kv_bar, 2 * k_desc.block_type.nbytes)
    tma.async_load(k_desc, [row + n0, 0], kv_bar, k_smem)
    tma.async_load(v_desc, [row + n0, 0], kv_bar, v_smem)

    gl.warp_specialize([
        (_bwd_group, (k_smem, v_smem, kv_bar, q_bufs, do_bufs, ds_smem, dq_smem.index(0), q_ready, do_ready,
                      q_empty, do_empty, turn, lse_bufs, delta_bufs, dq_desc, dk, dv, row, n0, lo, n_tiles, T, qk_scale,
                      scale, 0, BM, D, NBUF, CAUSAL)),
        (_bwd_group_1, (k_smem, v_smem, kv_bar, q_bufs, do_bufs, ds_smem, dq_smem.index(1), q_ready,
                        do_ready, q_empty, do_empty, turn, lse_bufs, delta_bufs, dq_desc, dk, dv, row, n0, lo, n_tiles, T,
                        qk_scale, scale, BM, D, NBUF, CAUSAL)),
        (_bwd_loader, (q_desc, do_desc, lse_desc, delta_desc, q_bufs, do_bufs, lse_bufs, delta_bufs, q_ready, do_ready,
                       q_empty, do_empty, row, lo, n_tiles, BM, NBUF)),
    ], [4, 1], [REGS, 24])

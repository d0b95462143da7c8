"""The Hopper backward in Gluon (Triton 3.9 or later, sm_90, compiled only): dQ, dK, dV of plain or causal
attention with Tq = Tk (fa.5, fa.9; the same quantities as `kernels.py`'s backward), scheduled as
FlashAttention-3's backward is.

One program owns 128 keys of one (batch, kv head): q, do, dq `[B, T, H, D]`, k, v, dk, dv `[B, T, HKV, D]`, lse2
(lse·log2 e, +∞ where a row saw no key) and δ (rowsum(dO·O) − dlse) `[B, H, TP]`, each row padded to TP, a
multiple of BM (`padded_stats`: a TMA box must start 16 bytes aligned, which (b·H + h)·T floats need not be). It
walks the query tiles of every head of its group. Three partitions share its shared memory:

  - a loading warp brings q and dO tiles (64 rows) with their rows' lse2 and δ through TMA into a ring of NBUF
    slots (`q_ready` / `do_ready`);
  - two warp groups each own 64 of the keys (their K, V rows stay in shared memory, their dK, dV accumulate in
    registers) and take turns issuing Sᵀ = K qᵀ and dPᵀ = V dOᵀ (named barriers 14 and 15, as in the forward:
    `gluon_kernels.py`), so that one group's exponentials run while the other's products do;
  - each group forms dV += Pᵀ dO and dK += dSᵀ q from registers and stores its dSᵀ into a shared [128 keys, 64
    rows] tile (three buffers); once the other group's half of that tile is there too (named barriers 10-13, one
    per group and parity, arrived at by the storing group, waited at by the other), it forms dQ for half of D's
    columns, dS (64 rows × 128 keys) · K[:, its columns], which one TMA reduction adds into float32 dq
    (unscaled, zeroed by the launch). Causal launches form it one step later (DEFER, `DEFER_DQ`): issued in the
    step it was stored, that product makes each group wait for the other every step, which kept them in lock
    step; non-causal ones measured faster in the same step.

lse2 and δ come to shared memory with their tiles and are read just before use; held in registers across the
products they made the groups spill. Rows past T (the next batch's, read by the tiles' TMA) get P = 0 from the
padding's lse2 of +∞, keys past T a mask; neither writes anything but zeros. The mask (keys past T, causal) is
formed only in tiles that need it.
"""

import jax.numpy as jnp
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from workbench.flash_attention.gluon_kernels import named_barrier, release_slot, turn_pass, turn_wait

BK = gl.constexpr(64)  # keys of one warp group; a program's block is 2·BK
BLOCK_N = 2 * BK.value
DS_BARRIER0 = gl.constexpr(10)  # named barriers 10-13: group g's dSᵀ of a tile of parity p is in shared memory
DS_BARRIERS = tuple(range(DS_BARRIER0.value, DS_BARRIER0.value + 4))
NDS = gl.constexpr(3)  # dSᵀ buffers: a tile's dQ reads them one tile later (the module's note)


@gluon.jit
def _ds_signal(op: gl.constexpr, WG: gl.constexpr, t):
    """`bar.<op>` on the named barrier that says group WG's dSᵀ of tile t is in shared memory: one per group
    and parity of t, so that a group cannot arrive twice on one before the other group's wait (it arrives for
    t + 2 only after waiting for the other's dSᵀ of t + 1, which the other stores after its wait for t, with
    DEFER or without). The id is an immediate (the compile test reads it from the SASS): one branch per parity.
    One group's code arrives and the other's waits, as at the turns: PTX's aligned form."""
    if (t & 1) == 0:
        gl.inline_asm(named_barrier(op, DS_BARRIER0 + 2 * WG))
    else:
        gl.inline_asm(named_barrier(op, DS_BARRIER0 + 2 * WG + 1))


@gluon.jit
def _ds_stored(WG: gl.constexpr, t):
    """This group's dSᵀ of tile t is in shared memory: it arrives, the other group waits (`_ds_wait`)."""
    _ds_signal("arrive", WG, t)


@gluon.jit
def _ds_wait(WG: gl.constexpr, t):
    """Wait until the other group's dSᵀ of tile t is in shared memory."""
    _ds_signal("sync", 1 - WG, t)


@gluon.jit
def _load_q_do(q_desc, do_desc, lse_desc, delta_desc, q_bufs, do_bufs, lse_bufs, delta_bufs, q_ready, do_ready,
               q_empty, do_empty, row0, col_h0, stat0, TP, lo, n_tiles, G, BM: gl.constexpr, D: gl.constexpr,
               NBUF: gl.constexpr):
    """The loading warp: step t = g·n_tiles + j is q tile j of the group's head g, into slot t mod NBUF."""
    t = 0
    for g in range(G):
        for j in range(n_tiles):
            m0 = lo + j * BM
            i = t % NBUF
            ph = (t // NBUF) & 1
            mbarrier.wait(q_empty.index(i), ph ^ 1)
            mbarrier.expect(q_ready.index(i), q_desc.block_type.nbytes + lse_desc.block_type.nbytes)
            tma.async_load(q_desc, [row0 + m0, col_h0 + g * D], q_ready.index(i), q_bufs.index(i))
            tma.async_load(lse_desc, [stat0 + g * TP + m0], q_ready.index(i), lse_bufs.index(i))
            mbarrier.wait(do_empty.index(i), ph ^ 1)
            mbarrier.expect(do_ready.index(i), do_desc.block_type.nbytes + delta_desc.block_type.nbytes)
            tma.async_load(do_desc, [row0 + m0, col_h0 + g * D], do_ready.index(i), do_bufs.index(i))
            tma.async_load(delta_desc, [stat0 + g * TP + m0], do_ready.index(i), delta_bufs.index(i))
            t += 1


@gluon.jit
def _dq_issue(ds_smem, k_cols, dq_zero, t, WG: gl.constexpr):
    """(fa.5) dQ of tile t for this group's half of D's columns, dS (both groups' keys) · K[:, columns], issued
    once the other group's dSᵀ of the tile is in shared memory."""
    _ds_wait(WG, t)
    return warpgroup_mma(ds_smem.index((t + NDS) % NDS).permute((1, 0)), k_cols, dq_zero, use_acc=False,
                         is_async=True)


@gluon.jit
def _dq_store(dq_part, dq_smem, dq_desc, row, col):
    """The finished dQ share to shared memory and one TMA reduction into dq (the previous one has read it)."""
    tma.store_wait(0)
    dq_smem.store(dq_part)
    fence_async_shared()
    tma.async_atomic_add(dq_desc, [row, col], dq_smem)


@gluon.jit
def _group(k_smem, v_smem, kv_bar, q_bufs, do_bufs, lse_bufs, delta_bufs, ds_smem, dq_smem, q_ready, do_ready,
           q_empty, do_empty, dq_desc, dk, dv, row0, col_h0, n0, lo, n_tiles, G, T, qk_scale, scale, hk,
           WG: gl.constexpr, HKV: gl.constexpr, BM: gl.constexpr, D: gl.constexpr, NBUF: gl.constexpr,
           CAUSAL: gl.constexpr, DEFER: gl.constexpr):
    """Keys [n0 + WG·BK, n0 + (WG+1)·BK) of the block: their dK, dV; their share of every tile's dQ.

    With DEFER, tile t's dQ is issued in step t + 1, after that step's dV and dK: by then the other group stored
    its dSᵀ of tile t half a step ago, so neither group waits on the other there (a wait in the same step kept
    the groups in lock step, their exponentials together instead of beside the other's products); without, in
    step t, after both groups' dSᵀ of the tile are stored."""
    st_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BM, 16])
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, D // 2, 16])
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    dtype: gl.constexpr = k_smem.dtype
    k_g = k_smem.slice(WG * BK, BK)
    v_g = v_smem.slice(WG * BK, BK)
    k_cols = k_smem.slice(WG * (D // 2), D // 2, dim=1)  # [2·BK keys, D/2]: this group's columns of dQ
    dk_acc = gl.zeros([BK, D], gl.float32, layout=acc_layout)
    dv_acc = gl.zeros([BK, D], gl.float32, layout=acc_layout)
    st_zero = gl.zeros([BK, BM], gl.float32, layout=st_layout)
    dq_zero = gl.zeros([BM, D // 2], gl.float32, layout=dq_layout)
    n_first = n0 + WG * BK  # this group's first key
    o_n = n_first + gl.arange(0, BK, layout=gl.SliceLayout(1, st_layout))
    col_wg = col_h0 + WG * (D // 2)
    if WG == 1:
        turn_pass(1)  # group 0 goes first
    if DEFER:
        _ds_stored(WG, -1)  # step 0's dQ product waits for "tile −1"
    mbarrier.wait(kv_bar, 0)
    t = 0
    dq_row = row0  # where the previous tile's dQ share goes
    dq_col = col_wg
    for g in range(G):
        for j in range(n_tiles):
            m0 = lo + j * BM
            i = t % NBUF
            ph = (t // NBUF) & 1
            mbarrier.wait(q_ready.index(i), ph)
            mbarrier.wait(do_ready.index(i), ph)
            turn_wait(WG)
            st = warpgroup_mma(k_g, q_bufs.index(i).permute((1, 0)), st_zero, use_acc=False, is_async=True)
            dpt = warpgroup_mma(v_g, do_bufs.index(i).permute((1, 0)), st_zero, use_acc=False, is_async=True)
            if (WG == 0) | (t < G * n_tiles - 1):  # group 1's last pass would meet no wait
                turn_pass(WG)
            st = warpgroup_mma_wait(1, deps=(st, ))
            b_lse2 = lse_bufs.index(i).load(gl.SliceLayout(0, st_layout))  # rows past T: +∞ (padded), P = 0
            pt = gl.exp2(st * qk_scale - gl.expand_dims(b_lse2, 0))  # (fa.5) Pᵀ
            # a mask only where the tile holds keys past T, or (causal) keys after one of its rows
            masked = n_first + BK > T
            if CAUSAL:
                masked = masked | (n_first + BK - 1 > m0)
            if masked:
                o_m = m0 + gl.arange(0, BM, layout=gl.SliceLayout(0, st_layout))
                seen = gl.expand_dims(o_n < T, 1)
                if CAUSAL:
                    seen = seen & (gl.expand_dims(o_m, 0) >= gl.expand_dims(o_n, 1))
                pt = gl.where(seen, pt, 0.0)
            dpt = warpgroup_mma_wait(0, deps=(dpt, ))
            b_delta = delta_bufs.index(i).load(gl.SliceLayout(0, st_layout))
            dst = (pt * (dpt - gl.expand_dims(b_delta, 0))).to(dtype)  # (fa.5) dSᵀ = Pᵀ ∘ (dPᵀ − δ)
            dv_acc = warpgroup_mma(gl.convert_layout(pt.to(dtype), op_layout), do_bufs.index(i), dv_acc, is_async=True)
            dk_acc = warpgroup_mma(gl.convert_layout(dst, op_layout), q_bufs.index(i), dk_acc, is_async=True)
            if DEFER:  # the previous tile's dQ, its dSᵀ (both groups') stored a step ago; in step 0 a product of a
                # buffer no tile wrote yet, dropped (the groups' arrivals for "tile −1" before the loop let it through)
                dq_part = _dq_issue(ds_smem, k_cols, dq_zero, t - 1, WG)
            # buffer t mod 3 was last read by both groups' dQ of tile t − 3 (deferred: waited for in step t − 2,
            # before the other group stored tile t − 1's dSᵀ, which this group waited for just above)
            ds_smem.index(t % NDS).slice(WG * BK, BK).store(dst)
            fence_async_shared()
            _ds_stored(WG, t)
            if not DEFER:
                dq_part = _dq_issue(ds_smem, k_cols, dq_zero, t, WG)
                dq_row = row0 + m0
                dq_col = col_wg + g * D
            dv_acc, dk_acc, dq_part = warpgroup_mma_wait(0, deps=(dv_acc, dk_acc, dq_part))
            if DEFER:
                if t > 0:
                    _dq_store(dq_part, dq_smem, dq_desc, dq_row, dq_col)
            else:
                _dq_store(dq_part, dq_smem, dq_desc, dq_row, dq_col)
            release_slot(q_empty.index(i))
            release_slot(do_empty.index(i))
            dq_row = row0 + m0
            dq_col = col_wg + g * D
            t += 1
    if DEFER:
        dq_part = _dq_issue(ds_smem, k_cols, dq_zero, t - 1, WG)
        dq_part = warpgroup_mma_wait(0, deps=(dq_part, ))
        _dq_store(dq_part, dq_smem, dq_desc, dq_row, dq_col)
    tma.store_wait(0)
    o_k = n_first + gl.arange(0, BK, layout=gl.SliceLayout(1, acc_layout))
    o_d = gl.arange(0, D, layout=gl.SliceLayout(0, acc_layout))
    offs = gl.expand_dims(((row0 + o_k).to(gl.int64) * HKV + hk) * D, 1) + gl.expand_dims(o_d, 0)
    keep = gl.expand_dims(o_k < T, 1)
    gl.store(dk + offs, (dk_acc * scale).to(dk.dtype.element_ty), mask=keep)  # (fa.5) dK = scale · dSᵀ Q
    gl.store(dv + offs, dv_acc.to(dv.dtype.element_ty), mask=keep)


@gluon.jit
def _group_1(k_smem, v_smem, kv_bar, q_bufs, do_bufs, lse_bufs, delta_bufs, ds_smem, dq_smem, q_ready, do_ready,
             q_empty, do_empty, dq_desc, dk, dv, row0, col_h0, n0, lo, n_tiles, G, T, qk_scale, scale, hk,
             HKV: gl.constexpr, BM: gl.constexpr, D: gl.constexpr, NBUF: gl.constexpr, CAUSAL: gl.constexpr,
             DEFER: gl.constexpr):
    """The worker partition's entry: `_group` for the second half of the keys."""
    _group(k_smem, v_smem, kv_bar, q_bufs, do_bufs, lse_bufs, delta_bufs, ds_smem, dq_smem, q_ready, do_ready,
           q_empty, do_empty, dq_desc, dk, dv, row0, col_h0, n0, lo, n_tiles, G, T, qk_scale, scale, hk, 1, HKV, BM,
           D, NBUF, CAUSAL, DEFER)


@gluon.jit
def flash_bwd_pingpong_kernel(q, k, v, do, lse2, delta, B, T, TP, scale, dk, dv, dq, H: gl.constexpr,
                              HKV: gl.constexpr, D: gl.constexpr, BM: gl.constexpr, NBUF: gl.constexpr,
                              REGS: gl.constexpr, CAUSAL: gl.constexpr, DEFER: gl.constexpr):
    """dk, dv of 128 keys of one (batch, kv head), and their share of dq; grid (cdiv(T, 128), B·HKV), num_warps
    4 (the first group; the second group and the loading warp are workers). TP: lse2's and δ's row length, T
    padded to a multiple of BM (`padded_stats`)."""
    dtype: gl.constexpr = q.dtype.element_ty
    BN: gl.constexpr = 2 * BK
    G = H // HKV
    NROWS = B * T
    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BM, D], dtype)
    kv_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BN, D], dtype)
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BN, BM], dtype)
    f32_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)
    vec_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=1)
    # rows of every batch one after another: a box at (b·T + m, h·D) is rows m.. of head h of batch b
    q_desc = tma.make_tensor_descriptor(q, [NROWS, H * D], [H * D, 1], [BM, D], q_layout)
    do_desc = tma.make_tensor_descriptor(do, [NROWS, H * D], [H * D, 1], [BM, D], q_layout)
    k_desc = tma.make_tensor_descriptor(k, [NROWS, HKV * D], [HKV * D, 1], [BN, D], kv_layout)
    v_desc = tma.make_tensor_descriptor(v, [NROWS, HKV * D], [HKV * D, 1], [BN, D], kv_layout)
    dq_desc = tma.make_tensor_descriptor(dq, [NROWS, H * D], [H * D, 1], [BM, D // 2], f32_layout)
    lse_desc = tma.make_tensor_descriptor(lse2, [B * H * TP], [1], [BM], vec_layout)
    delta_desc = tma.make_tensor_descriptor(delta, [B * H * TP], [1], [BM], vec_layout)
    # programs start in x order: a head's key blocks together, so the ~132 resident ones share a few heads' q and
    # dO in L2; causal, each head's longest block (the first) first
    n0 = gl.program_id(0) * BN
    i_b = gl.program_id(1) // HKV
    hk = gl.program_id(1) % HKV
    row0 = i_b * T
    col_h0 = hk * G * D  # the group's first query head's columns
    stat0 = (i_b * H + hk * G) * TP
    lo = 0
    if CAUSAL:  # (fa.1) Tq = Tk: query rows before n0 see none of these keys
        lo = (n0 // BM) * BM
    n_tiles = gl.cdiv(T - lo, BM)

    k_smem = gl.allocate_shared_memory(dtype, [BN, D], kv_layout)
    v_smem = gl.allocate_shared_memory(dtype, [BN, D], kv_layout)
    q_bufs = gl.allocate_shared_memory(dtype, [NBUF, BM, D], q_layout)
    do_bufs = gl.allocate_shared_memory(dtype, [NBUF, BM, D], q_layout)
    lse_bufs = gl.allocate_shared_memory(gl.float32, [NBUF, BM], vec_layout)
    delta_bufs = gl.allocate_shared_memory(gl.float32, [NBUF, BM], vec_layout)
    ds_smem = gl.allocate_shared_memory(dtype, [NDS, BN, BM], ds_layout)
    dq_smem = gl.allocate_shared_memory(gl.float32, [2, BM, D // 2], f32_layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_ready = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
    do_ready = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
    do_empty = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    for i in gl.static_range(NBUF):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(do_ready.index(i), count=1)
        mbarrier.init(q_empty.index(i), count=8)  # every warp of both groups reads every tile
        mbarrier.init(do_empty.index(i), count=8)
    mbarrier.expect(kv_bar, 2 * k_desc.block_type.nbytes)
    tma.async_load(k_desc, [row0 + n0, hk * D], kv_bar, k_smem)
    tma.async_load(v_desc, [row0 + n0, hk * D], kv_bar, v_smem)

    qk_scale = scale * 1.4426950408889634
    gl.warp_specialize([
        (_group, (k_smem, v_smem, kv_bar, q_bufs, do_bufs, lse_bufs, delta_bufs, ds_smem, dq_smem.index(0), q_ready,
                  do_ready, q_empty, do_empty, dq_desc, dk, dv, row0, col_h0, n0, lo, n_tiles, G, T, qk_scale, scale,
                  hk, 0, HKV, BM, D, NBUF, CAUSAL, DEFER)),
        (_group_1, (k_smem, v_smem, kv_bar, q_bufs, do_bufs, lse_bufs, delta_bufs, ds_smem, dq_smem.index(1),
                    q_ready, do_ready, q_empty, do_empty, dq_desc, dk, dv, row0, col_h0, n0, lo, n_tiles, G, T,
                    qk_scale, scale, hk, HKV, BM, D, NBUF, CAUSAL, DEFER)),
        (_load_q_do, (q_desc, do_desc, lse_desc, delta_desc, q_bufs, do_bufs, lse_bufs, delta_bufs, q_ready,
                      do_ready, q_empty, do_empty, row0, col_h0, stat0, TP, lo, n_tiles, G, BM, D, NBUF)),
    ], [4, 1], [REGS, 24])


CONFIG = dict(BM=64, NBUF=2, REGS=240, num_warps=4, maxnreg=168)  # the probe's (v4, v5 in data/bench)
DEFER_DQ = {True: True, False: False}  # causal → each tile's dQ one step later (NOTES.md, "The Hopper backward")


def padded_stats(lse2, delta):
    """lse2 and δ `[B, H, T]` as the kernel reads them, `[B, H, TP]` with TP = T rounded up to CONFIG's BM: each
    query tile's 64 values are one TMA box, which must start 16 bytes aligned, and (b·H + h)·T floats is not
    where T is not a multiple of 4. The padding is lse2 = +∞ (P = 0) and δ = 0, the values of a row that saw no
    key (the kernel also masks rows past T)."""
    block = CONFIG["BM"]
    pad = ((0, 0), (0, 0), (0, -lse2.shape[-1] % block))
    return jnp.pad(lse2, pad, constant_values=jnp.inf), jnp.pad(delta, pad)

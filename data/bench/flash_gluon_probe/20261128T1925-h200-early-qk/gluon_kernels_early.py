"""The Hopper forward in Gluon (Triton 3.9 or later, sm_90, compiled only): plain or causal attention with the
same results as `kernels.py`'s forward (NOTES.md fa.2, fa.4), scheduled by hand as FlashAttention-3 does.

A program owns a 128-row block of one (batch, head) at a time and runs blocks until none is left (`grid`,
`flash_fwd_pingpong_kernel`; causal ones taken from a counter as programs finish, `_take_block`): q, o
`[B, TQ, H, D]`, k, v `[B, TK, HKV, D]` (causal aligned bottom-right: row i sees keys j ≤ i + TK − TQ; a row that
sees none has o = 0 and lse = −∞, fa.10), lse `[B, H, TQ]` (natural log). Three partitions share its shared
memory:

  - a loading warp fills a ring of NBUF K and V tiles through tensor descriptors (TMA, made on the device; rows
    past T read as 0);
  - two warp groups of 4 warps each own 64 of the rows (group 0 the first half, group 1 the second) and take
    turns (named barriers `TURNS`): one group issues its matrix products while the other runs its
    softmax, so the tensor cores are fed while a group's exponentials run (ping-pong);
  - inside a group the next tile's q kᵀ and this tile's P V are both in flight before the softmax of the tile
    just scored (`warpgroup_mma(..., is_async=True)`, waited on one at a time).

Registers move from the loading warp (24 per thread) to the groups (`REGS`, `setmaxnreg` under the hood), so
that a group's 64×128 float32 accumulator and its 64×BN scores fit without spilling.

Two signals are written in PTX (`gl.inline_asm`) because Gluon's `mbarrier.arrive` has one thread arrive after
a barrier of its whole partition, which the compiler puts before every arrive (three per tile per group): the
turns (`bar.sync` / `bar.arrive` on named barriers, as FlashAttention-3 does) and the release of a K or V slot
(one lane per warp arrives, `elect.sync`, once the warp's wait for the product that read the slot returned; a
warp group's product completes as one, so any warp's wait covers the group's). o leaves a plain block by TMA
from a shared-memory box per group (`o_smem`): the group goes on to the next block while the box is written (its
stores from registers cost 2-8 % of the kernel); causal blocks store from registers through a layout whose lanes
write whole 16-byte pieces of a row (the products' layout writes half-sectors), where the box measured no faster,
as do rows past TQ, which a box would write into the next batch's (NOTES.md, "The Hopper forward"). Masks beyond
causal (window, softcap, sinks, bias, segments, dropout, packed sequences) stay on `kernels.py` (the glue
chooses).
"""

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                               warpgroup_mma_wait)

from workbench.launch import sm_count

BR = gl.constexpr(64)  # rows of one warp group; a program's block is 2·BR
LN2 = gl.constexpr(0.6931471805599453)
LOG2E = gl.constexpr(1.4426950408889634)
TURN0 = gl.constexpr(14)  # named barriers TURN0 (group 0 may issue) and TURN0 + 1 (group 1 may)
TURNS = (TURN0.value, TURN0.value + 1)  # Triton's own partitions use the low ids (the compile test checks)


@gluon.constexpr_function
def named_barrier(op, barrier, aligned=True):
    """PTX of `bar.<op>` on a named barrier that both groups' 256 threads meet at. `bar` is PTX's
    `barrier.<op>.aligned`: every thread that waits there runs this one instruction, as in the turns, where one
    group's code syncs and the other's arrives. A barrier where both groups' code syncs (two instructions) takes
    `aligned=False`, `barrier.<op>` (compute-sanitizer's synccheck flags the aligned form there: "divergent
    thread(s) in block", data/bench/sanitizer/20261127T2001-h200-ds-barrier)."""
    return f"bar.{op} {barrier}, 256;" if aligned else f"barrier.{op} {barrier}, 256;"


@gluon.jit
def turn_wait(WG: gl.constexpr):
    """Wait until the other group let this one issue (its arrival and this group's wait make the 256)."""
    gl.inline_asm(named_barrier("sync", TURN0 + WG))


@gluon.jit
def turn_pass(WG: gl.constexpr):
    """Let the other group issue."""
    gl.inline_asm(named_barrier("arrive", TURN0 + 1 - WG))


@gluon.jit
def wait_phase(bar, phase):
    """Wait until the mbarrier `bar` completed the phase of parity `phase` (PTX `mbarrier.try_wait.parity` in a
    loop, what `mbarrier.wait` emits). Written in PTX because before `mbarrier.wait` in a loop the compiler puts
    a barrier of the whole partition (it cannot tell that nothing the partition's threads wrote is read across
    them there): one per tile and group in the forward (its LLVM IR shows it; none with this). The backward
    writes dSᵀ and dQ to shared memory every tile, so a partition barrier stays there wherever the wait is."""
    gl.inline_asm("{\n.reg .pred done;\nwait:\nmbarrier.try_wait.parity.shared::cta.b64 done, [$0], $1;\n"
                  "@!done bra.uni wait;\n}", "r,r", [bar, phase])


@gluon.jit
def release_slot(bar):
    """One elected lane of each warp arrives on the mbarrier `bar` (its count: 4 warps × 2 groups)."""
    gl.inline_asm("{\n.reg .pred p;\nelect.sync _|p, 0xffffffff;\n@p mbarrier.arrive.shared::cta.b64 _, [$0];\n}",
                  "r", [bar])


@gluon.jit
def _block(tile, n_m, n_blocks, HS, TQ, TK, H: gl.constexpr, BN: gl.constexpr, CAUSAL: gl.constexpr):
    """(batch, head, first row m0, key tiles, tiles with no masked key) of block `tile` of the program order. Plain:
    a head's blocks one after another (the ~132 programs at work share a few heads' K and V in L2). Causal: heads in
    sections of HS (whose K and V fit in L2 together, `heads_per_section`), and in a section the longest blocks of
    all its heads first, so that the blocks taken last are the shortest (programs take blocks as they finish
    one, `_next_block`). A block that sees no key still runs one tile, all of it masked."""
    if CAUSAL:
        s0 = tile // (HS * n_m) * HS  # the section's first head
        hs = gl.minimum(HS, n_blocks // n_m - s0)
        r = tile - s0 * n_m
        i_bh = s0 + r % hs
        i_m = n_m - 1 - r // hs
    else:
        i_bh = tile // n_m
        i_m = n_m - 1 - tile % n_m
    m0 = i_m * (2 * BR)
    off = TK - TQ  # (fa.1) causal aligned bottom-right: row i sees keys j ≤ i + off
    n_tiles = gl.cdiv(TK, BN)
    n_full = TK // BN  # tiles with no key past TK
    if CAUSAL:
        n_tiles = gl.cdiv(gl.maximum(gl.minimum(m0 + 2 * BR + off, TK), 0), BN)
        n_full = gl.minimum(gl.maximum(m0 + off, 0) // BN, n_full)  # and none past the block's first row's reach
    return i_bh // H, i_bh % H, m0, gl.maximum(n_tiles, 1), n_full


@gluon.jit
def _next_block(tile, handed, sched, sched_ready, sched_empty, CAUSAL: gl.constexpr, WARPS: gl.constexpr):
    """The block a group runs after `tile`, the `handed`-th the loading warp passed it. Plain: tile + programs.
    Causal: what the loading warp took from the launch's counter (`_take_block`), read from the ring slot
    handed % 2 of `sched` once it is there; each warp releases the slot after its read."""
    if CAUSAL:
        i = handed % 2
        wait_phase(sched_ready.index(i), (handed // 2) & 1)
        nxt = gl.max(sched.index(i).load(gl.BlockedLayout([1], [32], [WARPS], [0])), axis=0)
        release_slot(sched_empty.index(i))
    else:
        nxt = tile + gl.num_programs(0)
    return nxt


@gluon.jit
def _take_block(tile, handed, counter, sched, sched_ready, sched_empty, n_blocks, CAUSAL: gl.constexpr):
    """(The loading warp) the program's next block: plain, tile + programs; causal, the launch's next untaken block
    (`counter` starts at 0 where there are more blocks than programs; the first `programs` blocks are the
    programs' own), passed to both groups through the ring slot handed % 2 of `sched` once they read what was
    there before."""
    if CAUSAL:
        if gl.num_programs(0) < n_blocks:
            nxt = gl.atomic_add(counter, 1) + gl.num_programs(0)
        else:  # a program a block: nothing to take (and the launcher left `counter` as it was)
            nxt = n_blocks
        i = handed % 2
        mbarrier.wait(sched_empty.index(i), ((handed // 2) & 1) ^ 1)
        sched.index(i).store(gl.full([1], nxt, gl.int32, layout=gl.BlockedLayout([1], [32], [1], [0])))
        mbarrier.arrive(sched_ready.index(i))
    else:
        nxt = tile + gl.num_programs(0)
    return nxt


@gluon.jit
def _load_kv(k_desc, v_desc, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, counter, sched, sched_ready,
             sched_empty, n_m, n_blocks, HS, TQ, TK, H: gl.constexpr, HKV: gl.constexpr, D: gl.constexpr,
             BN: gl.constexpr, NBUF: gl.constexpr, CAUSAL: gl.constexpr):
    """The loading warp: the c-th K, V tile of the program (over all its blocks) goes to slot c % NBUF once both
    groups released the tile that was there; once a block's loads are issued it takes the next block
    (`_take_block`), whose first tiles then load while the groups finish this one."""
    c = 0
    handed = 0
    tile = gl.program_id(0)
    while tile < n_blocks:
        i_b, i_h, m0, n_tiles, n_full = _block(tile, n_m, n_blocks, HS, TQ, TK, H, BN, CAUSAL)
        row0 = i_b * TK
        col = (i_h // (H // HKV)) * D
        for j in range(n_tiles):
            i = c % NBUF
            phase = (c // NBUF) & 1
            mbarrier.wait(k_empty.index(i), phase ^ 1)
            mbarrier.expect(k_ready.index(i), k_desc.block_type.nbytes)
            tma.async_load(k_desc, [row0 + j * BN, col], k_ready.index(i), k_bufs.index(i))
            mbarrier.wait(v_empty.index(i), phase ^ 1)
            mbarrier.expect(v_ready.index(i), v_desc.block_type.nbytes)
            tma.async_load(v_desc, [row0 + j * BN, col], v_ready.index(i), v_bufs.index(i))
            c += 1
        tile = _take_block(tile, handed, counter, sched, sched_ready, sched_empty, n_blocks, CAUSAL)
        handed += 1


@gluon.jit
def _online_softmax(s, m_i, l_i, r0, j0, TK, off, qk_scale, layout: gl.constexpr, BN: gl.constexpr, masked,
                    CAUSAL: gl.constexpr):
    """(fa.2) One tile's step of the online softmax in base 2: P = 2^(s·scale·log2 e − m), the rescale α of what
    came before, the new running max and sum. `masked`: the tile holds the causal diagonal (row i sees keys
    j ≤ i + off) or keys past TK.

    The row max is taken of the raw scores and scaled once (scale > 0: the max of s·scale·log2 e, the same
    rounding), so that each score takes one fused multiply-add, s·(scale·log2 e) − m, instead of a multiply and a
    subtract (about 250 fewer instructions in either kernel; NOTES.md, "The Hopper forward")."""
    if masked:
        o_m = r0 + gl.arange(0, BR, layout=gl.SliceLayout(1, layout))
        o_n = j0 + gl.arange(0, BN, layout=gl.SliceLayout(0, layout))
        seen = gl.expand_dims(o_n, 0) < TK
        if CAUSAL:
            seen = seen & (gl.expand_dims(o_m + off, 1) >= gl.expand_dims(o_n, 0))
        s = gl.where(seen, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
    m_use = gl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen no key yet: P = 0, not NaN
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_use, 1))
    alpha = gl.exp2(m_i - m_use)
    l_i = l_i * alpha + gl.sum(p, axis=1)
    return p, alpha, m_new, l_i


@gluon.jit
def _store_block(acc, l_i, m_i, o_desc, o_smem, o, o32, lse, i_b, i_h, r0, TQ, H: gl.constexpr, D: gl.constexpr,
                 layout: gl.constexpr, o_layout: gl.constexpr, KEEP_F32: gl.constexpr):
    """(fa.4, fa.10) o = acc / l (0 where a row saw no key) by a TMA box where the 64 rows are the batch's (else
    masked stores), its float32 copy and lse by stores."""
    row_layout: gl.constexpr = gl.SliceLayout(1, o_layout)
    dtype: gl.constexpr = o_smem.dtype
    seen = l_i > 0
    acc = acc / gl.expand_dims(gl.convert_layout(gl.where(seen, l_i, 1.0), row_layout), 1)
    q_head = (i_b.to(gl.int64) * TQ * H + i_h) * D
    o_m = r0 + gl.arange(0, BR, layout=row_layout)
    o_d = gl.arange(0, D, layout=gl.SliceLayout(0, o_layout))
    offsets = gl.expand_dims(o_m.to(gl.int64) * (H * D), 1) + gl.expand_dims(o_d, 0)
    if r0 + BR <= TQ:
        tma.store_wait(0)
        o_smem.store(acc.to(dtype))
        fence_async_shared()
        tma.async_store(o_desc, [i_b * TQ + r0, i_h * D], o_smem)
    else:
        gl.store(o + q_head + offsets, acc.to(dtype), mask=gl.expand_dims(o_m < TQ, 1))
    if KEEP_F32:
        gl.store(o32 + q_head + offsets, acc, mask=gl.expand_dims(o_m < TQ, 1))
    lse_rows = r0 + gl.arange(0, BR, layout=gl.SliceLayout(1, layout))
    gl.store(lse + (i_b * H + i_h).to(gl.int64) * TQ + lse_rows,
             gl.where(seen, (m_i + gl.log2(l_i)) * LN2, float("-inf")), mask=lse_rows < TQ)


@gluon.jit
def _group_block(q_desc, q_bufs, q_bar, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, o_desc, o_smem, o, o32,
                 lse, n_m, n_blocks, HS, TQ, TK, qk_scale, tile, handed, c, s,
                 WG: gl.constexpr, H: gl.constexpr, BN: gl.constexpr, D: gl.constexpr, NBUF: gl.constexpr,
                 KEEP_F32: gl.constexpr):
    """(Plain only.) This group's rows of block `tile`, the program's `handed`-th, whose first q kᵀ `s` is done
    (issued with the previous block's last P V, or before the first block): q of block k in buffer k mod 2
    of `q_bufs`; K, V tiles c, c + 1, …. Once the key-tile loop's last q kᵀ has read this block's q buffer, block
    k + 2's q loads into it; the next block's first q kᵀ goes out right after this block's last P V (both without a
    turn) and runs while o is stored. Returns (the K, V tiles consumed, the next block, its first q kᵀ)."""
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_layout: gl.constexpr = gl.SliceLayout(1, o_layout)
    dtype: gl.constexpr = q_bufs.dtype
    ROW: gl.constexpr = H * D
    s_zero = gl.zeros([BR, BN], gl.float32, layout=layout)
    off = TK - TQ
    i_b, i_h, m0, n_tiles, n_full = _block(tile, n_m, n_blocks, HS, TQ, TK, H, BN, False)
    r0 = m0 + WG * BR
    q_smem = q_bufs.index(handed % 2)
    m_i = gl.full([BR], float("-inf"), gl.float32, layout=gl.SliceLayout(1, layout))
    l_i = gl.zeros([BR], gl.float32, layout=gl.SliceLayout(1, layout))
    acc = gl.zeros([BR, D], gl.float32, layout=o_layout)
    release_slot(k_empty.index(c % NBUF))  # the block's first q kᵀ (`s`) is done
    p, alpha, m_i, l_i = _online_softmax(s, m_i, l_i, r0, 0, TK, off, qk_scale, layout, BN, n_full == 0, False)
    for j in range(1, n_tiles):
        i = (c + j) % NBUF
        i_prev = (c + j - 1) % NBUF
        wait_phase(k_ready.index(i), ((c + j) // NBUF) & 1)
        wait_phase(v_ready.index(i_prev), ((c + j - 1) // NBUF) & 1)
        turn_wait(WG)
        s = warpgroup_mma(q_smem, k_bufs.index(i).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        acc = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), v_bufs.index(i_prev), acc, is_async=True)
        turn_pass(WG)
        s = warpgroup_mma_wait(1, deps=(s, ))
        release_slot(k_empty.index(i))
        p, alpha, m_i, l_i = _online_softmax(s, m_i, l_i, r0, j * BN, TK, off, qk_scale, layout, BN, j >= n_full,
                                             False)
        acc = warpgroup_mma_wait(0, deps=(acc, ))
        release_slot(v_empty.index(i_prev))
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_layout), 1)
    P = gl.num_programs(0)
    next_tile = tile + P
    later = tile + 2 * P
    if later < n_blocks:  # the loop's last q kᵀ has read this buffer: block k + 2's q goes there
        b_l, h_l, m_l, _, _ = _block(later, n_m, n_blocks, HS, TQ, TK, H, BN, False)
        mbarrier.expect(q_bar.index(handed % 2), q_desc.block_type.nbytes)
        tma.async_load(q_desc, [b_l * TQ + m_l + WG * BR, h_l * D], q_bar.index(handed % 2), q_smem)
    i_last = (c + n_tiles - 1) % NBUF
    wait_phase(v_ready.index(i_last), ((c + n_tiles - 1) // NBUF) & 1)
    acc = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), v_bufs.index(i_last), acc, is_async=True)
    if next_tile < n_blocks:  # the next block's first q kᵀ goes out beside this P V and runs while o is stored
        c_next = c + n_tiles
        wait_phase(q_bar.index((handed + 1) % 2), ((handed + 1) // 2) & 1)
        wait_phase(k_ready.index(c_next % NBUF), (c_next // NBUF) & 1)
        s_next = warpgroup_mma(q_bufs.index((handed + 1) % 2), k_bufs.index(c_next % NBUF).permute((1, 0)), s_zero,
                               use_acc=False, is_async=True)
        done = warpgroup_mma_wait(1, deps=(acc, ))  # the P V (the older group); q kᵀ still in flight
        release_slot(v_empty.index(i_last))
        _store_block(done, l_i, m_i, o_desc, o_smem, o, o32, lse, i_b, i_h, r0, TQ, H, D, layout, o_layout, KEEP_F32)
        s = warpgroup_mma_wait(0, deps=(s_next, ))
    else:
        done = warpgroup_mma_wait(0, deps=(acc, ))
        release_slot(v_empty.index(i_last))
        _store_block(done, l_i, m_i, o_desc, o_smem, o, o32, lse, i_b, i_h, r0, TQ, H, D, layout, o_layout, KEEP_F32)
    return n_tiles, next_tile, s


@gluon.jit
def _group(q_desc, q_bufs, q_bar, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, sched, sched_ready, sched_empty,
           o_desc, o_smem, o, o32, lse, n_m, n_blocks, HS, TQ, TK, qk_scale, WG: gl.constexpr, H: gl.constexpr,
           BN: gl.constexpr, D: gl.constexpr, NBUF: gl.constexpr, CAUSAL: gl.constexpr, KEEP_F32: gl.constexpr):
    """(Plain only.) Rows [m0 + WG·BR, m0 + (WG+1)·BR) of blocks program_id, program_id + programs, …: the first
    two blocks' q load into the group's two buffers, the first block's first q kᵀ goes out, then `_group_block`
    per block. Turns only inside the key-tile loop; group 0 answers group 1's first pass at the end."""
    gl.static_assert(not CAUSAL, "the early-q kᵀ probe kernel is plain only")
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 16])
    if WG == 1:
        turn_pass(1)  # group 0 goes first
    tile = gl.program_id(0)
    for b in gl.static_range(2):
        t = tile + b * gl.num_programs(0)
        if t < n_blocks:
            i_b, i_h, m0, _, _ = _block(t, n_m, n_blocks, HS, TQ, TK, H, BN, False)
            mbarrier.expect(q_bar.index(b), q_desc.block_type.nbytes)
            tma.async_load(q_desc, [i_b * TQ + m0 + WG * BR, i_h * D], q_bar.index(b), q_bufs.index(b))
    wait_phase(q_bar.index(0), 0)
    wait_phase(k_ready.index(0), 0)
    s = warpgroup_mma(q_bufs.index(0), k_bufs.index(0).permute((1, 0)), gl.zeros([BR, BN], gl.float32, layout=layout),
                      use_acc=False, is_async=True)
    s = warpgroup_mma_wait(0, deps=(s, ))
    c = 0  # K, V tiles this program consumed before this block
    handed = 0
    while tile < n_blocks:
        n_tiles, tile, s = _group_block(q_desc, q_bufs, q_bar, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty,
                                        o_desc, o_smem, o, o32, lse, n_m, n_blocks, HS, TQ, TK, qk_scale, tile, handed,
                                        c, s, WG, H, BN, D, NBUF, KEEP_F32)
        c += n_tiles
        handed += 1
    if WG == 0:  # group 1's first pass, which no turn of group 1 answered
        turn_wait(0)
    tma.store_wait(0)  # the last box read before the program's shared memory goes


@gluon.jit
def _group_1(q_desc, q_smem, q_bar, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, sched, sched_ready,
             sched_empty, o_desc, o_smem, o, o32, lse, n_m, n_blocks, HS, TQ, TK, qk_scale, H: gl.constexpr,
             BN: gl.constexpr, D: gl.constexpr, NBUF: gl.constexpr, CAUSAL: gl.constexpr, KEEP_F32: gl.constexpr):
    """The worker partition's entry: `_group` for the second half of the rows."""
    _group(q_desc, q_smem, q_bar, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, sched, sched_ready, sched_empty,
           o_desc, o_smem, o, o32, lse, n_m, n_blocks, HS, TQ, TK, qk_scale, 1, H, BN, D, NBUF, CAUSAL, KEEP_F32)


@gluon.jit
def flash_fwd_pingpong_kernel(q, k, v, B, TQ, TK, scale, HS, o, lse, o32, counter, H: gl.constexpr,
                              HKV: gl.constexpr, D: gl.constexpr, BN: gl.constexpr, NBUF: gl.constexpr,
                              REGS: gl.constexpr, CAUSAL: gl.constexpr, KEEP_F32: gl.constexpr):
    """o (and its float32 copy o32 when KEEP_F32), lse of the 128-row blocks of every (batch, head), in the order
    of `_block` (HS: heads a causal section holds, `heads_per_section`), by min(blocks, SMs) programs (`grid`), each
    running blocks until none is left: the next block's loads overlap this one's last products and stores. Plain
    blocks all take the same time: a program runs program_id, program_id + programs, …; causal ones differ up to
    T/128-fold, so a program takes the next untaken block when its loading warp is done with one (`counter`, one
    int32 that starts at 0 where blocks outnumber programs). num_warps 4 (the first group; the second group and
    the loading warp are workers)."""
    dtype: gl.constexpr = q.dtype.element_ty
    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BR, D], dtype)
    kv_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BN, D], dtype)
    # rows of every batch one after another: a box at (b·T + m, h·D) is rows m.. of head h of batch b (rows past
    # T are the next batch's: masked keys, and query rows never stored)
    q_desc = tma.make_tensor_descriptor(q, [B * TQ, H * D], [H * D, 1], [BR, D], q_layout)
    o_desc = tma.make_tensor_descriptor(o, [B * TQ, H * D], [H * D, 1], [BR, D], q_layout)
    k_desc = tma.make_tensor_descriptor(k, [B * TK, HKV * D], [HKV * D, 1], [BN, D], kv_layout)
    v_desc = tma.make_tensor_descriptor(v, [B * TK, HKV * D], [HKV * D, 1], [BN, D], kv_layout)
    n_m = gl.cdiv(TQ, 2 * BR)
    n_blocks = n_m * B * H

    q_smem = gl.allocate_shared_memory(dtype, [4, BR, D], q_layout)  # two q buffers a group
    o_smem = gl.allocate_shared_memory(dtype, [2, BR, D], q_layout)  # each group's o box on its way out
    k_bufs = gl.allocate_shared_memory(dtype, [NBUF, BN, D], kv_layout)
    v_bufs = gl.allocate_shared_memory(dtype, [NBUF, BN, D], kv_layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [4, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
    sched = gl.allocate_shared_memory(gl.int32, [2, 1], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    sched_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    sched_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for g in gl.static_range(4):
        mbarrier.init(q_bar.index(g), count=1)
    for g in gl.static_range(2):
        mbarrier.init(sched_ready.index(g), count=1)
        mbarrier.init(sched_empty.index(g), count=8)  # every warp of both groups reads the block handed
    for i in gl.static_range(NBUF):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=8)  # every warp of both groups reads every tile
        mbarrier.init(v_empty.index(i), count=8)

    qk_scale = scale * LOG2E
    gl.warp_specialize([
        (_group, (q_desc, q_smem.slice(0, 2), q_bar.slice(0, 2), k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty,
                  sched, sched_ready, sched_empty, o_desc, o_smem.index(0), o, o32, lse, n_m, n_blocks, HS, TQ, TK,
                  qk_scale, 0, H, BN, D, NBUF, CAUSAL, KEEP_F32)),
        (_group_1, (q_desc, q_smem.slice(2, 2), q_bar.slice(2, 2), k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty,
                    sched, sched_ready, sched_empty, o_desc, o_smem.index(1), o, o32, lse, n_m, n_blocks, HS, TQ, TK,
                    qk_scale, H, BN, D, NBUF, CAUSAL, KEEP_F32)),
        (_load_kv, (k_desc, v_desc, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, counter, sched, sched_ready,
                    sched_empty, n_m, n_blocks, HS, TQ, TK, H, HKV, D, BN, NBUF, CAUSAL)),
    ], [4, 1], [REGS, 24])


BLOCK_M = 2 * BR.value
CONFIG = dict(BN=128, NBUF=2, REGS=240, num_warps=4, maxnreg=168)  # measured on an H200 (NOTES.md, "Hopper forward")


L2_KV_BYTES = 32 << 20  # K and V of a causal section's heads (the H100's and H200's L2: 50 MB)


def grid(B, TQ, H):
    """The grid of `flash_fwd_pingpong_kernel`: one program per multiprocessor, or per block where there are
    fewer blocks."""
    return (min(triton.cdiv(TQ, BLOCK_M) * B * H, sm_count()),)


def heads_per_section(TK, D, H, HKV, itemsize):
    """Query heads (batch-major, as `_block` numbers them) whose K and V fit in L2_KV_BYTES together: a causal
    launch runs a section's blocks before the next section's (GQA: H/HKV query heads share one K and V)."""
    return max(1, L2_KV_BYTES // (2 * TK * D * itemsize)) * (H // HKV)

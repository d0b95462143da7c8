"""Issue 47 prototype, second version: two computing warp groups as separate partitions taking turns (ping-pong).
q, k, v, o as [B*H*T, D] rows (head-major), lse [B*H*T] (base 2). A 128-row block per program: warp group 0
(the default partition) owns rows 0-63, warp group 1 (a worker) rows 64-127, a loading warp fills a ring of K, V
tiles. Each group issues its MMAs only in its turn (mbarriers `turn`), so that one group's softmax runs while the
other's MMAs do; inside a group the next tile's q kᵀ and this tile's P V are issued before the softmax."""
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait


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
def _softmax(s, m_i, l_i, r0, j0, qk_scale, layout: gl.constexpr, BR: gl.constexpr, BN: gl.constexpr, mask):
    s = s * qk_scale
    if mask:
        o_m = r0 + gl.arange(0, BR, layout=gl.SliceLayout(1, layout))
        o_n = j0 + gl.arange(0, BN, layout=gl.SliceLayout(0, layout))
        s = gl.where(gl.expand_dims(o_m, 1) >= gl.expand_dims(o_n, 0), s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, axis=1))
    p = gl.exp2(s - gl.expand_dims(m_new, 1))
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha + gl.sum(p, axis=1)
    return p, alpha, m_new, l_i


@gluon.jit
def _group(q_desc, q_smem, q_bar, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, turn, o, lse, row, m0, n_tiles,
           n_full, qk_scale, WG: gl.constexpr, BR: gl.constexpr, BN: gl.constexpr, D: gl.constexpr,
           NBUF: gl.constexpr, CAUSAL: gl.constexpr):
    """Rows [m0 + WG·BR, m0 + WG·BR + BR) of the block: its own q tile, the shared K, V ring, its own output."""
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=layout, k_width=2)
    r0 = m0 + WG * BR
    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_load(q_desc, [row + r0, 0], q_bar, q_smem)
    m_i = gl.full([BR], float("-inf"), gl.float32, layout=gl.SliceLayout(1, layout))
    l_i = gl.zeros([BR], gl.float32, layout=gl.SliceLayout(1, layout))
    acc = gl.zeros([BR, D], gl.float32, layout=layout)
    s_zero = gl.zeros([BR, BN], gl.float32, layout=layout)
    mine = turn.index(WG)
    other = turn.index(1 - WG)
    mbarrier.wait(q_bar, 0)
    mbarrier.wait(k_ready.index(0), 0)
    mbarrier.wait(mine, WG ^ 1)  # group 0 goes first: a fresh barrier passes a wait for parity 1
    s = warpgroup_mma(q_smem, k_bufs.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    mbarrier.arrive(other, count=1)
    s = warpgroup_mma_wait(0, deps=(s, ))
    mbarrier.arrive(k_empty.index(0), count=1)
    p, alpha, m_i, l_i = _softmax(s, m_i, l_i, r0, 0, qk_scale, layout, BR, BN, CAUSAL and n_full == 0)
    for j in range(1, n_tiles):
        i = j % NBUF
        ip = (j - 1) % NBUF
        mbarrier.wait(k_ready.index(i), (j // NBUF) & 1)
        mbarrier.wait(v_ready.index(ip), ((j - 1) // NBUF) & 1)
        mbarrier.wait(mine, (j & 1) ^ WG ^ 1)
        s = warpgroup_mma(q_smem, k_bufs.index(i).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        acc = warpgroup_mma(gl.convert_layout(p.to(gl.bfloat16), p_layout), v_bufs.index(ip), acc, is_async=True)
        mbarrier.arrive(other, count=1)
        s = warpgroup_mma_wait(1, deps=(s, ))
        mbarrier.arrive(k_empty.index(i), count=1)
        p, alpha, m_i, l_i = _softmax(s, m_i, l_i, r0, j * BN, qk_scale, layout, BR, BN, CAUSAL and j >= n_full)
        acc = warpgroup_mma_wait(0, deps=(acc, ))
        mbarrier.arrive(v_empty.index(ip), count=1)
        acc = acc * gl.expand_dims(alpha, 1)
    il = (n_tiles - 1) % NBUF
    mbarrier.wait(v_ready.index(il), ((n_tiles - 1) // NBUF) & 1)
    mbarrier.wait(mine, (n_tiles & 1) ^ WG ^ 1)
    acc = warpgroup_mma(gl.convert_layout(p.to(gl.bfloat16), p_layout), v_bufs.index(il), acc, is_async=True)
    mbarrier.arrive(other, count=1)
    acc = warpgroup_mma_wait(0, deps=(acc, ))
    mbarrier.arrive(v_empty.index(il), count=1)
    acc = acc / gl.expand_dims(l_i, 1)
    o_m = r0 + gl.arange(0, BR, layout=gl.SliceLayout(1, layout))
    o_d = gl.arange(0, D, layout=gl.SliceLayout(0, layout))
    gl.store(o + gl.expand_dims((row + o_m).to(gl.int64) * D, 1) + gl.expand_dims(o_d, 0), acc.to(gl.bfloat16))
    gl.store(lse + row + o_m, m_i + gl.log2(l_i))


@gluon.jit
def _group1(q_desc, q_smem, q_bar, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, turn, o, lse, row, m0, n_tiles,
            n_full, qk_scale, BR: gl.constexpr, BN: gl.constexpr, D: gl.constexpr, NBUF: gl.constexpr,
            CAUSAL: gl.constexpr):
    _group(q_desc, q_smem, q_bar, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, turn, o, lse, row, m0, n_tiles,
           n_full, qk_scale, 1, BR, BN, D, NBUF, CAUSAL)


@gluon.jit
def gluon_attn_fwd_pingpong(q, k, v, T, NROWS, qk_scale, o, lse, D: gl.constexpr, BN: gl.constexpr,
                            NBUF: gl.constexpr, CAUSAL: gl.constexpr, REGS: gl.constexpr):
    BR: gl.constexpr = 64
    BM: gl.constexpr = 2 * BR
    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BR, D], gl.bfloat16)
    kv_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BN, D], gl.bfloat16)
    q_desc = tma.make_tensor_descriptor(q, [NROWS, D], [D, 1], [BR, D], q_layout)
    k_desc = tma.make_tensor_descriptor(k, [NROWS, D], [D, 1], [BN, D], kv_layout)
    v_desc = tma.make_tensor_descriptor(v, [NROWS, D], [D, 1], [BN, D], kv_layout)
    i_m = gl.num_programs(0) - 1 - gl.program_id(0)
    row = gl.program_id(1) * T
    m0 = i_m * BM
    n_tiles = gl.cdiv(T, BN)
    n_full = n_tiles
    if CAUSAL:
        n_tiles = gl.cdiv(m0 + BM, BN)
        n_full = m0 // BN

    q_smem = gl.allocate_shared_memory(gl.bfloat16, [2, BR, D], q_layout)
    k_bufs = gl.allocate_shared_memory(gl.bfloat16, [NBUF, BN, D], kv_layout)
    v_bufs = gl.allocate_shared_memory(gl.bfloat16, [NBUF, BN, D], kv_layout)
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
        mbarrier.init(k_empty.index(i), count=2)  # both groups read every tile
        mbarrier.init(v_empty.index(i), count=2)

    gl.warp_specialize([
        (_group, (q_desc, q_smem.index(0), q_bar.index(0), k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, turn,
                  o, lse, row, m0, n_tiles, n_full, qk_scale, 0, BR, BN, D, NBUF, CAUSAL)),
        (_group1, (q_desc, q_smem.index(1), q_bar.index(1), k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, turn,
                   o, lse, row, m0, n_tiles, n_full, qk_scale, BR, BN, D, NBUF, CAUSAL)),
        (_loader, (k_desc, v_desc, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, row, n_tiles, BN, NBUF)),
    ], [4, 1], [REGS, 24])

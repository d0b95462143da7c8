"""Triton pieces both chunked families share (chunk_gla, chunk_kda): chunk slots and tiles, state-sweep and
segment prologues, the gate prefix sums, the two-level state pass, and their config lists.

Every kernel sees packed sequences (`[TT, H, ·]` rows) cut into chunks of BT rows; chunk slots
(`workbench._bounds.chunk_slots`) give each chunk of each sequence a slot, `bounds[slot] = (start, end)`.
Equation tags refer to chunk_gla/NOTES.md (gla.·) and kda/NOTES.md (kda.·).
"""

import triton
import triton.language as tl

from .launch import given
from .tl_helpers import exp_e


SUB_CHUNK = 16  # rows per sub-chunk inside a chunk (the smallest tl.dot tile)
BC = tl.constexpr(SUB_CHUNK)
DIRECT_RANGE = 20.0  # (gla.11) a sub-chunk whose log-decays span at most this takes its own block as one product
RHO = tl.constexpr(DIRECT_RANGE)


def block_configs(block: str, sizes=(32, 64), warps=(4, 8), stages=(2,)):
    """Every block size × warps × pipeline stages, in that order (the first is the interpreter's default)."""
    return [triton.Config({block: b}, num_warps=w, num_stages=st) for b in sizes for w in warps for st in stages]


def prune_blocks(block: str, dim: str):
    """Keep block sizes not wider than the dimension (rounded up to a power of two, at least 16)."""
    def prune(configs, named_args, **_):
        size = max(16, triton.next_power_of_2(named_args[dim].shape[-1]))
        kept = [c for c in configs if c.kwargs[block] <= size]
        return kept or [min(configs, key=lambda c: c.kwargs[block])]
    return prune


WIDE_KEYS = 128  # beyond this key width a state sweep's pipelined configs outgrow Hopper's shared memory


def sweep_stages(prune, keys: str):
    """`prune`, then the configs whose pipeline fits the key width of argument `keys`: wider than WIDE_KEYS,
    those with num_stages=1, else the others. chunk_kda's backward state sweep holds all K rows of its
    [BK, BV] state and loads four [BT, BK] tiles per chunk; pipelined (2 stages) at K = 256 that asks
    245–369 KiB of shared memory, more than an H100 has (227 KiB); in one stage it fits (kda/NOTES.md,
    "Shared memory at K = 256")."""
    def pruned(configs, named_args, **kwargs):
        kept = prune(configs, named_args, **kwargs)
        wide = named_args[keys].shape[-1] > WIDE_KEYS
        return [c for c in kept if (c.num_stages == 1) == wide] or kept
    return pruned


@triton.jit
def slot_rows(bounds, i_s):
    """(start, end) rows of chunk slot i_s, as int64; start == end for an unused slot."""
    start = tl.load(bounds + 2 * i_s).to(tl.int64)
    end = tl.load(bounds + 2 * i_s + 1).to(tl.int64)
    return start, end


@triton.jit
def load_tile(x, rows, m_rows, i_h, o_d, m_d, H: tl.constexpr, D: tl.constexpr):
    """Rows `rows` of x[TT, H, D] at head i_h, columns o_d, as float32 ([len(rows), len(o_d)]); zeros outside."""
    p = x + (rows[:, None] * H + i_h) * D + o_d[None, :]
    return tl.load(p, mask=m_rows[:, None] & m_d[None, :], other=0.0).to(tl.float32)


@triton.jit
def load_row(x, row, i_h, o_d, m_d, H: tl.constexpr, D: tl.constexpr):
    """One row of x[TT, H, D] at head i_h as float32 [len(o_d)]."""
    return tl.load(x + (row * H + i_h) * D + o_d, mask=m_d, other=0.0).to(tl.float32)


@triton.heuristics({"USE_GK": given("gk")})
@triton.jit
def chunk_cumsum_kernel(gk, bounds, b, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr,
                        BK: tl.constexpr, USE_GK: tl.constexpr):
    """(gla.3) b_r = Σ_{t ≤ r} a_t within each chunk, float32 [TT, H, K]; zeros without a gate."""
    i_s, i_h = tl.program_id(0), tl.program_id(1)
    start, end = slot_rows(bounds, i_s)
    rows = start + tl.arange(0, BT)
    m_t = rows < end
    o_k = tl.arange(0, BK)
    m_k = o_k < K
    b_b = tl.zeros([BT, BK], tl.float32)
    if USE_GK:
        b_b = tl.cumsum(load_tile(gk, rows, m_t, i_h, o_k, m_k, H, K), axis=0)  # [BT, BK]
    tl.store(b + (rows[:, None] * H + i_h) * K + o_k[None, :], b_b, mask=m_t[:, None] & m_k[None, :])


@triton.jit
def sequence_rows(cu_seqlens, i_n):
    """(first row, end row) of packed sequence i_n, as int64."""
    return tl.load(cu_seqlens + i_n).to(tl.int64), tl.load(cu_seqlens + i_n + 1).to(tl.int64)


@triton.jit
def sweep_chunk(cu_seqlens, i_n, c, BT: tl.constexpr):
    """(start, end) rows of chunk c of sequence i_n, computed from cu_seqlens (the same rows as its slot's
    `bounds`, without a load whose result the next address depends on, so the sweep's loads can be
    issued ahead of the loop body)."""
    bos, eos = sequence_rows(cu_seqlens, i_n)
    start = bos + c * BT
    return start, tl.minimum(start + BT, eos)


@triton.jit
def sweep_prologue(cu_seqlens, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                    BK: tl.constexpr, BV: tl.constexpr):
    """What a state sweep (one program per value block and (sequence, head)) needs before its loop:
    (i_nh, i_h, the sequence's first chunk slot, its chunk count, o_k, o_v, m_k, m_v, the [BK, BV]
    state mask and offsets)."""
    i_v, i_nh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    i_n, i_h = i_nh // H, i_nh % H
    bos, eos = sequence_rows(cu_seqlens, i_n)
    first_slot = bos // BT + i_n
    n_chunks = tl.cdiv(eos - bos, BT)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    m_h = m_k[:, None] & m_v[None, :]
    p_state = o_k[:, None] * V + o_v[None, :]
    return i_nh, i_h, first_slot, n_chunks, o_k, o_v, m_k, m_v, m_h, p_state


@triton.jit
def intra_tiles(q, k, b, i_sub, start, end, i_h, o_k, m_k, H: tl.constexpr, K: tl.constexpr,
                 BT: tl.constexpr):
    """Sub-chunk i_sub's rows and tiles (q, k, b: [BC, BK]), the chunk's (k, b: [BT, BK]), and b at
    the sub-chunk's first row n and last row m ([BK]).

    Rows past the chunk's end read k = q = 0 and b = b at the last row (as if their gates were 0), so
    every exponent below keeps its sign there too.
    """
    rows_i = start + i_sub * BC + tl.arange(0, BC)
    m_i = rows_i < end
    rows = start + tl.arange(0, BT)
    m_t = rows < end
    b_bL = load_row(b, end - 1, i_h, o_k, m_k, H, K)
    b_qi = load_tile(q, rows_i, m_i, i_h, o_k, m_k, H, K)
    b_ki = load_tile(k, rows_i, m_i, i_h, o_k, m_k, H, K)
    b_bi = tl.where(m_i[:, None], load_tile(b, rows_i, m_i, i_h, o_k, m_k, H, K), b_bL[None, :])
    b_k = load_tile(k, rows, m_t, i_h, o_k, m_k, H, K)
    b_b = tl.where(m_t[:, None], load_tile(b, rows, m_t, i_h, o_k, m_k, H, K), b_bL[None, :])
    b_bn = load_row(b, tl.minimum(start + i_sub * BC, end - 1), i_h, o_k, m_k, H, K)
    b_bm = load_row(b, tl.minimum(start + i_sub * BC + BC, end) - 1, i_h, o_k, m_k, H, K)
    return rows_i, m_i, b_qi, b_ki, b_bi, b_k, b_b, b_bn, b_bm


@triton.jit
def segment_chunks(cu_seqlens, i_n, i_j, NSEG: tl.constexpr, BT: tl.constexpr):
    """(the sequence's first chunk slot, first chunk, end chunk) of segment i_j of sequence i_n: its
    chunks cut into NSEG runs of ⌈chunks / NSEG⌉ (the last ones shorter or empty)."""
    bos, eos = sequence_rows(cu_seqlens, i_n)
    n_chunks = tl.cdiv(eos - bos, BT)
    per = tl.cdiv(n_chunks, NSEG)
    c0 = tl.minimum(i_j * per, n_chunks)
    return bos // BT + i_n, c0, tl.minimum(c0 + per, n_chunks)


@triton.jit
def segment_prologue(cu_seqlens, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                      BK: tl.constexpr, BV: tl.constexpr, NSEG: tl.constexpr):
    """Program (V block, (sequence·head)·NSEG + segment, K block) of a segment pass: (i_n, i_h, the row of
    this segment in the [N·NSEG, H, ·] buffers, first slot, c0, c1, o_k, o_v, m_k, m_v, m_h, p_state)."""
    i_v, i_nhj, i_k = tl.program_id(0), tl.program_id(1).to(tl.int64), tl.program_id(2)
    i_nh, i_j = i_nhj // NSEG, i_nhj % NSEG
    i_n, i_h = i_nh // H, i_nh % H
    first_slot, c0, c1 = segment_chunks(cu_seqlens, i_n, i_j, NSEG, BT)
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    m_h = m_k[:, None] & m_v[None, :]
    return (i_n, i_h, (i_n * NSEG + i_j) * H + i_h, first_slot, c0, c1, o_k, o_v, m_k, m_v, m_h,
            o_k[:, None] * V + o_v[None, :])


@triton.jit
def chunk_state_pass_kernel(ends, transfer, init,  # inputs: [N·NSEG, H, K, V], Λ or P (below), [N, H, K, V]
                            starts, final,  # outputs: [N·NSEG, H, K, V], [N, H, K, V]
                            H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr,
                            BV: tl.constexpr, NSEG: tl.constexpr, REVERSE: tl.constexpr, MATRIX: tl.constexpr):
    """(gla.13, kda.18) Across the segments of one sequence (the last first with REVERSE), from `init` (h0, or
    dH at the sequence's end): each segment's true entering state S_j, then S ← exp(Λ_j) ⊙ S + E_j with Λ
    [N·NSEG, H, K] (chunk_gla), or with MATRIX S ← P_j S + E_j with P [N·NSEG, H, K, K] in float32 products
    (tf32x3; chunk_kda); `final` is the state after the last segment (the final state, or dS_0)."""
    i_v, i_nh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    i_n, i_h = i_nh // H, i_nh % H
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    m_h = m_k[:, None] & m_v[None, :]
    p_state = o_k[:, None] * V + o_v[None, :]
    b_s = tl.load(init + i_nh * K * V + p_state, mask=m_h, other=0.0)
    for jj in range(0, NSEG):
        i_row = (i_n * NSEG + (NSEG - 1 - jj if REVERSE else jj)) * H + i_h
        tl.store(starts + i_row * K * V + p_state, b_s, mask=m_h)
        b_e = tl.load(ends + i_row * K * V + p_state, mask=m_h, other=0.0)
        if MATRIX:
            b_p = tl.load(transfer + i_row * K * K + o_k[:, None] * K + o_k[None, :],
                          mask=m_k[:, None] & m_k[None, :], other=0.0)
            # tf32x3: float32 to about 1e-6 on tensor cores; "ieee" (FMAs, a [K, K] operand spilled) took
            # 0.44 ms per segment on an H100 at K = V = 128 (NOTES kda.18)
            b_s = tl.dot(b_p, b_s, input_precision="tf32x3") + b_e
        else:
            b_s = b_s * exp_e(tl.load(transfer + i_row * K + o_k, mask=m_k, other=0.0))[:, None] + b_e
    tl.store(final + i_nh * K * V + p_state, b_s, mask=m_h)

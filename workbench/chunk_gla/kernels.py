"""Triton kernels of chunked gated linear attention. Equation tags refer to NOTES.md.

Every kernel sees packed sequences (`[TT, H, ·]` rows) cut into chunks of BT rows. Chunk slots
(`workbench._bounds.chunk_slots`) give each chunk of each sequence a slot: `bounds[slot] = (start, end)`
rows, start = end for an unused slot; per-chunk states are stored by slot. The per-key log-decay
arrives as one array `gk` (the glue folds g into it, NOTES.md (gla.1)).

forward: `chunk_h_kernel` (the sweep, gla.4) or the two-level pass (gla.13: `chunk_segment_sweep_kernel`, the
state pass, and the fix-up inside `chunk_o_kernel`), `chunk_a_kernel` (A of the chunks that are not direct,
gla.12), `chunk_o_kernel` (gla.5). backward: `chunk_dh_kernel` (gla.7) or its two-level pass (the fix-up inside
`chunk_dv_kernel`), `chunk_dv_kernel` (gla.8), `chunk_dqk_intra_kernel` and
`chunk_dqkg_kernel` (gla.9, gla.10). Each kernel's docstring says what it does; NOTES.md, "How the kernels split
the work", why so.

Matrix products take the inputs' dtype where the reference rounds to it (bfloat16 tensor cores),
and float32 (`F32_DOT`: "ieee" for float32 inputs, tf32 otherwise) where the reference keeps
float32. Exponentials use exp2 of the exponent times log2(e).
"""

import triton
import triton.language as tl

from ..launch import given
from ..tl_chunked import (BC, DIRECT_RANGE, RHO, SUB_CHUNK, block_configs, chunk_state_pass_kernel,  # noqa: F401
                          load_row, load_tile, prune_blocks, segment_prologue,
                          sequence_rows, slot_rows, sweep_chunk, sweep_prologue)
from ..tl_helpers import dot_f32_right, exp_e
from .fixup_kernels import fixed_slot_state, store_segment_row


def _sweep_configs():
    """(BK, BV, warps, stages) of the state sweeps: the state's key rows are independent in (gla.4) and (gla.7), so a
    key block is a grid axis, and smaller blocks give more programs for the sequential sweep. The first (the
    interpreter's, and the GPU's with autotuning off) was within 3 % of the fastest for both sweeps at B8 T4096 and
    B1 T65536, K = V = 64, bf16, on an H200; float32 keys start at the fourth (`_prune_sweep`)."""
    return [triton.Config({"BK": bk, "BV": bv}, num_warps=w, num_stages=st)
            for bk, bv, w, st in ((32, 64, 4, 1), (32, 64, 4, 2), (16, 64, 4, 3), (64, 32, 4, 2), (64, 64, 8, 2),
                                  (32, 32, 4, 2))]


def _prune_sweep(dim: str, key_dim: str | None = None):
    """Blocks no wider than the key and value widths (as powers of two ≥ 16); float32 keys only in key blocks of 64
    (or all of a narrower K): 32-wide ones exceeded the float32 GPU tests' error budget (NOTES.md, "Float32")."""
    def prune(configs, named_args, **_):
        keys = named_args[key_dim] if key_dim else named_args["k" if "k" in named_args else "q"]
        K = max(16, triton.next_power_of_2(keys.shape[-1]))
        V = max(16, triton.next_power_of_2(named_args[dim].shape[-1]))
        kept = [c for c in configs if c.kwargs["BK"] <= K and c.kwargs["BV"] <= V]
        if str(keys.dtype) == "float32":
            kept = [c for c in kept if c.kwargs["BK"] >= min(64, K)]
        return kept or [min(configs, key=lambda c: c.kwargs["BK"] * c.kwargs["BV"])]
    return prune


@triton.jit
def _key_block_sweep_prologue(cu_seqlens, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                              BK: tl.constexpr, BV: tl.constexpr):
    """`sweep_prologue` for a [BK, BV] block of the state at key block program_id(2)."""
    i_nh, i_h, first_slot, n_chunks, o_k, o_v, m_k, m_v, m_h, p_state = sweep_prologue(cu_seqlens, H, K, V, BT,
                                                                                        BK, BV)
    o_k = tl.program_id(2) * BK + o_k
    m_k = o_k < K
    return (i_nh, i_h, first_slot, n_chunks, o_k, o_v, m_k, m_v, m_k[:, None] & m_v[None, :],
            o_k[:, None] * V + o_v[None, :])


@triton.jit
def _half_rows(start, end, j: tl.constexpr, BT: tl.constexpr):
    """Rows of half j (0 or 1) of the chunk at `start` and their mask, as a tile of max(BT/2, 16) rows
    (tl.dot reduces over at least 16): BT/2 rows, then, for BT = 16, 8 masked ones."""
    HALF: tl.constexpr = BT // 2
    ROWS: tl.constexpr = HALF if HALF >= BC else BC
    o_r = tl.arange(0, ROWS)
    rows = start + j * HALF + o_r
    return rows, (o_r < HALF) & (rows < end)


@triton.jit
def _chunk_product(x0, y0, x1, y1, F32_DOT: tl.constexpr):
    """x0ᵀ y0 + x1ᵀ y1 ([BK, BV], float32): one chunk's update of a state sweep, accumulated from zero.

    Written as `state * decay + tl.dot(xᵀ, y)`, Triton's combine pass turns the update into
    `tl.dot(xᵀ, y, acc=state * decay)` (it folds `add(dot(a, b, 0), c)`), so on the GPU every state
    element becomes one FMA chain T rows long, each step rounding at the state's magnitude: ≈ 0.15·ε·√T
    RMS-relative, ~3× the reference's (NOTES.md, "Accumulation order of the state sweeps"). Chaining
    the chunk's two halves makes the outer product's accumulator non-zero, which that pattern cannot
    match; the state then takes one rounded addition per chunk."""
    return tl.dot(tl.trans(x1), y1, acc=tl.dot(tl.trans(x0), y0, input_precision=F32_DOT),
                  input_precision=F32_DOT)


@triton.jit
def _sweep_loads(x, y, gk, start, end, i_h, o_k, m_k, o_v, m_v, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                 BT: tl.constexpr, USE_GK: tl.constexpr):
    """One chunk's tiles for a state sweep, in its two halves (`_half_rows`), as stored: x and the log-decay a
    [rows, BK], y [rows, BV]; zeros past the chunk's end, and everywhere for start = end (the load after a
    sweep's last chunk, which reads nothing). Without a gate a = 0. Nothing here uses the loaded values (not
    even a conversion), so a load issued for the next chunk is waited on only where that chunk's step uses it."""
    rows0, m_t0 = _half_rows(start, end, 0, BT)
    rows1, m_t1 = _half_rows(start, end, 1, BT)
    m_k0 = m_t0[:, None] & m_k[None, :]
    m_k1 = m_t1[:, None] & m_k[None, :]
    p_k0 = (rows0[:, None] * H + i_h) * K + o_k[None, :]
    p_k1 = (rows1[:, None] * H + i_h) * K + o_k[None, :]
    b_x0 = tl.load(x + p_k0, mask=m_k0, other=0.0)
    b_x1 = tl.load(x + p_k1, mask=m_k1, other=0.0)
    b_y0 = tl.load(y + (rows0[:, None] * H + i_h) * V + o_v[None, :], mask=m_t0[:, None] & m_v[None, :], other=0.0)
    b_y1 = tl.load(y + (rows1[:, None] * H + i_h) * V + o_v[None, :], mask=m_t1[:, None] & m_v[None, :], other=0.0)
    if USE_GK:
        b_a0 = tl.load(gk + p_k0, mask=m_k0, other=0.0)
        b_a1 = tl.load(gk + p_k1, mask=m_k1, other=0.0)
    else:
        b_a0 = tl.zeros(b_x0.shape, tl.float32)
        b_a1 = tl.zeros(b_x1.shape, tl.float32)
    return b_x0, b_y0, b_a0, b_x1, b_y1, b_a1


@triton.jit
def _half_b(b_a0, b_a1, BT: tl.constexpr):
    """(gla.3) b of a chunk's two halves from their log-decays ([rows, BK] each, as loaded), and b_L, b at its last
    row ([BK]): the prefix sums of half 0, then those of half 1 continued from half 0's total. Rows past the
    chunk's end hold a = 0, so b stays at b_L there.

    A 16-bit gate's sums are products with matrices of ones (lower triangular; all ones for half 0's total) on
    the tensor cores: each product of 1 and a 16-bit value is exact and the sums are float32, where a scan over
    the rows of a tile that spans the warps costs shuffles within each warp and shared memory between them
    (NOTES.md, "Where a sweep step's instructions go"). A float32 gate (a scalar gate folded in, or float32
    inputs) is split, a = a_hi + a_lo with a_hi = a rounded to bfloat16: the a_hi by the same products (exact
    sums while the partial sums and the smallest a_hi span at most float32's 24 bits), the a_lo (|a_lo| ≤
    2⁻⁹ |a|) by scans, and b their sum, rounded once: where the scan of a itself, two halves added, was off by
    several ulps of |b| (NOTES.md, "Precision")."""
    HALF: tl.constexpr = BT // 2
    ROWS: tl.constexpr = HALF if HALF >= BC else BC
    o_r = tl.arange(0, ROWS)
    last = (o_r == ROWS - 1)[:, None]
    # ones by a select: a bool cast to bfloat16 reads 0 in Triton's interpreter (3.7.1 and 3.9.0)
    if b_a0.dtype == tl.float32:
        b_hi0, b_hi1 = b_a0.to(tl.bfloat16), b_a1.to(tl.bfloat16)
    else:
        b_hi0, b_hi1 = b_a0, b_a1
    tri = tl.where(o_r[:, None] >= o_r[None, :], 1.0, 0.0).to(b_hi0.dtype)
    b_b0 = tl.dot(tri, b_hi0, out_dtype=tl.float32)
    b_b1 = tl.dot(tri, b_hi1, acc=tl.dot(tl.full((ROWS, ROWS), 1.0, b_hi0.dtype), b_hi0, out_dtype=tl.float32),
                  out_dtype=tl.float32)
    if b_a0.dtype == tl.float32:
        b_lo0 = tl.cumsum(b_a0 - b_hi0.to(tl.float32), axis=0)
        # b_hi + b_lo, written as b_hi − (0 − b_lo): an add of a product from zero would be folded into its
        # accumulator by Triton's combine pass (`_chunk_product`), the hi sums then no longer exact
        b_b0 = b_b0 - (0.0 - b_lo0)
        b_b1 += tl.cumsum(b_a1 - b_hi1.to(tl.float32), axis=0) + tl.sum(tl.where(last, b_lo0, 0.0), axis=0)[None, :]
    return b_b0, b_b1, tl.sum(tl.where(last, b_b1, 0.0), axis=0)


@triton.jit
def _chunk_b(gk, rows, m_t, i_h, o_k, m_k, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr,
             USE_GK: tl.constexpr):
    """(gla.3) b of a whole chunk ([BT, BK] float32) from the log-decays of rows `rows`, formed where it is read
    (B_LOCAL): a 16-bit gate's prefix sums as the product with the lower-triangular matrix of ones (exact
    products, float32 sums, as in `_half_b`), a float32 gate's by a scan; zeros without a gate. Rows past the
    chunk's end load a = 0, so b stays at b_L there."""
    if USE_GK:
        b_a = tl.load(gk + (rows[:, None] * H + i_h) * K + o_k[None, :], mask=m_t[:, None] & m_k[None, :], other=0.0)
        if b_a.dtype == tl.float32:
            b_b = tl.cumsum(b_a, axis=0)
        else:
            o_t = tl.arange(0, BT)
            tri = tl.where(o_t[:, None] >= o_t[None, :], 1.0, 0.0).to(b_a.dtype)  # not a bool cast: see `_half_b`
            b_b = tl.dot(tri, b_a, out_dtype=tl.float32)
    else:
        b_b = tl.zeros([BT, o_k.shape[0]], tl.float32)
    return b_b


@triton.jit
def _sweep(x, y, gk, b, dec, states, b_h, bos, eos, first_slot, c_lo, c_hi, i_h, o_k, m_k, o_v, m_v, m_h, p_state,
           scale, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, REVERSE: tl.constexpr,
           USE_GK: tl.constexpr, F32_DOT: tl.constexpr, B_LOCAL: tl.constexpr, STORE_D: tl.constexpr):
    """The state sweep over chunks c_lo … c_hi − 1 of the sequence at rows [bos, eos), from state b_h:
    (gla.4) h ← exp(b_L) ⊙ h + k̂ᵀ v, k̂ = k ⊙ exp(b_L − b) (x, y = k, v), or with REVERSE, last chunk first,
    (gla.7) dH ← exp(b_L) ⊙ dH + q̄ᵀ do, q̄ = scale · q ⊙ exp(b) (x, y = q, do). Each chunk's state is stored
    before its update (hs at chunk starts; dH at chunk ends); b (gla.3), formed here from the log-decays, is
    stored by the programs of the first V block: every row ([TT, H, K]), or with B_LOCAL only b_L, by chunk slot
    ([NS, H, K]; the readers form b from the gate themselves). With STORE_D the same programs store, by chunk slot
    in `dec` [NS, H, K], Σ b_L over the chunks swept before this one (from c_lo; from c_hi with REVERSE): the
    decay D_c at which the entering state reaches the chunk (gla.13). Returns the state and Σ b_L over the chunks
    ([BK]).

    The next chunk's tiles are loaded at the top of each step, before this chunk's work: the loop carries
    them, so their latency overlaps the step instead of opening it (only the state is a chain)."""
    write_b = tl.program_id(0) == 0
    n = c_hi - c_lo
    first = bos + (c_hi - 1 if REVERSE else c_lo) * BT
    nx0, ny0, na0, nx1, ny1, na1 = _sweep_loads(x, y, gk, first, tl.where(n > 0, tl.minimum(first + BT, eos), first),
                                                i_h, o_k, m_k, o_v, m_v, H, K, V, BT, USE_GK)
    b_d = tl.zeros(o_k.shape, tl.float32)
    for cc in range(0, n):
        c = c_hi - 1 - cc if REVERSE else c_lo + cc
        start = bos + c * BT
        end = tl.minimum(start + BT, eos)
        b_x0, b_y0, b_a0, b_x1, b_y1, b_a1 = nx0, ny0, na0, nx1, ny1, na1
        n_start = start - BT if REVERSE else start + BT
        nx0, ny0, na0, nx1, ny1, na1 = _sweep_loads(
            x, y, gk, n_start, tl.where(cc + 1 < n, tl.minimum(n_start + BT, eos), n_start), i_h, o_k, m_k, o_v, m_v,
            H, K, V, BT, USE_GK)
        tl.store(states + ((first_slot + c) * H + i_h) * K * V + p_state, b_h, mask=m_h)
        b_b0, b_b1, b_bL = _half_b(b_a0, b_a1, BT)
        if B_LOCAL:
            tl.store(b + ((first_slot + c) * H + i_h) * K + o_k, b_bL, mask=m_k & write_b)
        else:
            rows0, m_t0 = _half_rows(start, end, 0, BT)
            rows1, m_t1 = _half_rows(start, end, 1, BT)
            m_b = m_k[None, :] & write_b
            tl.store(b + (rows0[:, None] * H + i_h) * K + o_k[None, :], b_b0, mask=m_t0[:, None] & m_b)
            tl.store(b + (rows1[:, None] * H + i_h) * K + o_k[None, :], b_b1, mask=m_t1[:, None] & m_b)
        if STORE_D:
            tl.store(dec + ((first_slot + c) * H + i_h) * K + o_k, b_d, mask=m_k & write_b)
        if REVERSE:
            b_x0 = b_x0.to(tl.float32) * exp_e(b_b0) * scale
            b_x1 = b_x1.to(tl.float32) * exp_e(b_b1) * scale
        else:
            b_x0 = b_x0.to(tl.float32) * exp_e(b_bL[None, :] - b_b0)  # past the end: x = 0
            b_x1 = b_x1.to(tl.float32) * exp_e(b_bL[None, :] - b_b1)
        b_h = b_h * exp_e(b_bL)[:, None] + _chunk_product(b_x0.to(b_y0.dtype), b_y0, b_x1.to(b_y1.dtype), b_y1,
                                                          F32_DOT)
        b_d += b_bL
    return b_h, b_d


@triton.autotune(configs=_sweep_configs(), key=["H", "K", "V", "BT"],
                 prune_configs_by={"early_config_prune": _prune_sweep("v")})
@triton.heuristics({"USE_GK": given("gk")})
@triton.jit
def chunk_h_kernel(k, v, gk, h0, cu_seqlens,  # inputs
                   ht, hs, b,  # outputs: final states [N, H, K, V]; states at chunk starts [NS, H, K, V]; b [TT, H, K]
                   # or with B_LOCAL b_L [NS, H, K]
                   H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                   BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr, B_LOCAL: tl.constexpr,
                   USE_GK: tl.constexpr):
    """(gla.4) h ← exp(b_L) ⊙ h + k̂ᵀ v over the chunks of one sequence, and b (gla.3) of every chunk, or b_L
    (`_sweep`)."""
    i_nh, i_h, first_slot, n_chunks, o_k, o_v, m_k, m_v, m_h, p_state = _key_block_sweep_prologue(
        cu_seqlens, H, K, V, BT, BK, BV)
    bos, eos = sequence_rows(cu_seqlens, i_nh // H)
    b_h = tl.load(h0 + i_nh * K * V + p_state, mask=m_h, other=0.0)  # [BK, BV]
    b_h, _ = _sweep(k, v, gk, b, None, hs, b_h, bos, eos, first_slot, 0, n_chunks, i_h, o_k, m_k, o_v, m_v, m_h,
                    p_state, 1.0, H, K, V, BT, False, USE_GK, F32_DOT, B_LOCAL, False)
    tl.store(ht + i_nh * K * V + p_state, b_h, mask=m_h)


@triton.jit
def _sub_chunk(q, k, b, i_c, start, end, i_h, o_k, m_k, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr):
    """Sub-chunk i_c's rows and tiles (q, k, b: [BC, BK]), the chunk's (q, k, b: [BT, BK]), and b at
    the sub-chunk's first row n, its last row m and the chunk's last row L ([BK]).

    Rows past the chunk's end read k = q = 0 and b = b_L (as if their gates were 0), so every exponent
    below keeps its sign there too.
    """
    rows_i = start + i_c * BC + tl.arange(0, BC)
    m_i = rows_i < end
    rows = start + tl.arange(0, BT)
    m_t = rows < end
    b_bL = load_row(b, end - 1, i_h, o_k, m_k, H, K)
    b_qi = load_tile(q, rows_i, m_i, i_h, o_k, m_k, H, K)
    b_ki = load_tile(k, rows_i, m_i, i_h, o_k, m_k, H, K)
    b_bi = tl.where(m_i[:, None], load_tile(b, rows_i, m_i, i_h, o_k, m_k, H, K), b_bL[None, :])
    b_q = load_tile(q, rows, m_t, i_h, o_k, m_k, H, K)
    b_k = load_tile(k, rows, m_t, i_h, o_k, m_k, H, K)
    b_b = tl.where(m_t[:, None], load_tile(b, rows, m_t, i_h, o_k, m_k, H, K), b_bL[None, :])
    b_bn = load_row(b, tl.minimum(start + i_c * BC, end - 1), i_h, o_k, m_k, H, K)
    b_bm = load_row(b, tl.minimum(start + i_c * BC + BC, end) - 1, i_h, o_k, m_k, H, K)
    return rows_i, m_i, b_qi, b_ki, b_bi, b_q, b_k, b_b, b_bn, b_bm, b_bL


@triton.jit
def _key_row(x, b, row, end, b_bL, i_h, o_k, m_k, H: tl.constexpr, K: tl.constexpr):
    """Row `row` of x and of b as float32 [BK]; past the chunk's end x = 0 and b = b_L."""
    m_r = row < end
    b_x = tl.load(x + (row * H + i_h) * K + o_k, mask=m_k & m_r, other=0.0).to(tl.float32)
    b_b = tl.where(m_r, tl.load(b + (row * H + i_h) * K + o_k, mask=m_k & m_r, other=0.0), b_bL)
    return b_x, b_b


@triton.jit
def _chunk_direct(b, start, end, i_h, H: tl.constexpr, K: tl.constexpr, BK: tl.constexpr):
    """(gla.12) Whether the chunk's log-decays span at most RHO: max over all K key columns of
    b_start − b_{end−1}. Every kernel that asks decides the same way (the same two rows of b)."""
    span = tl.max(load_row(b, start, i_h, tl.arange(0, BK), tl.arange(0, BK) < K, H, K)
                  - load_row(b, end - 1, i_h, tl.arange(0, BK), tl.arange(0, BK) < K, H, K), axis=0)
    for i_k in tl.static_range(1, (K + BK - 1) // BK):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        span = tl.maximum(span, tl.max(load_row(b, start, i_h, o_k, m_k, H, K) - load_row(b, end - 1, i_h, o_k, m_k, H, K),
                                       axis=0))
    return span <= RHO


@triton.jit
def _chunk_factors(b_b, b_b0, m_t):
    """(gla.12) exp(b_r − b_0) ∈ [e^−RHO, 1] and exp(b_0 − b_s) ∈ [1, e^RHO] for the chunk's rows, 0 past its
    end (where b reads 0 and −b_0 could be large)."""
    e_q = tl.where(m_t[:, None], exp_e(tl.where(m_t[:, None], b_b - b_b0[None, :], 0.0)), 0.0)
    e_k = tl.where(m_t[:, None], exp_e(tl.where(m_t[:, None], b_b0[None, :] - b_b, 0.0)), 0.0)
    return e_q, e_k


@triton.jit
def _chunk_A(b_q, b_k, b_b, b_b0, m_t, scale, F32_DOT: tl.constexpr, BT: tl.constexpr):
    """(gla.12) A = scale (q ⊙ exp(b − b_0)) (k ⊙ exp(b_0 − b))ᵀ masked to s ≤ r: a direct chunk's A."""
    e_q, e_k = _chunk_factors(b_b, b_b0, m_t)
    o_t = tl.arange(0, BT)
    b_A = tl.dot(b_q * e_q, tl.trans(b_k * e_k), input_precision=F32_DOT)
    return tl.where(o_t[:, None] >= o_t[None, :], b_A, 0.0) * scale


@triton.jit
def _b_tile(gk, b, rows, m_t, start, end, i_s, i_h, o_k, m_k, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr,
            BK: tl.constexpr, B_LOCAL: tl.constexpr, USE_GK: tl.constexpr):
    """A backward kernel's b (gla.3) of one chunk at key columns o_k ([BT, BK] float32), b_L ([BK]) and whether
    the chunk is direct (gla.12, over all K): from the backward sweep's rows of b (`_chunk_direct`; b_L past the
    chunk's end), or with B_LOCAL formed from the gate (`_chunk_b`) beside the sweep's b_L by slot, deciding as
    `_split_slots` does: max over K of a_start − b_L (b at a chunk's first row is its own log-decay)."""
    if B_LOCAL:
        b_bL = load_row(b, i_s, i_h, o_k, m_k, H, K)
        b_b = _chunk_b(gk, rows, m_t, i_h, o_k, m_k, H, K, BT, USE_GK)
        span = tl.zeros([], tl.float32)  # without a gate b = 0; a max below 0 is direct either way
        if USE_GK:
            for i_k in tl.static_range(0, (K + BK - 1) // BK):
                o_j = i_k * BK + tl.arange(0, BK)
                span = tl.maximum(span, tl.max(load_row(gk, start, i_h, o_j, o_j < K, H, K)
                                               - load_row(b, i_s, i_h, o_j, o_j < K, H, K), axis=0))
        direct = span <= RHO
    else:
        b_bL = load_row(b, end - 1, i_h, o_k, m_k, H, K)
        b_b = tl.where(m_t[:, None], load_tile(b, rows, m_t, i_h, o_k, m_k, H, K), b_bL[None, :])
        direct = _chunk_direct(b, start, end, i_h, H, K, BK)
    return b_b, b_bL, direct


@triton.jit
def _b_first(gk, b, start, i_h, o_k, m_k, H: tl.constexpr, K: tl.constexpr, B_LOCAL: tl.constexpr,
             USE_GK: tl.constexpr):
    """b at the chunk's first row ([BK]): the sweep's, or with B_LOCAL the gate's row (zeros without a gate)."""
    if B_LOCAL:
        if USE_GK:
            b_b0 = load_row(gk, start, i_h, o_k, m_k, H, K)
        else:
            b_b0 = tl.zeros(o_k.shape, tl.float32)
    else:
        b_b0 = load_row(b, start, i_h, o_k, m_k, H, K)
    return b_b0


@triton.jit
def _a_own_column(b_A, j, k, b, row0, end, b_qi, b_bi, b_bL, o_c, o_t, own0, i_h, o_k, m_k, H: tl.constexpr,
                  K: tl.constexpr):
    """b_A with column own0 + j set to Σ_k q_r k_j exp(b_r − b_j) for the sub-chunk's rows r ≥ j (else 0)."""
    b_kj, b_bj = _key_row(k, b, row0 + j, end, b_bL, i_h, o_k, m_k, H, K)
    keep = o_c >= j  # rows r ≥ j
    b_e = exp_e(tl.where(keep[:, None], b_bi - b_bj[None, :], 0.0))
    b_col = tl.where(keep, tl.sum(b_qi * b_kj[None, :] * b_e, axis=1), 0.0)  # [BC]
    return tl.where(o_t[None, :] == own0 + j, b_col[:, None], b_A)


@triton.jit
def _dqk_own_row(b_dq, b_dk, j, q, k, b, row0, end, b_bi, b_bL, b_dA_own, o_c, i_h, o_k, m_k, H: tl.constexpr,
                 K: tl.constexpr):
    """Row j of a sub-chunk's own block: as a key it feeds the queries r > j, as a query the keys s < j."""
    b_kj, b_bj = _key_row(k, b, row0 + j, end, b_bL, i_h, o_k, m_k, H, K)
    b_qj = tl.load(q + ((row0 + j) * H + i_h) * K + o_k, mask=m_k & (row0 + j < end), other=0.0).to(tl.float32)
    below = o_c > j
    b_a = tl.sum(tl.where(o_c[None, :] == j, b_dA_own, 0.0), axis=1)  # dA[r, j] over r
    b_dq += tl.where(below[:, None],
                     b_a[:, None] * b_kj[None, :] * exp_e(tl.where(below[:, None], b_bi - b_bj[None, :], 0.0)), 0.0)
    above = o_c < j
    b_a = tl.sum(tl.where(o_c[:, None] == j, b_dA_own, 0.0), axis=0)  # dA[j, s] over s
    b_dk += tl.where(above[:, None],
                     b_a[:, None] * b_qj[None, :] * exp_e(tl.where(above[:, None], b_bj[None, :] - b_bi, 0.0)), 0.0)
    return b_dq, b_dk


@triton.jit
def _sub_chunk_a(q, k, b, A, i_c, start, end, i_h, scale, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr,
                 BK: tl.constexpr, F32_DOT: tl.constexpr):
    """(gla.5) A[r, s] = scale Σ_k q_r k_s exp(b_r − b_s) for s ≤ r (else 0), the rows of sub-chunk i_c."""
    o_k = tl.arange(0, BK)
    m_k = o_k < K
    o_t = tl.arange(0, BT)
    rows_i, m_i, b_qi, _, b_bi, _, b_k, b_b, b_bn, b_bm, b_bL = _sub_chunk(q, k, b, i_c, start, end, i_h, o_k,
                                                                           m_k, H, K, BT)
    # (gla.6) earlier sub-chunks through the reference row n = the sub-chunk's first row:
    # exp(b_r − b_n) ≤ 1 for r ≥ n and exp(b_n − b_s) ≤ 1 for s < n; later keys are zero.
    # (gla.11) where the sub-chunk's log-decays span at most RHO (b_n − b_m ≤ RHO in every key column),
    # its own keys join the same product: exp(b_n − b_s) ≤ exp(RHO) for n ≤ s ≤ m, and the block is
    # masked to s ≤ r afterwards. Otherwise the own block is built one key row at a time below.
    o_c = tl.arange(0, BC)
    own0 = i_c * BC
    direct = tl.max(b_bn - b_bm, axis=0) <= RHO
    keys = o_t < tl.where(direct, own0 + BC, own0)
    b_qn = b_qi * exp_e(b_bi - b_bn[None, :])  # [BC, BK]
    b_kn = tl.where(keys[:, None], b_k * exp_e(tl.where(keys[:, None], b_bn[None, :] - b_b, 0.0)), 0.0)
    b_A = tl.dot(b_qn, tl.trans(b_kn), input_precision=F32_DOT)  # [BC, BT]
    b_A = tl.where(o_t[None, :] <= (own0 + o_c)[:, None], b_A, 0.0)  # s ≤ r
    if not direct:
        # the own block, one key row j at a time: every kept ratio is exp of a number ≤ 0
        for j in range(0, BC):
            b_A = _a_own_column(b_A, j, k, b, start + own0, end, b_qi, b_bi, b_bL, o_c, o_t, own0, i_h, o_k, m_k,
                                H, K)
    b_A *= scale
    tl.store(A + (rows_i[:, None] * H + i_h) * BT + o_t[None, :], b_A.to(A.dtype.element_ty), mask=m_i[:, None])


SPAN_MARGIN = tl.constexpr(2.0 ** -6)  # (gla.12) A is formed for every chunk whose span is within this (and a
# relative part) of RHO: `_split_slots`


@triton.jit
def _split_slots(b, gk, bounds, NS, i_h, H: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, CB: tl.constexpr,
                 MARGIN: tl.constexpr, B_LOCAL: tl.constexpr, USE_GK: tl.constexpr):
    """(gla.12) Of chunk slots CB·i … CB·i + CB − 1 (i = program_id(0)) at head i_h, which hold a chunk that is
    not direct ([CB] int1): span = max over the K key columns of b_start − b_{end−1}, the expression
    `_chunk_direct` evaluates in the dv and dqkg kernels and chunk_o_kernel from its own b; with MARGIN, also
    those whose span is within 2⁻⁶ + 2⁻¹² |b_{end−1}| of RHO. With B_LOCAL b is the sweep's b_L by slot, and
    b_start = a_start (the prefix sum at a chunk's first row is its own log-decay).

    The forward and the backward form b by different sweeps (gla.3); with log-decays ≤ 0 each is a sum of
    terms of one sign, so the two differ by less than 64 · 2⁻²³ |b_{end−1}| at every row, and a span by
    less than 2⁻¹⁴ |b_{end−1}| + 2⁻²⁰ (NOTES.md, "Where b is formed"). The forward's A taken with MARGIN
    therefore holds every chunk the backward's `_chunk_direct` finds not direct."""
    o_b = tl.program_id(0) * CB + tl.arange(0, CB)
    p_b = bounds + 2 * o_b.to(tl.int64)
    start = tl.load(p_b, mask=o_b < NS, other=0).to(tl.int64)
    end = tl.load(p_b + 1, mask=o_b < NS, other=0).to(tl.int64)
    has_rows = start < end
    o_k = tl.arange(0, BK)
    m_bk = has_rows[:, None] & (o_k < K)[None, :]
    if B_LOCAL:
        if USE_GK:
            b_b0 = tl.load(gk + (start[:, None] * H + i_h) * K + o_k[None, :], mask=m_bk, other=0.0).to(tl.float32)
        else:
            b_b0 = tl.zeros([CB, BK], tl.float32)
        b_bL = tl.load(b + (o_b.to(tl.int64)[:, None] * H + i_h) * K + o_k[None, :], mask=m_bk, other=0.0)
    else:
        b_b0 = tl.load(b + (start[:, None] * H + i_h) * K + o_k[None, :], mask=m_bk, other=0.0)
        b_bL = tl.load(b + ((end - 1)[:, None] * H + i_h) * K + o_k[None, :], mask=m_bk, other=0.0)
    span = tl.max(b_b0 - b_bL, axis=1)  # [CB]
    if MARGIN > 0:
        direct = span <= RHO - (MARGIN + tl.max(tl.abs(b_bL), axis=1) * (2.0 ** -12))
    else:
        direct = span <= RHO
    return has_rows & (direct == 0)


@triton.jit
def _each_split_chunk(q, k, v, do, b, gk, bs, bounds, out0, out1, NS, i_h, scale, H: tl.constexpr, K: tl.constexpr,
                      V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr,
                      CB: tl.constexpr, MARGIN: tl.constexpr, INTRA: tl.constexpr, B_LOCAL: tl.constexpr,
                      USE_GK: tl.constexpr):
    """For each chunk of this program's CB slots that `_split_slots` marks, sub-chunk by sub-chunk: its rows of A
    into out0 (`_sub_chunk_a`), or with INTRA its dq°, dk° into out0, out1 (`_sub_chunk_dqk`). With the usual
    gates nearly every chunk is direct, and the program does nothing after reading two rows of b per chunk (with
    B_LOCAL a row of the gate and b_L). With B_LOCAL a marked chunk's b is formed from the gate (`_chunk_b`) and
    stored in its rows of the scratch bs, which the sub-chunk steps read as they read b."""
    b_split = _split_slots(b, gk, bounds, NS, i_h, H, K, BK, CB, MARGIN, B_LOCAL, USE_GK).to(tl.int32)
    if B_LOCAL:
        b_rows = bs
    else:
        b_rows = b
    if tl.max(b_split, axis=0) != 0:
        for c in range(0, CB):
            if tl.sum(tl.where(tl.arange(0, CB) == c, b_split, 0), axis=0) != 0:
                start, end = slot_rows(bounds, (tl.program_id(0) * CB + c).to(tl.int64))
                if B_LOCAL:
                    rows = start + tl.arange(0, BT)
                    m_t = rows < end
                    o_k = tl.arange(0, BK)
                    m_k = o_k < K
                    b_b = _chunk_b(gk, rows, m_t, i_h, o_k, m_k, H, K, BT, USE_GK)
                    tl.store(bs + (rows[:, None] * H + i_h) * K + o_k[None, :], b_b, mask=m_t[:, None] & m_k[None, :])
                    tl.debug_barrier()  # the rows just stored, read below by every thread of the program
                for i_c in range(0, tl.cdiv(end - start, BC)):
                    if INTRA:
                        _sub_chunk_dqk(q, k, v, do, b_rows, out0, out1, i_c, start, end, i_h, scale, H, K, V, BT, BK,
                                       BV, F32_DOT)
                    else:
                        _sub_chunk_a(q, k, b_rows, out0, i_c, start, end, i_h, scale, H, K, BT, BK, F32_DOT)


@triton.heuristics({"USE_GK": given("gk")})
@triton.jit
def chunk_a_kernel(q, k, gk, b, bounds,  # inputs: b [TT, H, K], or with B_LOCAL the sweep's b_L [NS, H, K]
                   A, bs,  # outputs: [TT, H, BT] the intra-chunk attention, in the inputs' dtype; with B_LOCAL
                   # [TT, H, K] float32 scratch (b of the chunks A is formed for), else unused
                   NS, scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr,
                   BK: tl.constexpr, F32_DOT: tl.constexpr, CB: tl.constexpr, B_LOCAL: tl.constexpr,
                   USE_GK: tl.constexpr):
    """(gla.5) A of the chunks in slots CB·i … CB·i + CB − 1 at one head that are not direct, or nearly
    (`_split_slots` with its margin), one sub-chunk of 16 rows at a time (gla.6, gla.11). Other chunks' rows
    are left unwritten: the o and dv kernels form them (gla.12)."""
    _each_split_chunk(q, k, None, None, b, gk, bs, bounds, A, None, NS, tl.program_id(1), scale, H, K, K, BT, BK,
                      BK, F32_DOT, CB, SPAN_MARGIN, False, B_LOCAL, USE_GK)


@triton.autotune(configs=block_configs("BV") + [triton.Config({"BV": b}, num_warps=4, num_stages=2, maxnreg=128)
                                                 for b in (32, 64)], key=["H", "K", "V", "BT"],
                 prune_configs_by={"early_config_prune": prune_blocks("BV", "v")})
@triton.heuristics({"USE_GK": given("gk"), "FIXUP": given("starts")})
@triton.jit
def chunk_o_kernel(q, k, v, gk, b, hs, A, bounds,  # inputs: b [TT, H, K], or with B_LOCAL the sweep's b_L [NS, H, K]
                   starts, dec, seg,  # with FIXUP (the two-level pass): S_j [N·NSEG, H, K, V], D_c [NS, H, K], [NS]
                   o, hs_out,  # outputs: o [TT, H, V]; with STORE_H the fixed states [NS, H, K, V]
                   scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                   BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr, B_LOCAL: tl.constexpr,
                   STORE_H: tl.constexpr, USE_GK: tl.constexpr, FIXUP: tl.constexpr):
    """(gla.5) o = q̄ h + A v for one chunk: two products of whole-chunk tiles; A from `chunk_a_kernel`,
    or for a direct chunk (gla.12) formed here. With B_LOCAL b is formed here from the gate (`_chunk_b`), and
    whether the chunk is direct decided as `_split_slots` does (without its margin): from the gate's first row,
    b_0 (exactly: the first row of the product with ones), and the sweep's b_L. With FIXUP hs holds the segment
    sweep's local states and the chunk's state is fixed here (gla.13, `fixup_kernels.fixed_state`), rounded to v's
    dtype, and with STORE_H stored so (for the backward): the fix-up kernel's work, without its round trip."""
    i_v, i_s, i_h = tl.program_id(0), tl.program_id(1).to(tl.int64), tl.program_id(2)
    start, end = slot_rows(bounds, i_s)
    if start >= end:
        return
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    o_t = tl.arange(0, BT)
    rows = start + o_t
    m_t = rows < end
    b_v = tl.load(v + (rows[:, None] * H + i_h) * V + o_v[None, :], mask=m_t[:, None] & m_v[None, :], other=0.0)
    dtype = b_v.dtype
    if FIXUP:  # stored rounded as the product reads it
        b_h = fixed_slot_state(hs, starts, dec, seg, None, i_s, i_h, o_k, m_k, o_v, m_v, H, K, V, False).to(dtype)
        if STORE_H:
            tl.store(hs_out + (i_s * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :], b_h,
                     mask=m_k[:, None] & m_v[None, :])
    else:
        b_h = tl.load(hs + (i_s * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :],
                      mask=m_k[:, None] & m_v[None, :], other=0.0).to(dtype)  # [BK, BV]
    b_q = load_tile(q, rows, m_t, i_h, o_k, m_k, H, K)
    if B_LOCAL:
        b_b = _chunk_b(gk, rows, m_t, i_h, o_k, m_k, H, K, BT, USE_GK)
        if USE_GK:
            b_b0 = load_row(gk, start, i_h, o_k, m_k, H, K)
        else:
            b_b0 = tl.zeros([BK], tl.float32)
        direct = tl.max(b_b0 - load_row(b, i_s, i_h, o_k, m_k, H, K), axis=0) <= RHO
    else:
        b_b = load_tile(b, rows, m_t, i_h, o_k, m_k, H, K)
        b_b0 = load_row(b, start, i_h, o_k, m_k, H, K)
        direct = _chunk_direct(b, start, end, i_h, H, K, BK)
    b_qbar = (b_q * exp_e(b_b) * scale).to(dtype)  # rows past the end: q = 0
    if direct:
        b_A = _chunk_A(b_q, load_tile(k, rows, m_t, i_h, o_k, m_k, H, K), b_b, b_b0, m_t, scale, F32_DOT,
                       BT).to(dtype)  # rounded as chunk_a_kernel stores it
    else:
        b_A = tl.load(A + (rows[:, None] * H + i_h) * BT + o_t[None, :], mask=m_t[:, None] & m_t[None, :],
                      other=0.0)
    b_o = tl.dot(b_qbar, b_h, input_precision=F32_DOT) + tl.dot(b_A, b_v, input_precision=F32_DOT)  # [BT, BV]
    tl.store(o + (rows[:, None] * H + i_h) * V + o_v[None, :], b_o.to(o.dtype.element_ty),
             mask=m_t[:, None] & m_v[None, :])


@triton.autotune(configs=_sweep_configs(), key=["H", "K", "V", "BT"],
                 prune_configs_by={"early_config_prune": _prune_sweep("do")})
@triton.heuristics({"USE_GK": given("gk")})
@triton.jit
def chunk_dh_kernel(q, do, gk, dht, cu_seqlens,  # inputs
                    dh0, dhs, b,  # outputs: dS_0 [N, H, K, V]; dH at each chunk's end [NS, H, K, V]; b [TT, H, K]
                    # or with B_LOCAL b_L [NS, H, K]
                    scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                    BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr, B_LOCAL: tl.constexpr,
                    USE_GK: tl.constexpr):
    """(gla.7) dH ← exp(b_L) ⊙ dH + q̄ᵀ do over the chunks of one sequence, last chunk first, and b (gla.3) of
    every chunk, or b_L (`_sweep`)."""
    i_nh, i_h, first_slot, n_chunks, o_k, o_v, m_k, m_v, m_h, p_state = _key_block_sweep_prologue(
        cu_seqlens, H, K, V, BT, BK, BV)
    bos, eos = sequence_rows(cu_seqlens, i_nh // H)
    b_dh = tl.load(dht + i_nh * K * V + p_state, mask=m_h, other=0.0)  # [BK, BV]
    b_dh, _ = _sweep(q, do, gk, b, None, dhs, b_dh, bos, eos, first_slot, 0, n_chunks, i_h, o_k, m_k, o_v, m_v,
                     m_h, p_state, scale, H, K, V, BT, True, USE_GK, F32_DOT, B_LOCAL, False)
    tl.store(dh0 + i_nh * K * V + p_state, b_dh, mask=m_h)


@triton.autotune(configs=_sweep_configs(), key=["H", "K", "V", "BT", "NSEG", "REVERSE"],
                 prune_configs_by={"early_config_prune": _prune_sweep("y", "x")})
@triton.heuristics({"USE_GK": given("gk")})
@triton.jit
def chunk_segment_sweep_kernel(x, y, gk, cu_seqlens,  # inputs: (k, v) forward, (q, do) with REVERSE
                               states, ends, decay, b, dec, seg,  # outputs: [NS, H, K, V]; [N·NSEG, H, K, V];
                               # [N·NSEG, H, K]; b [TT, H, K] or with B_LOCAL b_L [NS, H, K]; [NS, H, K]; [NS] int32
                               scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                               BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, NSEG: tl.constexpr,
                               REVERSE: tl.constexpr, F32_DOT: tl.constexpr, B_LOCAL: tl.constexpr,
                               USE_GK: tl.constexpr):
    """(gla.13) The sweep of (gla.4) — or with REVERSE of (gla.7), last chunk first — over one segment of a
    sequence, from a zero state (`_sweep`): the segment's local states at every chunk (hs at chunk starts, dH
    at chunk ends), its end state, its total log-decay Λ = Σ b_L over its chunks (per key), b (gla.3) or b_L, and
    for the fix-up (`fixup_kernels.fixed_state`) each chunk's decay from the segment's start, D_c (`_sweep`), and
    the segment's row of the [N·NSEG] buffers, by chunk slot."""
    (i_n, i_h, i_row, first_slot, c0, c1, o_k, o_v, m_k, m_v, m_h, p_state) = segment_prologue(
        cu_seqlens, H, K, V, BT, BK, BV, NSEG)
    bos, eos = sequence_rows(cu_seqlens, i_n)
    if (tl.program_id(0) == 0) & (tl.program_id(2) == 0) & (i_h == 0):
        store_segment_row(seg, first_slot, c0, c1, i_row // H)
    b_h, b_d = _sweep(x, y, gk, b, dec, states, tl.zeros([BK, BV], tl.float32), bos, eos, first_slot, c0, c1, i_h,
                      o_k, m_k, o_v, m_v, m_h, p_state, scale, H, K, V, BT, REVERSE, USE_GK, F32_DOT, B_LOCAL, True)
    tl.store(ends + i_row * K * V + p_state, b_h, mask=m_h)
    if tl.program_id(0) == 0:
        tl.store(decay + i_row * K + o_k, b_d, mask=m_k)


@triton.autotune(configs=block_configs("BV") + [triton.Config({"BV": b}, num_warps=4, num_stages=2, maxnreg=r)
                                                 for b in (32, 64) for r in (128, 168)], key=["H", "K", "V", "BT"],
                 prune_configs_by={"early_config_prune": prune_blocks("BV", "do")})
@triton.heuristics({"USE_GK": given("gk"), "FIXUP": given("starts")})
@triton.jit
def chunk_dv_kernel(q, k, do, gk, b, A, dhs, bounds,  # inputs: b [TT, H, K], or with B_LOCAL b_L [NS, H, K]
                    starts, dec, seg,  # with FIXUP (the two-level pass): dH entering [N·NSEG, H, K, V], D_c, rows
                    dv, dhs_out,  # outputs: dv [TT, H, V]; with FIXUP the fixed dH (dhs itself, in place)
                    scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                    BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr, B_LOCAL: tl.constexpr,
                    USE_GK: tl.constexpr, FIXUP: tl.constexpr):
    """(gla.8) dv = Aᵀ do + k̂ dH, with dH the gradient of the state at the chunk's end; a direct chunk's
    A (gla.12) formed here as the o kernel formed it; b from the gate with B_LOCAL (`_b_tile`). With FIXUP dhs
    holds the segment sweep's local dH, fixed here (gla.13, `fixup_kernels.fixed_state`) and stored back for
    `chunk_dqkg_kernel`: the fix-up kernel's work without its second read."""
    i_v, i_s, i_h = tl.program_id(0), tl.program_id(1).to(tl.int64), tl.program_id(2)
    start, end = slot_rows(bounds, i_s)
    if start >= end:
        return
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    o_t = tl.arange(0, BT)
    rows = start + o_t
    m_t = rows < end
    if FIXUP:  # first: the entering state's tile is dead before the chunk's tiles arrive
        b_dh = fixed_slot_state(dhs, starts, dec, seg, dhs_out, i_s, i_h, o_k, m_k, o_v, m_v, H, K, V, True)
    b_do = tl.load(do + (rows[:, None] * H + i_h) * V + o_v[None, :], mask=m_t[:, None] & m_v[None, :], other=0.0)
    dtype = b_do.dtype
    b_k = load_tile(k, rows, m_t, i_h, o_k, m_k, H, K)
    b_b, b_bL, direct = _b_tile(gk, b, rows, m_t, start, end, i_s, i_h, o_k, m_k, H, K, BT, BK, B_LOCAL, USE_GK)
    b_khat = (b_k * exp_e(b_bL[None, :] - b_b)).to(dtype)  # as the forward rounded it; k̂ dH before A is formed
    if not FIXUP:
        b_dh = tl.load(dhs + (i_s * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :],
                       mask=m_k[:, None] & m_v[None, :], other=0.0)  # [BK, BV]
    # dH in two bfloat16 parts with bfloat16 inputs (`dot_f32_right`; sm_90, the target's configs: 233 → 176
    # registers at 4 warps, 160 → 128 at 8)
    b_dv = dot_f32_right(b_khat, b_dh, F32_DOT)
    if direct:
        b_A = _chunk_A(load_tile(q, rows, m_t, i_h, o_k, m_k, H, K), b_k, b_b,
                       _b_first(gk, b, start, i_h, o_k, m_k, H, K, B_LOCAL, USE_GK), m_t, scale, F32_DOT, BT).to(dtype)
    else:
        b_A = tl.load(A + (rows[:, None] * H + i_h) * BT + o_t[None, :], mask=m_t[:, None] & m_t[None, :],
                      other=0.0)
    b_dv += tl.dot(tl.trans(b_A.to(dtype)), b_do, input_precision=F32_DOT)
    tl.store(dv + (rows[:, None] * H + i_h) * V + o_v[None, :], b_dv.to(dv.dtype.element_ty),
             mask=m_t[:, None] & m_v[None, :])


@triton.jit
def _sub_chunk_dqk(q, k, v, do, b, dq_s, dk_s, i_c, start, end, i_h, scale, H: tl.constexpr, K: tl.constexpr,
                   V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr):
    """(gla.9) scale Σ_{s < r} dA[r, s] k_s ⊙ exp(b_r − b_s) for the queries of sub-chunk i_c, and
    scale Σ_{r > s} dA[r, s] q_r ⊙ exp(b_r − b_s) for its keys: dq°, dk° of (gla.10), no diagonal."""
    o_k = tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    o_t = tl.arange(0, BT)
    rows = start + o_t
    m_t = rows < end
    rows_i, m_i, b_qi, b_ki, b_bi, b_q, b_k, b_b, b_bn, b_bm, b_bL = _sub_chunk(q, k, b, i_c, start, end, i_h, o_k,
                                                                                m_k, H, K, BT)
    m_tv = m_t[:, None] & m_v[None, :]
    m_iv = m_i[:, None] & m_v[None, :]
    b_v = tl.load(v + (rows[:, None] * H + i_h) * V + o_v[None, :], mask=m_tv, other=0.0)
    b_do = tl.load(do + (rows[:, None] * H + i_h) * V + o_v[None, :], mask=m_tv, other=0.0)
    b_vi = tl.load(v + (rows_i[:, None] * H + i_h) * V + o_v[None, :], mask=m_iv, other=0.0)
    b_doi = tl.load(do + (rows_i[:, None] * H + i_h) * V + o_v[None, :], mask=m_iv, other=0.0)
    # dA[r, s] = do_r · v_s: this sub-chunk's rows and its columns (its own block below, where needed)
    b_dA_rows = tl.dot(b_doi, tl.trans(b_v), input_precision=F32_DOT)  # [BC, BT]
    b_dA_cols = tl.dot(b_do, tl.trans(b_vi), input_precision=F32_DOT)  # [BT, BC]
    # (gla.6) queries of this sub-chunk against earlier keys, through its first row n; (gla.11) with a
    # span of at most RHO, its own keys s < r too (exp(b_n − b_s) ≤ exp(RHO))
    own0 = i_c * BC
    o_c = tl.arange(0, BC)
    direct = tl.max(b_bn - b_bm, axis=0) <= RHO
    keys = o_t < tl.where(direct, own0 + BC, own0)
    b_kn = tl.where(keys[:, None], b_k * exp_e(tl.where(keys[:, None], b_bn[None, :] - b_b, 0.0)), 0.0)
    strict_rows = o_t[None, :] < (own0 + o_c)[:, None]  # s < r
    b_dq = exp_e(b_bi - b_bn[None, :]) * tl.dot(tl.where(strict_rows, b_dA_rows, 0.0), b_kn, input_precision=F32_DOT)
    # keys of this sub-chunk against later queries, through its last row m; (gla.11) its own queries
    # r > s too (exp(b_r − b_m) ≤ exp(RHO) for n ≤ r ≤ m)
    queries = o_t >= tl.where(direct, own0, own0 + BC)
    b_qm = tl.where(queries[:, None], b_q * exp_e(tl.where(queries[:, None], b_b - b_bm[None, :], 0.0)), 0.0)
    strict_cols = o_t[:, None] > (own0 + o_c)[None, :]  # r > s
    b_dk = exp_e(b_bm[None, :] - b_bi) * tl.dot(tl.trans(tl.where(strict_cols, b_dA_cols, 0.0)), b_qm,
                                               input_precision=F32_DOT)
    if not direct:
        # the own block strictly below its diagonal, one row j at a time (every kept exponent ≤ 0):
        # as a key, row j feeds the queries r > j; as a query, it feeds the keys s < j
        b_dA_own = tl.dot(b_doi, tl.trans(b_vi), input_precision=F32_DOT)  # [BC, BC]
        for j in range(0, BC):
            b_dq, b_dk = _dqk_own_row(b_dq, b_dk, j, q, k, b, start + own0, end, b_bi, b_bL, b_dA_own, o_c, i_h,
                                      o_k, m_k, H, K)
    p_i = (rows_i[:, None] * H + i_h) * K + o_k[None, :]
    m_ik = m_i[:, None] & m_k[None, :]
    tl.store(dq_s + p_i, b_dq * scale, mask=m_ik)
    tl.store(dk_s + p_i, b_dk * scale, mask=m_ik)


@triton.heuristics({"USE_GK": given("gk")})
@triton.jit
def chunk_dqk_intra_kernel(q, k, v, do, gk, b, bounds,  # inputs: b [TT, H, K], or with B_LOCAL b_L [NS, H, K]
                           dq_s, dk_s, bs,  # outputs [TT, H, K] float32: the strict intra-chunk parts of (gla.9);
                           # with B_LOCAL scratch (b of the chunks they are formed for), else unused
                           NS, scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                           BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr,
                           CB: tl.constexpr, B_LOCAL: tl.constexpr, USE_GK: tl.constexpr):
    """dq°, dk° of (gla.10) of the chunks in slots CB·i … CB·i + CB − 1 at one head that are not direct
    (`_split_slots`, deciding as `_b_tile` in chunk_dqkg_kernel), one sub-chunk of 16 rows at a time; a
    direct chunk's are formed by chunk_dqkg_kernel."""
    _each_split_chunk(q, k, v, do, b, gk, bs, bounds, dq_s, dk_s, NS, tl.program_id(1), scale, H, K, V, BT, BK,
                      BV, F32_DOT, CB, 0.0, True, B_LOCAL, USE_GK)


@triton.autotune(configs=block_configs("BK", (16, 32, 64)), key=["H", "K", "V", "BT"],
                 prune_configs_by={"early_config_prune": prune_blocks("BK", "q")})
@triton.heuristics({"USE_GK": given("gk")})
@triton.jit
def chunk_dqkg_kernel(q, k, v, do, gk, b, hs, dhs, dq_s, dk_s, bounds,  # inputs: b as chunk_dv_kernel's
                      dq, dk, dgk,  # outputs [TT, H, K]; dgk in the log-decay's dtype (float32 without a gate)
                      scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                      BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr, B_LOCAL: tl.constexpr,
                      USE_GK: tl.constexpr):
    """(gla.9) dq, dk and (gla.10) the log-decay gradient of one chunk, for one block of keys, from the
    strict intra-chunk parts dq°, dk° (`chunk_dqk_intra_kernel`), the states h and dH, do, v, and b (`_b_tile`)."""
    i_k, i_s, i_h = tl.program_id(0), tl.program_id(1).to(tl.int64), tl.program_id(2)
    start, end = slot_rows(bounds, i_s)
    if start >= end:
        return
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    o_t = tl.arange(0, BT)
    rows = start + o_t
    m_t = rows < end
    p_state = (i_s * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :]
    m_h = m_k[:, None] & m_v[None, :]
    b_h = tl.load(hs + p_state, mask=m_h, other=0.0)  # [BK, BV] state at the chunk's start
    b_dh = tl.load(dhs + p_state, mask=m_h, other=0.0)  # [BK, BV] gradient of the state at its end
    m_tv = m_t[:, None] & m_v[None, :]
    b_v = tl.load(v + (rows[:, None] * H + i_h) * V + o_v[None, :], mask=m_tv, other=0.0)
    b_do = tl.load(do + (rows[:, None] * H + i_h) * V + o_v[None, :], mask=m_tv, other=0.0)
    dtype = b_v.dtype
    b_q = load_tile(q, rows, m_t, i_h, o_k, m_k, H, K)
    b_k = load_tile(k, rows, m_t, i_h, o_k, m_k, H, K)
    b_b, b_bL, direct = _b_tile(gk, b, rows, m_t, start, end, i_s, i_h, o_k, m_k, H, K, BT, BK, B_LOCAL, USE_GK)
    p_t = (rows[:, None] * H + i_h) * K + o_k[None, :]
    m_tk = m_t[:, None] & m_k[None, :]
    b_dA_diag = tl.sum(b_do.to(tl.float32) * b_v.to(tl.float32), axis=1)  # [BT] do_r · v_r: the diagonal terms
    b_state = exp_e(b_bL) * tl.sum(b_h * b_dh, axis=1)  # [BK] exp(b_L) ⊙ rowsum(h ⊙ dH), the state term of (gla.10)
    # In three phases, each storing its output before the next begins, so that few [BT, BK] tiles are live
    # at once. (gla.10) P = q ⊙ dq° − k ⊙ dk° + q̄ ⊙ (do hᵀ), every diagonal term left out, is summed as it goes.
    # dq: dq° (gla.12: the whole chunk through its first row, dA strictly below the diagonal; else from
    # chunk_dqk_intra_kernel), the diagonal and the state term of (gla.9)
    if direct:
        b_dA = tl.where(o_t[:, None] > o_t[None, :], tl.dot(b_do, tl.trans(b_v), input_precision=F32_DOT), 0.0)
        e_q, e_k = _chunk_factors(b_b, _b_first(gk, b, start, i_h, o_k, m_k, H, K, B_LOCAL, USE_GK), m_t)
        b_dq = e_q * tl.dot(b_dA, b_k * e_k, input_precision=F32_DOT) * scale
    else:
        b_dq = tl.load(dq_s + p_t, mask=m_tk, other=0.0)
    b_qdecay = b_q * exp_e(b_b) * scale  # q̄ in float32
    b_dqbar = tl.dot(b_do, tl.trans(b_h.to(dtype)), input_precision=F32_DOT)  # [BT, BK] do hᵀ
    b_p = b_q * b_dq + b_qdecay * b_dqbar
    b_dq += scale * b_dA_diag[:, None] * b_k + exp_e(b_b) * scale * b_dqbar
    tl.store(dq + p_t, b_dq.to(dq.dtype.element_ty), mask=m_tk)
    # dk: dk° (again through the chunk's first row where direct: dA formed a second time, one product),
    # the diagonal and the state term
    if direct:
        b_dA = tl.where(o_t[:, None] > o_t[None, :], tl.dot(b_do, tl.trans(b_v), input_precision=F32_DOT), 0.0)
        e_q, e_k = _chunk_factors(b_b, _b_first(gk, b, start, i_h, o_k, m_k, H, K, B_LOCAL, USE_GK), m_t)
        b_dk = e_k * tl.dot(tl.trans(b_dA), b_q * e_q, input_precision=F32_DOT) * scale
    else:
        b_dk = tl.load(dk_s + p_t, mask=m_tk, other=0.0)
    b_p -= b_k * b_dk
    # X_s = k̂_s ⊙ (dH v_s), whose dH v_s is also the state term of dk (gla.9): one product for both
    b_dkin = tl.dot(b_v.to(tl.float32), tl.trans(b_dh), input_precision=F32_DOT)  # [BT, BK]
    b_ekL = exp_e(b_bL[None, :] - b_b)  # past the end: b = b_L
    b_dk += scale * b_dA_diag[:, None] * b_q + b_ekL * b_dkin
    tl.store(dk + p_t, b_dk.to(dk.dtype.element_ty), mask=m_tk)
    # (gla.10) dg = Σ_{s<t} X_s + exp(b_L) ⊙ rowsum(h ⊙ dH) + Σ_{r≥t} P_r. Σ_{s<t} X_s: X moved down one row in
    # registers (row t takes row t − 1, row 0 takes 0), then an inclusive cumsum (no total − suffix difference,
    # whose terms would cancel under strong decay)
    b_x = b_k * b_ekL * b_dkin  # past the end: k = 0
    up = tl.broadcast_to(tl.maximum(o_t - 1, 0)[:, None], (BT, BK))
    b_xp = tl.where((o_t > 0)[:, None], tl.gather(b_x, up, axis=0), 0.0)
    b_dg = tl.cumsum(b_xp, axis=0) + b_state[None, :] + tl.cumsum(b_p, axis=0, reverse=True)
    tl.store(dgk + p_t, b_dg, mask=m_tk)

"""Issue 48 prototype (not the op's path): chunk_gla's forward state sweep and its output kernel in one launch,
overlapped. At the target the sweep (`chunk_h_kernel`, 0.132 ms on an H200) holds about two programs per
multiprocessor, each a chain of 64 chunk steps, and the GPU waits on that chain while the output kernel
(`chunk_o_kernel`, 0.148 ms, bandwidth-bound) cannot start before the sweep's last program ends. Here the first
programs to start (by a ticket counter) are the sweep's; they store each chunk's entering state and b_L as the op's
sweep does and then count the chunk as done (a release atomic per (chunk slot, head)); the rest are the output's,
ordered chunk index first, so the earliest chunks' come first. An output program forms its chunk's intra-chunk part
A v (b from the gate, A of a direct chunk, gla.12) while the sweep is still on its way, waits for its chunk's count
(an acquire atomic), then loads the state and adds q̄ h (gla.5). The sweep's programs are never waiting on anything,
and hold the first tickets, so they are running before any output program that waits: no deadlock.

Prototype limits: a fixed-length batch with T a multiple of BT, a 16-bit per-key gate, every chunk direct (the
bench's gates; a non-direct chunk's A would come from `chunk_a_kernel`, run after the sweep in the op), one sweep
per sequence (no two-level pass). `probe.py` compares every output with the op's."""
import triton
import triton.language as tl

from workbench.chunk_gla import kernels as gla
from workbench.tl_chunked import load_row, load_tile
from workbench.tl_helpers import dot_f32_right, exp_e


@triton.jit
def _sweep_block(pid, NT, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
                 BV: tl.constexpr):
    """The state block (i_k, i_v) of sequence·head i_nh that sweep program `pid` carries: its indices, masks,
    offsets in a state, and the sequence's first row."""
    NK: tl.constexpr = (K + BK - 1) // BK
    NV: tl.constexpr = (V + BV - 1) // BV
    i_k = pid % NK
    i_v = (pid // NK) % NV
    i_nh = pid // (NK * NV)
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    return (i_nh, i_nh // H, i_nh % H, i_v, o_k, o_v, m_k, m_v, m_k[:, None] & m_v[None, :],
            o_k[:, None] * V + o_v[None, :], (i_nh // H) * NT * BT)


@triton.jit
def _chunk_block(pid, N, NT, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BKO: tl.constexpr,
                 BVO: tl.constexpr, REVERSE: tl.constexpr):
    """The chunk, head and value block of consumer program `pid`, chunk index first (last chunk first with
    REVERSE, as the backward's sweep goes): slot, head, rows, and the key and value offsets and masks."""
    NVO: tl.constexpr = (V + BVO - 1) // BVO
    i_v = pid % NVO
    i_h = (pid // NVO) % H
    i_n = (pid // (NVO * H)) % N
    c = pid // (NVO * H * N)
    if REVERSE:
        c = NT - 1 - c
    slot = (i_n * NT + c).to(tl.int64)
    o_k = tl.arange(0, BKO)
    o_v = i_v * BVO + tl.arange(0, BVO)
    return slot, i_h, slot * BT + tl.arange(0, BT), o_k, o_v, o_k < K, o_v < V


MAX_SPIN = tl.constexpr(1 << 20)  # a probe must not hang the GPU: past this many reads the wait gives up


@triton.jit
def _wait(flags, slot, i_h, H: tl.constexpr, NEED: tl.constexpr):
    """Spin until the sweep has counted chunk `slot` at head i_h NEED times (acquire), then a CTA barrier.
    Returns NaN where it gave up after MAX_SPIN reads (the caller adds it to its output: the probe sees NaN), else
    0."""
    done = tl.atomic_add(flags + slot * H + i_h, 0, sem="acquire", scope="gpu")
    spins = 0
    while (done < NEED) & (spins < MAX_SPIN):
        done = tl.atomic_add(flags + slot * H + i_h, 0, sem="acquire", scope="gpu")
        spins += 1
    tl.debug_barrier()
    return tl.where(done < NEED, float("nan"), 0.0)


@triton.jit
def _sweep_role(k, v, gk, hs, bL, flags, pid, NT, scale, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr):
    """`chunk_h_kernel`'s sweep (gla.4; B_LOCAL: each chunk's entering state and b_L stored by slot) for the state
    block (i_k, i_v) of sequence·head i_nh, counting each chunk done once its stores are issued."""
    i_nh, i_n, i_h, i_v, o_k, o_v, m_k, m_v, m_h, p_state, bos = _sweep_block(pid, NT, H, K, V, BT, BK, BV)
    b_h = tl.zeros([BK, BV], tl.float32)
    nx0, ny0, na0, nx1, ny1, na1 = gla._sweep_loads(k, v, gk, bos, bos + BT, i_h, o_k, m_k, o_v, m_v, H, K, V, BT,
                                                    True)
    for c in range(0, NT):
        start = bos + c * BT
        slot = i_n * NT + c
        b_x0, b_y0, b_a0, b_x1, b_y1, b_a1 = nx0, ny0, na0, nx1, ny1, na1
        n_start = start + BT
        nx0, ny0, na0, nx1, ny1, na1 = gla._sweep_loads(
            k, v, gk, n_start, tl.where(c + 1 < NT, n_start + BT, n_start), i_h, o_k, m_k, o_v, m_v, H, K, V, BT,
            True)
        tl.store(hs + (slot * H + i_h) * K * V + p_state, b_h, mask=m_h)
        b_b0, b_b1, b_bL = gla._half_b(b_a0, b_a1, BT)
        tl.store(bL + (slot * H + i_h) * K + o_k, b_bL, mask=m_k & (i_v == 0))
        tl.debug_barrier()  # every thread's stores of this chunk before the count (CTA scope), then release (GPU)
        tl.atomic_add(flags + slot * H + i_h, 1, sem="release", scope="gpu")
        b_x0 = b_x0.to(tl.float32) * exp_e(b_bL[None, :] - b_b0)
        b_x1 = b_x1.to(tl.float32) * exp_e(b_bL[None, :] - b_b1)
        b_h = b_h * exp_e(b_bL)[:, None] + gla._chunk_product(b_x0.to(b_y0.dtype), b_y0, b_x1.to(b_y1.dtype), b_y1,
                                                              F32_DOT)
    return b_h, i_nh, p_state, m_h


@triton.jit
def _output_role(q, k, v, gk, hs, bL, flags, o, pid, N, NT, scale, H: tl.constexpr, K: tl.constexpr,
                 V: tl.constexpr, BT: tl.constexpr, BKO: tl.constexpr, BVO: tl.constexpr, NEED: tl.constexpr,
                 F32_DOT: tl.constexpr):
    """`chunk_o_kernel` (B_LOCAL, a direct chunk) for chunk c of sequence i_n at head i_h, value block i_v; the
    programs in chunk-index order. A v first; q̄ h once the sweep has counted the chunk NEED times."""
    slot, i_h, rows, o_k, o_v, m_k, m_v = _chunk_block(pid, N, NT, H, K, V, BT, BKO, BVO, False)
    start = slot * BT
    m_t = rows < start + BT
    b_v = tl.load(v + (rows[:, None] * H + i_h) * V + o_v[None, :], mask=m_v[None, :], other=0.0)
    dtype = b_v.dtype
    b_q = load_tile(q, rows, m_t, i_h, o_k, m_k, H, K)
    b_b = gla._chunk_b(gk, rows, m_t, i_h, o_k, m_k, H, K, BT, True)
    b_b0 = load_row(gk, start, i_h, o_k, m_k, H, K)
    b_A = gla._chunk_A(b_q, load_tile(k, rows, m_t, i_h, o_k, m_k, H, K), b_b, b_b0, m_t, scale, F32_DOT,
                       BT).to(dtype)
    b_o = tl.dot(b_A, b_v, input_precision=F32_DOT)  # [BT, BVO]
    b_qbar = (b_q * exp_e(b_b) * scale).to(dtype)
    gave_up = _wait(flags, slot, i_h, H, NEED)
    b_h = tl.load(hs + (slot * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :],
                  mask=m_k[:, None] & m_v[None, :], other=0.0,
                  cache_modifier=".cg").to(dtype)  # [BKO, BVO]; from L2, where the sweep's stores are
    b_o += tl.dot(b_qbar, b_h, input_precision=F32_DOT) + gave_up
    tl.store(o + (rows[:, None] * H + i_h) * V + o_v[None, :], b_o.to(o.dtype.element_ty), mask=m_v[None, :])


@triton.jit
def _roles(ticket, N, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr,
           BV: tl.constexpr):
    """This program's place in the order the programs started (a ticket drawn from a counter, not program_id:
    CUDA does not promise to start blocks in id order, and the sweep's places must go to programs that are
    already running, never to one that could wait behind a spinning consumer), the number of sweep places (the
    first), and the sweep programs per sequence·head (how many counts a chunk's consumer waits for)."""
    NEED: tl.constexpr = ((K + BK - 1) // BK) * ((V + BV - 1) // BV)
    return tl.atomic_add(ticket, 1, sem="relaxed", scope="gpu"), N * H * NEED, NEED


@triton.jit
def chunk_overlap_fwd_kernel(q, k, v, gk,  # inputs, packed [N·T, H, ·]; gk the per-key log-decays (16-bit)
                             o, ht, hs, bL, flags, ticket,  # outputs: o; final states [N, H, K, V]; entering states
                             # and b_L by chunk slot [NS, H, K, V], [NS, H, K]; flags [NS, H] and ticket [1] int32,
                             # zeroed before the launch
                             N, NT, scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                             BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BKO: tl.constexpr,
                             BVO: tl.constexpr, F32_DOT: tl.constexpr):
    """The first N·H·NK·NV programs to start sweep (`_sweep_role`), the rest form o (`_output_role`)."""
    pid, n_sweep, NEED = _roles(ticket, N, H, K, V, BK, BV)
    if pid < n_sweep:
        b_h, i_nh, p_state, m_h = _sweep_role(k, v, gk, hs, bL, flags, pid, NT, scale, H, K, V, BT, BK, BV, F32_DOT)
        tl.store(ht + i_nh * K * V + p_state, b_h, mask=m_h)
    else:
        _output_role(q, k, v, gk, hs, bL, flags, o, pid - n_sweep, N, NT, scale, H, K, V, BT, BKO, BVO, NEED,
                     F32_DOT)


# ----------------------------------------------------------------------------- the backward: dH sweep with dv


@triton.jit
def _dh_sweep_role(q, do, gk, dht, dhs, b, flags, pid, NT, scale, H: tl.constexpr, K: tl.constexpr,
                   V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr):
    """`chunk_dh_kernel`'s sweep (gla.7, last chunk first: dH at each chunk's end and b of every row stored) for the
    block (i_k, i_v) of sequence·head i_nh, counting each chunk done once its stores are issued."""
    i_nh, i_n, i_h, i_v, o_k, o_v, m_k, m_v, m_h, p_state, bos = _sweep_block(pid, NT, H, K, V, BT, BK, BV)
    b_dh = tl.load(dht + i_nh * K * V + p_state, mask=m_h, other=0.0)
    first = bos + (NT - 1) * BT
    nx0, ny0, na0, nx1, ny1, na1 = gla._sweep_loads(q, do, gk, first, first + BT, i_h, o_k, m_k, o_v, m_v, H, K, V,
                                                    BT, True)
    for cc in range(0, NT):
        c = NT - 1 - cc
        start = bos + c * BT
        slot = i_n * NT + c
        b_x0, b_y0, b_a0, b_x1, b_y1, b_a1 = nx0, ny0, na0, nx1, ny1, na1
        n_start = start - BT
        nx0, ny0, na0, nx1, ny1, na1 = gla._sweep_loads(
            q, do, gk, n_start, tl.where(cc + 1 < NT, n_start + BT, n_start), i_h, o_k, m_k, o_v, m_v, H, K, V, BT,
            True)
        tl.store(dhs + (slot * H + i_h) * K * V + p_state, b_dh, mask=m_h)
        b_b0, b_b1, b_bL = gla._half_b(b_a0, b_a1, BT)
        rows0, m_t0 = gla._half_rows(start, start + BT, 0, BT)
        rows1, m_t1 = gla._half_rows(start, start + BT, 1, BT)
        m_b = m_k[None, :] & (i_v == 0)
        tl.store(b + (rows0[:, None] * H + i_h) * K + o_k[None, :], b_b0, mask=m_t0[:, None] & m_b)
        tl.store(b + (rows1[:, None] * H + i_h) * K + o_k[None, :], b_b1, mask=m_t1[:, None] & m_b)
        tl.debug_barrier()
        tl.atomic_add(flags + slot * H + i_h, 1, sem="release", scope="gpu")
        b_x0 = b_x0.to(tl.float32) * exp_e(b_b0) * scale
        b_x1 = b_x1.to(tl.float32) * exp_e(b_b1) * scale
        b_dh = b_dh * exp_e(b_bL)[:, None] + gla._chunk_product(b_x0.to(b_y0.dtype), b_y0, b_x1.to(b_y1.dtype), b_y1,
                                                                F32_DOT)
    return b_dh, i_nh, p_state, m_h


@triton.jit
def _dv_role(q, k, do, gk, dhs, flags, dv, pid, N, NT, scale, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
             BT: tl.constexpr, BKO: tl.constexpr, BVO: tl.constexpr, NEED: tl.constexpr, F32_DOT: tl.constexpr):
    """`chunk_dv_kernel` (gla.8, a direct chunk, b formed here from the gate) for chunk c of sequence i_n at head
    i_h, value block i_v; the programs last chunk first, as the sweep goes. Aᵀ do first; k̂ dH once the sweep has
    counted the chunk NEED times."""
    slot, i_h, rows, o_k, o_v, m_k, m_v = _chunk_block(pid, N, NT, H, K, V, BT, BKO, BVO, True)
    start = slot * BT
    o_t = tl.arange(0, BT)
    m_t = o_t < BT
    b_do = tl.load(do + (rows[:, None] * H + i_h) * V + o_v[None, :], mask=m_v[None, :], other=0.0)
    dtype = b_do.dtype
    b_k = load_tile(k, rows, m_t, i_h, o_k, m_k, H, K)
    b_b = gla._chunk_b(gk, rows, m_t, i_h, o_k, m_k, H, K, BT, True)
    b_A = gla._chunk_A(load_tile(q, rows, m_t, i_h, o_k, m_k, H, K), b_k, b_b, load_row(gk, start, i_h, o_k, m_k, H, K),
                       m_t, scale, F32_DOT, BT).to(dtype)
    b_dv = tl.dot(tl.trans(b_A), b_do, input_precision=F32_DOT)
    b_bL = tl.sum(tl.where((o_t == BT - 1)[:, None], b_b, 0.0), axis=0)
    b_khat = (b_k * exp_e(b_bL[None, :] - b_b)).to(dtype)
    gave_up = _wait(flags, slot, i_h, H, NEED)
    b_dh = tl.load(dhs + (slot * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :],
                   mask=m_k[:, None] & m_v[None, :], other=0.0, cache_modifier=".cg")  # [BKO, BVO] float32
    b_dv += dot_f32_right(b_khat, b_dh, F32_DOT) + gave_up
    tl.store(dv + (rows[:, None] * H + i_h) * V + o_v[None, :], b_dv.to(dv.dtype.element_ty), mask=m_v[None, :])


@triton.jit
def chunk_overlap_dh_dv_kernel(q, k, do, gk, dht,  # inputs, packed; dht [N, H, K, V] the final state's cotangent
                               dv, dh0, dhs, b, flags, ticket,  # outputs: dv; dS_0; dH at chunk ends [NS, H, K,
                               # V]; b [TT, H, K]; flags [NS, H] and ticket [1] int32, zeroed before the launch
                               N, NT, scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                               BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BKO: tl.constexpr,
                               BVO: tl.constexpr, F32_DOT: tl.constexpr):
    """The first N·H·NK·NV programs to start sweep dH (`_dh_sweep_role`), the rest form dv (`_dv_role`)."""
    pid, n_sweep, NEED = _roles(ticket, N, H, K, V, BK, BV)
    if pid < n_sweep:
        b_dh, i_nh, p_state, m_h = _dh_sweep_role(q, do, gk, dht, dhs, b, flags, pid, NT, scale, H, K, V, BT, BK, BV,
                                                  F32_DOT)
        tl.store(dh0 + i_nh * K * V + p_state, b_dh, mask=m_h)
    else:
        _dv_role(q, k, do, gk, dhs, flags, dv, pid - n_sweep, N, NT, scale, H, K, V, BT, BKO, BVO, NEED, F32_DOT)

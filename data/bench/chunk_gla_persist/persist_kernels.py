"""Issue 48 prototypes (not the op's path): chunk_gla's `chunk_dqkg_kernel` and `chunk_o_kernel` made persistent
and pipelined.

Nsight Compute on an H200 at the target (data/bench/backward_stalls/) finds the op's dqkg kernel, 47 % of the
backward's device time, waiting on its own loads: at 255 registers two programs of 4 warps fit a multiprocessor,
each loads its chunk's tiles into registers and stores them to shared memory for the tensor cores, and 34 % of the
warps' samples stall on those stores waiting for the loads (long scoreboard), with DRAM at 30 % of its bandwidth.
A program of this kernel instead walks chunk slots i, i + P, i + 2P, ... in a `tl.range` loop with `STAGES`
pipeline stages, so Triton issues the next chunk's loads (asynchronous copies into shared memory) while the
current chunk is computed. The body is `chunk_dqkg_kernel`'s, with an unused slot's (start = end) rows masked
instead of returning. `chunk_o_persistent_kernel` is the same for the o kernel (the bench's case: a 16-bit per-key
gate, b formed in the kernel), which moves the forward's largest bytes at 62 % of the bandwidth. `probe.py` compares
their outputs with the op's kernels and times both."""
import triton
import triton.language as tl

from workbench.chunk_gla import kernels as gla
from workbench.tl_chunked import RHO, load_row, load_tile
from workbench.tl_helpers import exp_e


@triton.jit
def _direct(b, first, last, i_h, H: tl.constexpr, K: tl.constexpr, BK: tl.constexpr):
    """`_chunk_direct` of the op's kernels on the chunk's first and last rows (clamped for an unused slot)."""
    span = tl.max(load_row(b, first, i_h, tl.arange(0, BK), tl.arange(0, BK) < K, H, K)
                  - load_row(b, last, i_h, tl.arange(0, BK), tl.arange(0, BK) < K, H, K), axis=0)
    for i_k in tl.static_range(1, (K + BK - 1) // BK):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        span = tl.maximum(span, tl.max(load_row(b, first, i_h, o_k, m_k, H, K) - load_row(b, last, i_h, o_k, m_k, H, K),
                                       axis=0))
    return span <= RHO


@triton.jit
def chunk_dqkg_persistent_kernel(q, k, v, do, b, hs, dhs, dq_s, dk_s, bounds,  # inputs
                                 dq, dk, dgk,  # outputs [TT, H, K]
                                 NS, scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                                 BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr,
                                 STAGES: tl.constexpr):
    i_k, i_h = tl.program_id(0), tl.program_id(2)
    P = tl.num_programs(1)
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    o_t = tl.arange(0, BT)
    m_h = m_k[:, None] & m_v[None, :]
    for i_s in tl.range(tl.program_id(1), NS, P, num_stages=STAGES):
        i_s64 = i_s + tl.zeros([], tl.int64)  # the loop variable is a Python int in the interpreter
        start = tl.load(bounds + 2 * i_s64).to(tl.int64)
        end = tl.load(bounds + 2 * i_s64 + 1).to(tl.int64)
        used = end > start
        first = tl.where(used, start, 0)
        last = tl.where(used, end - 1, 0)
        rows = start + o_t
        m_t = rows < end
        p_state = (i_s64 * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :]
        b_h = tl.load(hs + p_state, mask=m_h, other=0.0)
        b_dh = tl.load(dhs + p_state, mask=m_h, other=0.0)
        m_tv = m_t[:, None] & m_v[None, :]
        b_v = tl.load(v + (rows[:, None] * H + i_h) * V + o_v[None, :], mask=m_tv, other=0.0)
        b_do = tl.load(do + (rows[:, None] * H + i_h) * V + o_v[None, :], mask=m_tv, other=0.0)
        dtype = b_v.dtype
        b_bL = load_row(b, last, i_h, o_k, m_k, H, K)
        b_q = load_tile(q, rows, m_t, i_h, o_k, m_k, H, K)
        b_k = load_tile(k, rows, m_t, i_h, o_k, m_k, H, K)
        b_b = tl.where(m_t[:, None], load_tile(b, rows, m_t, i_h, o_k, m_k, H, K), b_bL[None, :])
        p_t = (rows[:, None] * H + i_h) * K + o_k[None, :]
        m_tk = m_t[:, None] & m_k[None, :]
        direct = _direct(b, first, last, i_h, H, K, BK)
        b_dA_diag = tl.sum(b_do.to(tl.float32) * b_v.to(tl.float32), axis=1)
        b_state = exp_e(b_bL) * tl.sum(b_h * b_dh, axis=1)
        if direct:
            b_dA = tl.where(o_t[:, None] > o_t[None, :], tl.dot(b_do, tl.trans(b_v), input_precision=F32_DOT), 0.0)
            e_q, e_k = gla._chunk_factors(b_b, load_row(b, first, i_h, o_k, m_k, H, K), m_t)
            b_dq = e_q * tl.dot(b_dA, b_k * e_k, input_precision=F32_DOT) * scale
        else:
            b_dq = tl.load(dq_s + p_t, mask=m_tk, other=0.0)
        b_qdecay = b_q * exp_e(b_b) * scale
        b_dqbar = tl.dot(b_do, tl.trans(b_h.to(dtype)), input_precision=F32_DOT)
        b_p = b_q * b_dq + b_qdecay * b_dqbar
        b_dq += scale * b_dA_diag[:, None] * b_k + exp_e(b_b) * scale * b_dqbar
        tl.store(dq + p_t, b_dq.to(dq.dtype.element_ty), mask=m_tk)
        if direct:
            b_dA = tl.where(o_t[:, None] > o_t[None, :], tl.dot(b_do, tl.trans(b_v), input_precision=F32_DOT), 0.0)
            e_q, e_k = gla._chunk_factors(b_b, load_row(b, first, i_h, o_k, m_k, H, K), m_t)
            b_dk = e_k * tl.dot(tl.trans(b_dA), b_q * e_q, input_precision=F32_DOT) * scale
        else:
            b_dk = tl.load(dk_s + p_t, mask=m_tk, other=0.0)
        b_p -= b_k * b_dk
        b_dkin = tl.dot(b_v.to(tl.float32), tl.trans(b_dh), input_precision=F32_DOT)
        b_ekL = exp_e(b_bL[None, :] - b_b)
        b_dk += scale * b_dA_diag[:, None] * b_q + b_ekL * b_dkin
        tl.store(dk + p_t, b_dk.to(dk.dtype.element_ty), mask=m_tk)
        b_x = b_k * b_ekL * b_dkin
        up = tl.broadcast_to(tl.maximum(o_t - 1, 0)[:, None], (BT, BK))
        b_xp = tl.where((o_t > 0)[:, None], tl.gather(b_x, up, axis=0), 0.0)
        b_dg = tl.cumsum(b_xp, axis=0) + b_state[None, :] + tl.cumsum(b_p, axis=0, reverse=True)
        tl.store(dgk + p_t, b_dg, mask=m_tk)


@triton.jit
def chunk_o_persistent_kernel(q, k, v, gk, b, hs, A, bounds,  # inputs: b the sweep's b_L by slot [NS, H, K]
                              o,  # output [TT, H, V]
                              NS, scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                              BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr,
                              STAGES: tl.constexpr):
    i_v, i_h = tl.program_id(0), tl.program_id(2)
    P = tl.num_programs(1)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    o_t = tl.arange(0, BT)
    for i_s in tl.range(tl.program_id(1), NS, P, num_stages=STAGES):
        i_s64 = i_s + tl.zeros([], tl.int64)  # the loop variable is a Python int in the interpreter
        start = tl.load(bounds + 2 * i_s64).to(tl.int64)
        end = tl.load(bounds + 2 * i_s64 + 1).to(tl.int64)
        first = tl.where(end > start, start, 0)
        rows = start + o_t
        m_t = rows < end
        b_v = tl.load(v + (rows[:, None] * H + i_h) * V + o_v[None, :], mask=m_t[:, None] & m_v[None, :], other=0.0)
        dtype = b_v.dtype
        b_h = tl.load(hs + (i_s64 * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :],
                      mask=m_k[:, None] & m_v[None, :], other=0.0).to(dtype)
        b_q = load_tile(q, rows, m_t, i_h, o_k, m_k, H, K)
        b_b = gla._chunk_b(gk, rows, m_t, i_h, o_k, m_k, H, K, BT, True)
        b_b0 = load_row(gk, first, i_h, o_k, m_k, H, K)
        direct = tl.max(b_b0 - load_row(b, i_s64, i_h, o_k, m_k, H, K), axis=0) <= RHO
        b_qbar = (b_q * exp_e(b_b) * scale).to(dtype)
        if direct:
            b_A = gla._chunk_A(b_q, load_tile(k, rows, m_t, i_h, o_k, m_k, H, K), b_b, b_b0, m_t, scale, F32_DOT,
                               BT).to(dtype)
        else:
            b_A = tl.load(A + (rows[:, None] * H + i_h) * BT + o_t[None, :], mask=m_t[:, None] & m_t[None, :],
                          other=0.0)
        b_o = tl.dot(b_qbar, b_h, input_precision=F32_DOT) + tl.dot(b_A, b_v, input_precision=F32_DOT)
        tl.store(o + (rows[:, None] * H + i_h) * V + o_v[None, :], b_o.to(o.dtype.element_ty),
                 mask=m_t[:, None] & m_v[None, :])

"""Issue 48 prototype (not the op's path): chunk_gla's `chunk_o_kernel` persistent and pipelined.

The o kernel moves the forward's largest bytes (at the target 323 + 64 MiB with 16-bit states) at 62 % of an
H200's bandwidth: one program per (V block, chunk slot, head) loads its tiles into registers and stores them to
shared memory for the tensor cores, with nothing else to do while they arrive (the stall Nsight Compute finds in
chunk_gla's backward kernels, `../backward_stalls/`). Here a program walks chunk slots i, i + P, i + 2P, ... in
a `tl.range` loop of STAGES pipeline stages, so Triton issues the next chunk's loads as asynchronous copies while
this chunk's products run. The body is `chunk_o_kernel`'s (a 16-bit gate's b formed here, B_LOCAL), an unused
slot's rows masked instead of returning. `probe.py` compares it with the op's kernel and times both."""
import triton
import triton.language as tl

from workbench.chunk_gla import kernels as gla
from workbench.tl_chunked import RHO, load_row, load_tile
from workbench.tl_helpers import exp_e


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

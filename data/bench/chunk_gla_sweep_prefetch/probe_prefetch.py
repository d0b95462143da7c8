"""Issue 48 probe: chunk_gla's forward state sweep with its loads two chunks ahead instead of one.

Nsight Compute on the target (`data/bench/forward_stalls/`) puts 22 % of `chunk_h_kernel`'s stall samples on
long scoreboard waits, at the first uses of tiles the shipped `_sweep` loaded one step earlier: a step (about
1.7 µs) does not cover the loads' latency at two programs per multiprocessor. Here the loop carries two chunks'
tiles, chunk c + 2's issued in step c. Registers: one more set of tiles (k, v, gate); the grid (256 programs at
the target) holds two programs per multiprocessor either way. Same arithmetic in the same order: the states,
b_L and the final state must equal the shipped kernel's bit for bit (the slots no chunk uses excepted: never
written, uninitialised in both). Timed alone against `chunk_h_kernel` at each config, B8 T4096 H16 K = V = 64 bf16
(states stored in bf16, b_L by slot: the forward alone), and B1 T16384. Median ms of 10 samples of one program of
8 copies, per copy, timed by the device (`timing.device_spans`)."""
import sys
from pathlib import Path

import workbench  # first
import triton
import triton.language as tl

from workbench.chunk_gla import kernels as gla
from workbench.tl_chunked import sequence_rows
from workbench.tl_helpers import exp_e



@triton.jit
def chunk_h_prefetch2_kernel(k, v, gk, h0, cu_seqlens, ht, hs, b, H: tl.constexpr, K: tl.constexpr,
                             V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                             F32_DOT: tl.constexpr):
    i_nh, i_h, first_slot, n, o_k, o_v, m_k, m_v, m_h, p_state = gla._key_block_sweep_prologue(
        cu_seqlens, H, K, V, BT, BK, BV)
    bos, eos = sequence_rows(cu_seqlens, i_nh // H)
    write_b = tl.program_id(0) == 0
    b_h = tl.load(h0 + i_nh * K * V + p_state, mask=m_h, other=0.0)
    t0 = bos
    ax0, ay0, aa0, ax1, ay1, aa1 = gla._sweep_loads(k, v, gk, t0, tl.where(n > 0, tl.minimum(t0 + BT, eos), t0),
                                                    i_h, o_k, m_k, o_v, m_v, H, K, V, BT, True)
    t1 = bos + BT
    bx0, by0, ba0, bx1, by1, ba1 = gla._sweep_loads(k, v, gk, t1, tl.where(n > 1, tl.minimum(t1 + BT, eos), t1),
                                                    i_h, o_k, m_k, o_v, m_v, H, K, V, BT, True)
    for c in range(0, n):
        start = bos + c * BT
        b_x0, b_y0, b_a0, b_x1, b_y1, b_a1 = ax0, ay0, aa0, ax1, ay1, aa1
        ax0, ay0, aa0, ax1, ay1, aa1 = bx0, by0, ba0, bx1, by1, ba1
        s2 = start + 2 * BT
        bx0, by0, ba0, bx1, by1, ba1 = gla._sweep_loads(
            k, v, gk, s2, tl.where(c + 2 < n, tl.minimum(s2 + BT, eos), s2), i_h, o_k, m_k, o_v, m_v, H, K, V, BT,
            True)
        tl.store(hs + ((first_slot + c) * H + i_h) * K * V + p_state, b_h, mask=m_h)
        b_b0, b_b1, b_bL = gla._half_b(b_a0, b_a1, BT)
        tl.store(b + ((first_slot + c) * H + i_h) * K + o_k, b_bL, mask=m_k & write_b)
        b_x0 = b_x0.to(tl.float32) * exp_e(b_bL[None, :] - b_b0)
        b_x1 = b_x1.to(tl.float32) * exp_e(b_bL[None, :] - b_b1)
        b_h = b_h * exp_e(b_bL)[:, None] + gla._chunk_product(b_x0.to(b_y0.dtype), b_y0, b_x1.to(b_y1.dtype), b_y1,
                                                              F32_DOT)
    tl.store(ht + i_nh * K * V + p_state, b_h, mask=m_h)


if __name__ == "__main__":
    # the harness of the pipelined probe (shared since; identical to this probe's own copy when it ran)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "chunk_gla_sweep_pipelined"))
    import probe_pipelined

    probe_pipelined.main("prefetch2", chunk_h_prefetch2_kernel)

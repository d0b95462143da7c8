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
import json
import sys

import workbench  # first
import jax
import jax.numpy as jnp
import triton
import triton.language as tl

from workbench import bench, testing
from workbench.bench import timing
from workbench.chunk_gla import kernels as gla
from workbench.tl_chunked import sequence_rows
from workbench.tl_helpers import exp_e

BT = 64


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


def inputs(B, T, H, K, V):
    x = testing.recurrent_inputs(0, B, T, H, K, V, dtype=jnp.bfloat16, gates=("gk",), strength=0.1,
                                 initial_state=False)
    TT = B * T
    pack = lambda a: a.reshape(TT, *a.shape[2:])  # noqa: E731
    cu = jnp.arange(B + 1, dtype=jnp.int32) * T
    return pack(x["k"]), pack(x["v"]), pack(x["gk"]), cu


def sweep(kernel, x, y, a, cu, B, T, H, K, V, BK, BV, w, s):
    TT = B * T
    NS = TT // BT + B
    f32 = jnp.float32
    grid = (triton.cdiv(V, BV), B * H, triton.cdiv(K, BK))
    h0 = jnp.zeros((B, H, K, V), f32)
    out = [jax.ShapeDtypeStruct((B, H, K, V), f32), jax.ShapeDtypeStruct((NS, H, K, V), jnp.bfloat16),
           jax.ShapeDtypeStruct((NS, H, K), f32)]
    common = dict(H=H, K=K, V=V, BT=BT, BK=BK, BV=BV, F32_DOT="tf32", num_warps=w, num_stages=s)
    if kernel == "shipped":
        return workbench.triton_call(x, y, a, h0, cu, kernel=gla.chunk_h_kernel.fn.fn, out_shape=out, grid=grid,
                                     B_LOCAL=True, USE_GK=True, **common)
    return workbench.triton_call(x, y, a, h0, cu, kernel=chunk_h_prefetch2_kernel, out_shape=out, grid=grid,
                                 **common)


CONFIGS = [(32, 64, 4, 1), (32, 64, 4, 2), (16, 64, 4, 3), (64, 32, 4, 2), (64, 64, 8, 2), (32, 32, 4, 2),
           (16, 32, 4, 2), (16, 64, 2, 2)]


def main():
    print(json.dumps({"triton": triton.__version__, "jax": jax.__version__, "device": jax.devices()[0].device_kind}),
          flush=True)
    H, K, V = 16, 64, 64
    for B, T in ((8, 4096), (1, 16384)):
        k, v, a, cu = inputs(B, T, H, K, V)
        for BK, BV, w, s in CONFIGS:
            row = dict(B=B, T=T, BK=BK, BV=BV, warps=w, stages=s)
            outs = {}
            for kernel in ("shipped", "prefetch2"):
                try:
                    f = lambda k, v, a, cu, kernel=kernel: sweep(kernel, k, v, a, cu, B, T, H, K, V, BK, BV, w, s)
                    outs[kernel] = jax.jit(f)(k, v, a, cu)
                    copies = [jax.tree.map(jnp.copy, (k, v, a, cu)) for _ in range(8)]
                    prog = jax.jit(lambda c, f=f: [f(*x) for x in c])
                    call = lambda prog=prog, copies=copies: prog(copies)  # noqa: E731
                    jax.block_until_ready(call())
                    spans = timing.device_spans([call], [0] * 10, jax.block_until_ready)
                    row[kernel] = round(sorted(spans)[len(spans) // 2] / 8, 4)
                except Exception as e:  # noqa: BLE001
                    row[kernel + "_error"] = f"{type(e).__name__}: {str(e)[:300]}"
            if len(outs) == 2:
                row["equal"] = [bool(jnp.array_equal(p, q)) for p, q in zip(outs["shipped"], outs["prefetch2"])]
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

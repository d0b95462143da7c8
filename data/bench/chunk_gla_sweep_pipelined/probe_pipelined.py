"""Issue 48 probe: chunk_gla's forward state sweep with its chunk product one chunk ahead of the state chain.

In `_sweep` each step forms b, k̂ and U_c = k̂ᵀ v of chunk c and then h ← exp(b_L) ⊙ h + U_c: only the last line
is a chain, yet the step's instructions run in order. Here step c forms U_{c+1} (from the tiles loaded one step
earlier) and updates h with U_c formed the step before, so the product's instructions and the chain's are
independent within a step and the compiler may interleave them. Same sums (each U_c is the same product, added
once): the states must equal the shipped kernel's bit for bit. Timed alone against `chunk_h_kernel` at each
config, B8 T4096 H16 K = V = 64 bf16 (states stored in bf16, b_L by slot: the forward alone), and B1 T16384.
Median ms of 10 samples of one program of 8 copies, per copy, timed by the device (`time_device_ms`'s spans)."""
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
def _product(b_x0, b_y0, b_a0, b_x1, b_y1, b_a1, BT: tl.constexpr, F32_DOT: tl.constexpr):
    b_b0, b_b1, b_bL = gla._half_b(b_a0, b_a1, BT)
    b_x0 = b_x0.to(tl.float32) * exp_e(b_bL[None, :] - b_b0)
    b_x1 = b_x1.to(tl.float32) * exp_e(b_bL[None, :] - b_b1)
    return gla._chunk_product(b_x0.to(b_y0.dtype), b_y0, b_x1.to(b_y1.dtype), b_y1, F32_DOT), b_bL


@triton.jit
def chunk_h_pipelined_kernel(k, v, gk, h0, cu_seqlens, ht, hs, b, H: tl.constexpr, K: tl.constexpr,
                             V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                             F32_DOT: tl.constexpr):
    i_nh, i_h, first_slot, n, o_k, o_v, m_k, m_v, m_h, p_state = gla._key_block_sweep_prologue(
        cu_seqlens, H, K, V, BT, BK, BV)
    bos, eos = sequence_rows(cu_seqlens, i_nh // H)
    write_b = tl.program_id(0) == 0
    b_h = tl.load(h0 + i_nh * K * V + p_state, mask=m_h, other=0.0)
    # chunk 0's tiles and product; chunk 1's tiles in flight
    t0 = bos
    x0, y0, a0, x1, y1, a1 = gla._sweep_loads(k, v, gk, t0, tl.where(n > 0, tl.minimum(t0 + BT, eos), t0), i_h, o_k,
                                              m_k, o_v, m_v, H, K, V, BT, True)
    t1 = bos + BT
    nx0, ny0, na0, nx1, ny1, na1 = gla._sweep_loads(k, v, gk, t1, tl.where(n > 1, tl.minimum(t1 + BT, eos), t1),
                                                    i_h, o_k, m_k, o_v, m_v, H, K, V, BT, True)
    b_u, b_bL = _product(x0, y0, a0, x1, y1, a1, BT, F32_DOT)
    tl.store(b + (first_slot * H + i_h) * K + o_k, b_bL, mask=m_k & write_b & (n > 0))
    for c in range(0, n):
        # chunk c + 1's product (independent of the state), from the tiles loaded last step
        cx0, cy0, ca0, cx1, cy1, ca1 = nx0, ny0, na0, nx1, ny1, na1
        s2 = bos + (c + 2) * BT
        nx0, ny0, na0, nx1, ny1, na1 = gla._sweep_loads(
            k, v, gk, s2, tl.where(c + 2 < n, tl.minimum(s2 + BT, eos), s2), i_h, o_k, m_k, o_v, m_v, H, K, V, BT,
            True)
        b_un, b_bLn = _product(cx0, cy0, ca0, cx1, cy1, ca1, BT, F32_DOT)
        tl.store(b + ((first_slot + c + 1) * H + i_h) * K + o_k, b_bLn, mask=m_k & write_b & (c + 1 < n))
        # the chain: chunk c
        tl.store(hs + ((first_slot + c) * H + i_h) * K * V + p_state, b_h, mask=m_h)
        b_h = b_h * exp_e(b_bL)[:, None] + b_u
        b_u, b_bL = b_un, b_bLn
    tl.store(ht + i_nh * K * V + p_state, b_h, mask=m_h)


def inputs(B, T, H, K, V):
    x = testing.recurrent_inputs(0, B, T, H, K, V, dtype=jnp.bfloat16, gates=("gk",), strength=0.1,
                                 initial_state=False)
    TT = B * T
    pack = lambda a: a.reshape(TT, *a.shape[2:])  # noqa: E731
    cu = jnp.arange(B + 1, dtype=jnp.int32) * T
    return pack(x["k"]), pack(x["v"]), pack(x["gk"]), cu


def sweep(kernel, x, y, a, cu, B, T, H, K, V, BK, BV, w, s, candidate=None):
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
    return workbench.triton_call(x, y, a, h0, cu, kernel=candidate or chunk_h_pipelined_kernel, out_shape=out,
                                 grid=grid, **common)


CONFIGS = [(32, 64, 4, 1), (32, 64, 4, 2), (16, 64, 4, 3), (64, 32, 4, 2), (64, 64, 8, 2), (32, 32, 4, 2),
           (16, 32, 4, 2), (16, 64, 2, 2)]


def main(name="pipelined", candidate=None):
    """Each config, the shipped kernel against `candidate` (with the signature of `chunk_h_pipelined_kernel`, the
    default), named `name` in the rows (probe_prefetch.py passes its own)."""
    print(json.dumps({"triton": triton.__version__, "jax": jax.__version__, "device": jax.devices()[0].device_kind}),
          flush=True)
    H, K, V = 16, 64, 64
    for B, T in ((8, 4096), (1, 16384)):
        k, v, a, cu = inputs(B, T, H, K, V)
        for BK, BV, w, s in CONFIGS:
            row = dict(B=B, T=T, BK=BK, BV=BV, warps=w, stages=s)
            outs = {}
            for kernel in ("shipped", name):
                try:
                    f = lambda k, v, a, cu, kernel=kernel: sweep(kernel, k, v, a, cu, B, T, H, K, V, BK, BV, w, s,
                                                                 candidate)
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
                row["equal"] = [bool(jnp.array_equal(p, q)) for p, q in zip(outs["shipped"], outs[name])]
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

"""Issue 48: chunk_gla's forward state sweep alone, at every (BK, BV, warps, stages), on a GPU.

`chunk_h_kernel` (one sweep per sequence) at the target B8 T4096 H16 K=V=64 bf16, and `chunk_segment_sweep_kernel`
(the two-level pass's first launch, NSEG 8) at B1 T65536, each launched through its unwrapped `.fn` with one config
(the autotuner's list has four; stages and 16-wide blocks are not in it). Inputs as the bench makes them (gk gates,
strength 0.1). Per config: median ms of 10 samples of a jitted program of 8 copies (per copy), the states' max |Δ|
against the first config's (slots no chunk uses are left unwritten), and the bytes the launch is handed and returns over the time. One JSON line each."""
import json, statistics, sys, time
import workbench  # first
import jax, jax.numpy as jnp, triton
from workbench import testing
from workbench._bounds import chunk_bounds
from workbench.chunk_gla import kernels as gla

BT = 64


def inputs(B, T, H, K, V):
    x = testing.recurrent_inputs(0, B, T, H, K, V, dtype=jnp.bfloat16, gates=("gk",), strength=0.1,
                                 initial_state=False)
    TT = B * T
    pack = lambda a: a.reshape(TT, *a.shape[2:])  # noqa: E731
    cu = jnp.arange(B + 1, dtype=jnp.int32) * T
    bounds = chunk_bounds(cu, TT, BT)
    b = workbench.triton_call(pack(x["gk"]), bounds, kernel=gla.chunk_cumsum_kernel,
                              out_shape=jax.ShapeDtypeStruct((TT, H, K), jnp.float32), grid=(bounds.shape[0], H),
                              H=H, K=K, BT=BT, BK=max(16, triton.next_power_of_2(K)))
    return pack(x["k"]), pack(x["v"]), b, cu, bounds


def sweep(k, v, b, cu, bounds, B, H, K, V, BK, BV, w, s, nseg):
    NS = bounds.shape[0]
    state = lambda n: jax.ShapeDtypeStruct((n, H, K, V), jnp.float32)  # noqa: E731
    grid = (triton.cdiv(V, BV), B * H * nseg, triton.cdiv(K, BK))
    common = dict(H=H, K=K, V=V, BT=BT, BK=BK, BV=BV, F32_DOT="tf32", num_warps=w, num_stages=s)
    if nseg == 1:
        h0 = jnp.zeros((B, H, K, V), jnp.float32)
        ht, hs = workbench.triton_call(k, v, b, h0, cu, bounds, kernel=gla.chunk_h_kernel.fn,
                                       out_shape=[state(B), state(NS)], grid=grid, **common)
        return hs
    states, ends, decay = workbench.triton_call(
        k, v, b, cu, kernel=gla.chunk_segment_sweep_kernel.fn,
        out_shape=[state(NS), state(B * nseg), jax.ShapeDtypeStruct((B * nseg, H, K), jnp.float32)], grid=grid,
        scale=1.0, NSEG=nseg, REVERSE=False, **common)
    return states


def timed(f, args, N=8, ITERS=10):
    copies = [jax.tree.map(jnp.copy, args) for _ in range(N)]
    prog = jax.jit(lambda c: [f(*a) for a in c])
    jax.block_until_ready(prog(copies)); jax.block_until_ready(prog(copies))
    ts = []
    for _ in range(ITERS):
        t0 = time.perf_counter(); jax.block_until_ready(prog(copies)); ts.append((time.perf_counter() - t0) * 1e3 / N)
    return round(statistics.median(ts), 4)


def main():
    print(json.dumps({"triton": triton.__version__, "jax": jax.__version__, "device": jax.devices()[0].device_kind}),
          flush=True)
    H, K, V = 16, 64, 64
    for B, T, nseg in ((8, 4096, 1), (1, 65536, 8)):
        k, v, b, cu, bounds = inputs(B, T, H, K, V)
        NS = bounds.shape[0]
        nbytes = (k.size * 2 + v.size * 2 + b.size * 4) + NS * H * K * V * 4
        first = None
        for BK, BV, w, s in [(32, 64, 4, 2), (64, 32, 4, 2), (64, 64, 8, 2), (32, 32, 4, 2),
                             (32, 64, 4, 3), (32, 64, 4, 4), (32, 32, 4, 3), (32, 32, 2, 3), (16, 64, 4, 3),
                             (16, 32, 2, 3), (64, 64, 4, 3), (32, 64, 8, 3), (16, 64, 2, 2), (64, 32, 4, 3)]:
            row = dict(B=B, T=T, nseg=nseg, BK=BK, BV=BV, warps=w, stages=s)
            try:
                f = lambda k, v, b, cu, bounds: sweep(k, v, b, cu, bounds, B, H, K, V, BK, BV, w, s, nseg)  # noqa
                hs = jax.jit(f)(k, v, b, cu, bounds)
                if first is None:
                    first = hs
                used = jnp.isfinite(first)  # slots no chunk uses are never written
                row["max_abs_vs_first"] = float(jnp.max(jnp.where(used, jnp.abs(hs - first), 0.0)))
                row["ms"] = timed(f, (k, v, b, cu, bounds))
                row["TB_s"] = round(nbytes / (row["ms"] * 1e-3) / 1e12, 2)
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

"""Issue 48, branch gla-sweep-dotscan: chunk_gla's state sweeps alone on a GPU, from whichever tree is first on
PYTHONPATH (run it once with the branch, once with main beside it). chunk_h_kernel and chunk_dh_kernel at the target
(B8 T4096 H16 K=V=64 bf16), chunk_segment_sweep_kernel both ways at B1 T65536 with 8 segments, at each config: median
ms per copy of a jitted program of 8 copies, and b against float64 prefix sums of the same bf16 gate (max |Δ| and
RMS-relative), at the bench's gate strength (0.1) and a strong one (5). One JSON line per row."""
import json, statistics, time
import workbench  # first
import jax, jax.numpy as jnp, numpy as np, triton
from workbench import testing
from workbench.chunk_gla import kernels as gla

BT = 64


def inputs(B, T, H, K, V, strength):
    x = testing.recurrent_inputs(0, B, T, H, K, V, dtype=jnp.bfloat16, gates=("gk",), strength=strength,
                                 initial_state=False)
    pack = lambda a: a.reshape(B * T, *a.shape[2:])  # noqa: E731
    return pack(x["k"]), pack(x["v"]), pack(x["gk"]), jnp.arange(B + 1, dtype=jnp.int32) * T


def sweep(x, y, a, cu, B, T, H, K, V, BK, BV, w, s, nseg, reverse):
    TT, NS, f32 = B * T, B * T // BT + B, jnp.float32
    state = lambda n: jax.ShapeDtypeStruct((n, H, K, V), f32)  # noqa: E731
    b = jax.ShapeDtypeStruct((TT, H, K), f32)
    grid = (triton.cdiv(V, BV), B * H * nseg, triton.cdiv(K, BK))
    common = dict(H=H, K=K, V=V, BT=BT, BK=BK, BV=BV, F32_DOT="tf32", num_warps=w, num_stages=s, USE_GK=True)
    if nseg == 1:
        kern = gla.chunk_dh_kernel if reverse else gla.chunk_h_kernel
        return workbench.triton_call(x, y, a, jnp.zeros((B, H, K, V), f32), cu, kernel=kern.fn.fn,
                                     out_shape=[state(B), state(NS), b], grid=grid,
                                     **(dict(scale=0.125) if reverse else {}), **common)
    return workbench.triton_call(
        x, y, a, cu, kernel=gla.chunk_segment_sweep_kernel.fn.fn,
        out_shape=[state(NS), state(B * nseg), jax.ShapeDtypeStruct((B * nseg, H, K), f32), b], grid=grid,
        scale=0.125 if reverse else 1.0, NSEG=nseg, REVERSE=reverse, **common)


def exact_b(a, T):
    """float64 prefix sums of the gate within each 64-row chunk (every sequence a multiple of 64 long here)."""
    a64 = np.asarray(a, np.float64)
    return np.cumsum(a64.reshape(-1, BT, *a64.shape[1:]), axis=1).reshape(a64.shape)


def timed(f, args, N=8, ITERS=10):
    copies = [jax.tree.map(jnp.copy, args) for _ in range(N)]
    prog = jax.jit(lambda c: [f(*a) for a in c])
    jax.block_until_ready(prog(copies)); jax.block_until_ready(prog(copies))
    ts = []
    for _ in range(ITERS):
        t0 = time.perf_counter(); jax.block_until_ready(prog(copies)); ts.append((time.perf_counter() - t0) * 1e3 / N)
    return round(statistics.median(ts), 4)


CONFIGS = [(32, 64, 4, 2), (32, 64, 4, 1), (16, 64, 4, 3), (64, 32, 4, 2), (64, 64, 8, 2), (32, 32, 4, 2)]


def main():
    print(json.dumps({"triton": triton.__version__, "jax": jax.__version__, "device": jax.devices()[0].device_kind,
                      "tree": gla.__file__}), flush=True)
    H, K, V = 16, 64, 64
    for B, T, nseg, reverse in ((8, 4096, 1, False), (8, 4096, 1, True), (1, 65536, 8, False), (1, 65536, 8, True)):
        for strength in (0.1, 5.0):
            k, v, a, cu = inputs(B, T, H, K, V, strength)
            exact = exact_b(a, T)
            for BK, BV, w, s in (CONFIGS if strength == 0.1 else CONFIGS[:1] + CONFIGS[4:5]):
                row = dict(B=B, T=T, nseg=nseg, reverse=reverse, strength=strength, BK=BK, BV=BV, warps=w, stages=s)
                try:
                    f = lambda k, v, a, cu: sweep(k, v, a, cu, B, T, H, K, V, BK, BV, w, s, nseg, reverse)  # noqa
                    b = np.asarray(jax.jit(f)(k, v, a, cu)[-1], np.float64)
                    row["b_max_abs"] = float(np.max(np.abs(b - exact)))
                    row["b_rms_rel"] = float(np.sqrt(np.mean((b - exact) ** 2) / np.mean(exact ** 2)))
                    row["max_abs_b"] = float(np.max(np.abs(exact)))
                    if strength == 0.1:
                        row["ms"] = timed(f, (k, v, a, cu))
                except Exception as e:  # noqa: BLE001
                    row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

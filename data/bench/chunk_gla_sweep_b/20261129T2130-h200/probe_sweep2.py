"""Issue 48: chunk_gla's state sweeps that form b themselves (branch gla-sweep-b), alone, at each config, on a GPU.
chunk_h_kernel and chunk_dh_kernel at the target (B8 T4096 H16 K=V=64 bf16), chunk_segment_sweep_kernel both ways at
B1 T65536 NSEG 8. Median ms of 10 samples of a jitted program of 8 copies (per copy). One JSON line each."""
import json, statistics, sys, time
import workbench  # first
import jax, jax.numpy as jnp, triton
from workbench import testing
from workbench.chunk_gla import kernels as gla

BT = 64


def inputs(B, T, H, K, V):
    x = testing.recurrent_inputs(0, B, T, H, K, V, dtype=jnp.bfloat16, gates=("gk",), strength=0.1,
                                 initial_state=False)
    TT = B * T
    pack = lambda a: a.reshape(TT, *a.shape[2:])  # noqa: E731
    cu = jnp.arange(B + 1, dtype=jnp.int32) * T
    return pack(x["k"]), pack(x["v"]), pack(x["gk"]), cu


OLD = hasattr(gla, "chunk_b_kernel")  # main's tree: the cumsum kernel, then the sweep reading b


def sweep(x, y, a, cu, B, T, H, K, V, BK, BV, w, s, nseg, reverse):
    if OLD:
        return old_sweep(x, y, a, cu, B, T, H, K, V, BK, BV, w, s, nseg, reverse)
    TT = B * T
    NS = TT // BT + B
    f32 = jnp.float32
    state = lambda n: jax.ShapeDtypeStruct((n, H, K, V), f32)  # noqa: E731
    b = jax.ShapeDtypeStruct((TT, H, K), f32)
    grid = (triton.cdiv(V, BV), B * H * nseg, triton.cdiv(K, BK))
    common = dict(H=H, K=K, V=V, BT=BT, BK=BK, BV=BV, F32_DOT="tf32", num_warps=w, num_stages=s, USE_GK=True)
    if nseg == 1:
        h0 = jnp.zeros((B, H, K, V), f32)
        kern = gla.chunk_dh_kernel if reverse else gla.chunk_h_kernel
        extra = dict(scale=0.125) if reverse else {}
        return workbench.triton_call(x, y, a, h0, cu, kernel=kern.fn.fn, out_shape=[state(B), state(NS), b],
                                     grid=grid, **extra, **common)
    return workbench.triton_call(
        x, y, a, cu, kernel=gla.chunk_segment_sweep_kernel.fn.fn,
        out_shape=[state(NS), state(B * nseg), jax.ShapeDtypeStruct((B * nseg, H, K), f32), b], grid=grid,
        scale=0.125 if reverse else 1.0, NSEG=nseg, REVERSE=reverse, **common)


def old_sweep(x, y, a, cu, B, T, H, K, V, BK, BV, w, s, nseg, reverse):
    from workbench._bounds import chunk_bounds
    TT = B * T
    f32 = jnp.float32
    bounds = chunk_bounds(cu, TT, BT)
    NS = bounds.shape[0]
    b, split = workbench.triton_call(a, bounds, kernel=gla.chunk_b_kernel.fn, out_shape=[
        jax.ShapeDtypeStruct((TT, H, K), f32), jax.ShapeDtypeStruct((NS, H), jnp.int32)], grid=(NS, H), H=H, K=K,
        BT=BT, BK=max(16, triton.next_power_of_2(K)), USE_GK=True)
    state = lambda n: jax.ShapeDtypeStruct((n, H, K, V), f32)  # noqa: E731
    grid = (triton.cdiv(V, BV), B * H * nseg, triton.cdiv(K, BK))
    common = dict(H=H, K=K, V=V, BT=BT, BK=BK, BV=BV, F32_DOT="tf32", num_warps=w, num_stages=s)
    if nseg == 1:
        h0 = jnp.zeros((B, H, K, V), f32)
        kern = gla.chunk_dh_kernel if reverse else gla.chunk_h_kernel
        extra = dict(scale=0.125) if reverse else {}
        return (*workbench.triton_call(x, y, b, h0, cu, bounds, kernel=kern.fn, out_shape=[state(B), state(NS)],
                                       grid=grid, **extra, **common), b)
    return (*workbench.triton_call(
        x, y, b, cu, kernel=gla.chunk_segment_sweep_kernel.fn,
        out_shape=[state(NS), state(B * nseg), jax.ShapeDtypeStruct((B * nseg, H, K), f32)], grid=grid,
        scale=0.125 if reverse else 1.0, NSEG=nseg, REVERSE=reverse, **common), b)


def timed(f, args, N=8, ITERS=10):
    copies = [jax.tree.map(jnp.copy, args) for _ in range(N)]
    prog = jax.jit(lambda c: [f(*a) for a in c])
    jax.block_until_ready(prog(copies)); jax.block_until_ready(prog(copies))
    ts = []
    for _ in range(ITERS):
        t0 = time.perf_counter(); jax.block_until_ready(prog(copies)); ts.append((time.perf_counter() - t0) * 1e3 / N)
    return round(statistics.median(ts), 4)


CONFIGS = [(32, 64, 4, 2), (32, 64, 4, 1), (16, 64, 4, 2), (16, 64, 4, 3), (16, 64, 2, 2), (64, 32, 4, 2),
           (64, 64, 8, 2), (32, 32, 4, 2), (16, 32, 4, 2), (16, 32, 2, 2)]


def main():
    print(json.dumps({"triton": triton.__version__, "jax": jax.__version__, "device": jax.devices()[0].device_kind,
                      "tree": "main (chunk_b_kernel + sweep)" if OLD else "gla-sweep-b"}),
          flush=True)
    H, K, V = 16, 64, 64
    for B, T, nseg, reverse in ((8, 4096, 1, False), (8, 4096, 1, True), (1, 65536, 8, False), (1, 65536, 8, True)):
        k, v, a, cu = inputs(B, T, H, K, V)
        first = None
        for BK, BV, w, s in ([(32, 64, 4, 2), (64, 64, 8, 2)] if OLD else CONFIGS):
            row = dict(B=B, T=T, nseg=nseg, reverse=reverse, BK=BK, BV=BV, warps=w, stages=s)
            try:
                f = lambda k, v, a, cu: sweep(k, v, a, cu, B, T, H, K, V, BK, BV, w, s, nseg, reverse)  # noqa
                out = jax.jit(f)(k, v, a, cu)
                if first is None:
                    first = out
                row["max_abs_b_vs_first"] = float(jnp.max(jnp.abs(out[-1] - first[-1])))
                row["ms"] = timed(f, (k, v, a, cu))
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

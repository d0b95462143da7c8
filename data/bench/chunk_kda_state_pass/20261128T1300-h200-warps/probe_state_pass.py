"""Issue 48: chunk_kda's two-level state pass (`tl_chunked.chunk_state_pass_kernel`, MATRIX: S ← P_j S + E_j, tf32x3)
launched with 4 warps (main: its [K, K] transfer products spilled 592-704 B per thread in the serial loop over
segments) and with 8 (branch `kda-statepass-w8`: no spill), alone, on the same inputs. One JSON line per shape;
ms = [median, min] of 20 samples of 8 copies in one program; outputs compared (RMS-relative)."""
import json, statistics, time
import workbench
import jax, jax.numpy as jnp, triton
from workbench import tl_chunked


def timed(f, args, N=8, ITERS=20):
    copies = [jax.tree.map(jnp.copy, args) for _ in range(N)]
    prog = jax.jit(lambda c: [f(*a) for a in c])
    jax.block_until_ready(prog(copies)); jax.block_until_ready(prog(copies))
    ts = []
    for _ in range(ITERS):
        t0 = time.perf_counter(); jax.block_until_ready(prog(copies)); ts.append((time.perf_counter() - t0) * 1e3 / N)
    return round(statistics.median(ts), 4), round(min(ts), 4)


def state_pass(ends, trans, init, warps, reverse=False):
    NSEGN, H, K, V = ends.shape
    N = init.shape[0]
    state = lambda n: jax.ShapeDtypeStruct((n, H, K, V), jnp.float32)  # noqa: E731
    return workbench.triton_call(ends, trans, init, kernel=tl_chunked.chunk_state_pass_kernel,
                                 out_shape=[state(NSEGN), state(N)], grid=(triton.cdiv(V, 32), N * H),
                                 name="probe_state_pass", H=H, K=K, V=V, BK=K, BV=32, NSEG=NSEGN // N,
                                 REVERSE=reverse, MATRIX=True, num_warps=warps)


print(json.dumps({"triton": triton.__version__, "jax": jax.__version__, "device": jax.devices()[0].device_kind}),
      flush=True)
for (N, H, K, NSEG) in ((1, 16, 128, 16), (1, 16, 128, 8), (2, 16, 128, 8), (1, 32, 64, 16)):
    ks = jax.random.split(jax.random.key(N * NSEG + K), 3)
    ends = jax.random.normal(ks[0], (N * NSEG, H, K, K), jnp.float32)
    trans = jax.random.normal(ks[1], (N * NSEG, H, K, K), jnp.float32) / K ** 0.5 * 0.9
    init = jax.random.normal(ks[2], (N, H, K, K), jnp.float32)
    row = {"shape": dict(N=N, H=H, K=K, V=K, NSEG=NSEG)}
    a = jax.block_until_ready(state_pass(ends, trans, init, 4))
    b = jax.block_until_ready(state_pass(ends, trans, init, 8))
    row["rel"] = [float(jnp.sqrt(jnp.mean((x - y) ** 2) / jnp.mean(x ** 2))) for x, y in zip(a, b)]
    for rep in ("", "_again"):
        for w in (4, 8):
            row[f"w{w}{rep}"] = timed(lambda *x: state_pass(*x, w), (ends, trans, init))
    print(json.dumps(row), flush=True)

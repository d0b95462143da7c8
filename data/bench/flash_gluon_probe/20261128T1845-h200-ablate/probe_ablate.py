"""Issue 47: what the store of o costs the plain Gluon forward. `gluon_kernels_ablate.py` is main's kernel with a
constexpr ABLATE: 0 as main, 1 o not stored (its row sums added into lse, so every product stays live). Per shape
(plain mask): main's kernel and ABLATE 1 timed in turn, three rounds (median of 10 samples of 8 copies), and the
ablated kernel's lse against main's lse + rowsum(o) (a check that it ran the same products). One JSON line each."""
import json, os, statistics, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jax, jax.numpy as jnp, triton
import workbench
import gluon_kernels_ablate as ab


def fwd(q, k, v, ablate):
    B, T, H, D = q.shape
    config = dict(ab.CONFIG)
    outs = [jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((B, H, T), jnp.float32),
            jax.ShapeDtypeStruct((0,), jnp.float32), jax.ShapeDtypeStruct((0,), jnp.int32)]
    return workbench.triton_call(
        q, k, v, B, T, k.shape[1], D ** -0.5, ab.heads_per_section(k.shape[1], D, H, k.shape[2], 2),
        kernel=ab.flash_fwd_pingpong_kernel, out_shape=outs, grid=ab.grid(B, T, H), num_warps=config.pop("num_warps"),
        maxnreg=config.pop("maxnreg"), H=H, HKV=k.shape[2], D=D, CAUSAL=False, KEEP_F32=False, ABLATE=ablate,
        **config)[:2]


def timed(f, args, N=8, ITERS=10):
    copies = [jax.tree.map(jnp.copy, args) for _ in range(N)]
    prog = jax.jit(lambda c: [f(*a) for a in c])
    jax.block_until_ready(prog(copies)); jax.block_until_ready(prog(copies))
    ts = []
    for _ in range(ITERS):
        t0 = time.perf_counter(); jax.block_until_ready(prog(copies)); ts.append((time.perf_counter() - t0) * 1e3 / N)
    return round(statistics.median(ts), 4)


print(json.dumps({"triton": triton.__version__, "jax": jax.__version__, "device": jax.devices()[0].device_kind}))
for (B, T, H, D) in ((4, 4096, 16, 128), (8, 2048, 16, 128), (4, 4096, 16, 64)):
    ks = jax.random.split(jax.random.key(T + D), 3)
    q, k, v = (jax.random.normal(kk, (B, T, H, D), jnp.bfloat16) for kk in ks)
    row = {"shape": dict(B=B, T=T, H=H, D=D), "causal": False}
    try:
        (o, lse), (_, lse1) = fwd(q, k, v, 0), fwd(q, k, v, 1)
        want = lse + jnp.swapaxes(o.astype(jnp.float32).sum(-1), 1, 2)
        row["lse_check_max_rel"] = float(jnp.max(jnp.abs(lse1 - want) / (1 + jnp.abs(want))))
        row["main"], row["no_o_store"] = [], []
        for _ in range(3):
            row["main"].append(timed(lambda *x: fwd(*x, 0), (q, k, v)))
            row["no_o_store"].append(timed(lambda *x: fwd(*x, 1), (q, k, v)))
        row["no_o_store/main"] = round(statistics.median(row["no_o_store"]) / statistics.median(row["main"]), 3)
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
    print(json.dumps(row), flush=True)

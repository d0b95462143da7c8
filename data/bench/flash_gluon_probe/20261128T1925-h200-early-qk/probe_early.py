"""Issue 47 (plain mask only): main's forward (workbench/flash_attention/gluon_kernels.py at d128f7d), the
free-ends kernel (`../20261128T1905-h200-free-ends/gluon_kernels_free.py`: turns only inside the key-tile loop)
and `gluon_kernels_early.py` (free ends, and the next block's first q kᵀ issued right after this block's last P V,
running while o is stored; two q buffers a group, q loaded two blocks ahead). Per shape: outputs bit for bit
against main's, then the three timed in turn, three rounds (median of 10 samples of 8 copies, ms per copy). One
JSON line each, printed as it comes."""
import json, os, statistics, sys, time
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [here, os.path.join(here, "..", "20261128T1905-h200-free-ends")]
import jax, jax.numpy as jnp, triton
import workbench
from workbench.flash_attention import gluon_kernels as main
import gluon_kernels_free as free
import gluon_kernels_early as early


def fwd(module, q, k, v):
    B, T, H, D = q.shape
    config = dict(module.CONFIG)
    outs = [jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((B, H, T), jnp.float32),
            jax.ShapeDtypeStruct((0,), jnp.float32), jax.ShapeDtypeStruct((0,), jnp.int32)]
    return workbench.triton_call(
        q, k, v, B, T, k.shape[1], D ** -0.5, module.heads_per_section(k.shape[1], D, H, k.shape[2], 2),
        kernel=module.flash_fwd_pingpong_kernel, out_shape=outs, grid=module.grid(B, T, H),
        num_warps=config.pop("num_warps"), maxnreg=config.pop("maxnreg"), H=H, HKV=k.shape[2], D=D, CAUSAL=False,
        KEEP_F32=False, **config)[:2]


def timed(f, args, N=8, ITERS=10):
    copies = [jax.tree.map(jnp.copy, args) for _ in range(N)]
    prog = jax.jit(lambda c: [f(*a) for a in c])
    jax.block_until_ready(prog(copies)); jax.block_until_ready(prog(copies))
    ts = []
    for _ in range(ITERS):
        t0 = time.perf_counter(); jax.block_until_ready(prog(copies)); ts.append((time.perf_counter() - t0) * 1e3 / N)
    return round(statistics.median(ts), 4)


kernels = {"main": main, "free": free, "early": early}
print(json.dumps({"triton": triton.__version__, "jax": jax.__version__, "device": jax.devices()[0].device_kind}),
      flush=True)
for (B, T, H, D) in ((4, 4096, 16, 128), (8, 2048, 16, 128), (1, 16384, 16, 128), (4, 4096, 16, 64),
                     (2, 1000, 24, 128)):
    ks = jax.random.split(jax.random.key(T + D), 3)
    q, k, v = (jax.random.normal(kk, (B, T, H, D), jnp.bfloat16) for kk in ks)
    row = {"shape": dict(B=B, T=T, H=H, D=D), "causal": False}
    try:
        ref = fwd(main, q, k, v)
        for name in ("free", "early"):
            row[f"equal_{name}"] = [bool(jnp.array_equal(x, y)) for x, y in zip(ref, fwd(kernels[name], q, k, v))]
        for name in kernels:
            row[name] = []
        for _ in range(3):
            for name, module in kernels.items():
                row[name].append(timed(lambda *x: fwd(module, *x), (q, k, v)))
        for name in ("free", "early"):
            row[f"{name}/main"] = round(statistics.median(row[name]) / statistics.median(row["main"]), 3)
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
    print(json.dumps(row), flush=True)

"""Issue 47: the Gluon forward storing o by TMA from a shared-memory box per group (branch `fwd-tma-store`,
workbench/flash_attention/gluon_kernels.py) against main's (`../20261128T1835-h200-fence/gluon_kernels_main.py`, a
copy), which stores o from registers (the products' layout plain, 16-byte pieces causal). Per shape and mask:
outputs bit for bit, then main's, the new kernel's and cuDNN's forward timed in turn, three rounds (median of 10
samples of 8 copies in one program, ms per copy). One JSON line each."""
import json, os, statistics, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "20261128T1835-h200-fence"))
import jax, jax.numpy as jnp, triton
import workbench
from workbench.flash_attention import gluon_kernels as tmastore
import gluon_kernels_main as main


def fwd(module, q, k, v, causal):
    B, T, H, D = q.shape
    config = dict(module.CONFIG)
    grid = module.grid(B, T, H)
    blocks = triton.cdiv(T, module.BLOCK_M) * B * H
    outs = [jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((B, H, T), jnp.float32),
            jax.ShapeDtypeStruct((0,), jnp.float32), jax.ShapeDtypeStruct((1,) if causal else (0,), jnp.int32)]
    return workbench.triton_call(
        q, k, v, B, T, k.shape[1], D ** -0.5, module.heads_per_section(k.shape[1], D, H, k.shape[2], 2),
        kernel=module.flash_fwd_pingpong_kernel, out_shape=outs, grid=grid,
        zeroed_outputs=(3,) if causal and grid[0] < blocks else (), num_warps=config.pop("num_warps"),
        maxnreg=config.pop("maxnreg"), H=H, HKV=k.shape[2], D=D, CAUSAL=causal, KEEP_F32=False, **config)[:2]


def timed(f, args, N=8, ITERS=10):
    copies = [jax.tree.map(jnp.copy, args) for _ in range(N)]
    prog = jax.jit(lambda c: [f(*a) for a in c])
    jax.block_until_ready(prog(copies)); jax.block_until_ready(prog(copies))
    ts = []
    for _ in range(ITERS):
        t0 = time.perf_counter(); jax.block_until_ready(prog(copies)); ts.append((time.perf_counter() - t0) * 1e3 / N)
    return round(statistics.median(ts), 4)


print(json.dumps({"triton": triton.__version__, "jax": jax.__version__, "device": jax.devices()[0].device_kind}))
for (B, T, H, D) in ((4, 4096, 16, 128), (1, 16384, 16, 128), (4, 4096, 16, 64), (8, 2048, 16, 128)):
    ks = jax.random.split(jax.random.key(T + D), 3)
    q, k, v = (jax.random.normal(kk, (B, T, H, D), jnp.bfloat16) for kk in ks)
    for causal in (False, True):
        row = {"shape": dict(B=B, T=T, H=H, D=D), "causal": causal}
        try:
            a, b = fwd(main, q, k, v, causal), fwd(tmastore, q, k, v, causal)
            row["equal"] = [bool(jnp.array_equal(x, y)) for x, y in zip(a, b)]
            cudnn = lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=causal, implementation="cudnn")
            for name in ("main", "tma_store", "cudnn"):
                row[name] = []
            for _ in range(3):
                row["main"].append(timed(lambda *x: fwd(main, *x, causal), (q, k, v)))
                row["tma_store"].append(timed(lambda *x: fwd(tmastore, *x, causal), (q, k, v)))
                row["cudnn"].append(timed(cudnn, (q, k, v)))
            row["tma_store/main"] = round(statistics.median(row["tma_store"]) / statistics.median(row["main"]), 3)
            row["tma_store/cudnn"] = round(statistics.median(row["tma_store"]) / statistics.median(row["cudnn"]), 3)
            row["main/cudnn"] = round(statistics.median(row["main"]) / statistics.median(row["cudnn"]), 3)
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
        print(json.dumps(row), flush=True)

"""Issue 47: the persistent Gluon forward (branch gluon-fwd-persistent: grid min(blocks, SMs), each program walks its
blocks, the next block's K, V and q loading while the groups finish this one; the final version persistent only
where not causal, `gluon_kernels.grid`) against main's one program per block
(`gluon_kernels_main.py`, a copy), same inputs, each timed twice, cuDNN's forward beside them (H = HKV). One JSON line
per shape; ms = [median, min] of 10 samples of 8 copies in one program. Outputs must be equal bit for bit (the same
arithmetic per block); Tq ≠ Tk and a T that is not a multiple of the blocks check the masks across batches."""
import json, os, statistics, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workbench
import jax, jax.numpy as jnp, triton
from workbench.flash_attention import gluon_kernels as persistent
from workbench.launch import sm_count
import gluon_kernels_main as current


def fwd(module, q, k, v, causal, keep_f32=False):
    B, T, H, D = q.shape
    config = dict(module.CONFIG)
    if module is persistent:  # the op's launch: persistent where not causal (`gluon_kernels.grid`)
        grid, flag = module.grid(B, T, H, causal)
        args, extra = (q, k, v, B, T, k.shape[1], D ** -0.5), dict(PERSISTENT=flag)
    else:
        grid, args, extra = (triton.cdiv(T, module.BLOCK_M), B * H), (q, k, v, T, k.shape[1], D ** -0.5), {}
    return workbench.triton_call(
        *args, kernel=module.flash_fwd_pingpong_kernel,
        out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((B, H, T), jnp.float32),
                   jax.ShapeDtypeStruct(q.shape if keep_f32 else (0,), jnp.float32)],
        grid=grid, num_warps=config.pop("num_warps"), maxnreg=config.pop("maxnreg"), H=H, HKV=k.shape[2], D=D,
        CAUSAL=causal, KEEP_F32=keep_f32, **extra, **config)


def timed(f, args, N=8, ITERS=10):
    copies = [jax.tree.map(jnp.copy, args) for _ in range(N)]
    prog = jax.jit(lambda c: [f(*a) for a in c])
    jax.block_until_ready(prog(copies)); jax.block_until_ready(prog(copies))
    ts = []
    for _ in range(ITERS):
        t0 = time.perf_counter(); jax.block_until_ready(prog(copies)); ts.append((time.perf_counter() - t0) * 1e3 / N)
    return round(statistics.median(ts), 4), round(min(ts), 4)


print(json.dumps({"triton": triton.__version__, "jax": jax.__version__, "device": jax.devices()[0].device_kind,
                  "sms": sm_count()}), flush=True)
SHAPES = ((3, 200, 300, 4, 2, 64), (2, 777, 777, 4, 1, 128), (4, 4096, 4096, 16, 16, 128),
          (1, 16384, 16384, 16, 16, 128), (4, 4096, 4096, 16, 16, 64), (1, 1024, 1024, 16, 16, 128),
          (2, 1000, 1000, 8, 2, 128), (4, 4096, 4096, 32, 8, 128))[:int(os.environ.get("NSHAPES", 8))]
for (B, TQ, TK, H, HKV, D) in SHAPES:
    ks = jax.random.split(jax.random.key(TQ + D), 3)
    q = jax.random.normal(ks[0], (B, TQ, H, D), jnp.bfloat16)
    k, v = (jax.random.normal(kk, (B, TK, HKV, D), jnp.bfloat16) for kk in ks[1:])
    for causal in (True, False):
        row = {"shape": dict(B=B, TQ=TQ, TK=TK, H=H, HKV=HKV, D=D), "causal": causal}
        try:
            for keep in (True, False):
                a = jax.block_until_ready(fwd(current, q, k, v, causal, keep_f32=keep))
                b = jax.block_until_ready(fwd(persistent, q, k, v, causal, keep_f32=keep))
                tag = "_f32" if keep else ""
                row["equal" + tag] = [bool(jnp.array_equal(x, y)) for x, y in zip(a, b)]
            if TQ >= 1000 and os.environ.get("TIME", "1") == "1":
                args = (q, k, v)
                for rep in ("", "_again"):
                    row["main" + rep] = timed(lambda *x: fwd(current, *x, causal), args)
                    row["persistent" + rep] = timed(lambda *x: fwd(persistent, *x, causal), args)
                if HKV == H:
                    row["cudnn"] = timed(lambda *x: jax.nn.dot_product_attention(*x, is_causal=causal,
                                                                               implementation="cudnn"), args)
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
        print(json.dumps(row), flush=True)

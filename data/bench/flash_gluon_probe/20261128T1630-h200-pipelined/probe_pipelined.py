"""Issue 47: the Gluon forward with one stream of key tiles across a program's blocks (branch gluon-fwd-pipelined:
where a block ends, the next block's first q kᵀ goes out with this block's last P V, the next block's first softmax
runs beside it, then o is stored by TMA from the free q buffer; the loading warp takes blocks one ahead) against the
counter-scheduled kernel before it (`gluon_kernels_sched.py`, a copy), same inputs, each timed twice, cuDNN's
forward beside them (H = HKV). One JSON line per shape; ms = [median, min] of 10 samples of 8 copies in one program.
Outputs must be equal bit for bit (the same arithmetic per block)."""
import json, os, statistics, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workbench
import jax, jax.numpy as jnp, triton
from workbench.flash_attention import gluon_kernels as new
from workbench.launch import sm_count
import gluon_kernels_sched as main


def fwd(module, q, k, v, causal, keep_f32=False):
    B, T, H, D = q.shape
    config = dict(module.CONFIG)
    outs = [jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((B, H, T), jnp.float32),
            jax.ShapeDtypeStruct(q.shape if keep_f32 else (0,), jnp.float32)]
    if module is new or module is main:
        args = (q, k, v, B, T, k.shape[1], D ** -0.5, module.heads_per_section(k.shape[1], D, H, k.shape[2], 2))
        outs.append(jax.ShapeDtypeStruct((1,) if causal else (0,), jnp.int32))
        extra = dict(grid=module.grid(B, T, H), zeroed_outputs=(3,) if causal else ())
    else:
        raise AssertionError
    r = workbench.triton_call(
        *args, kernel=module.flash_fwd_pingpong_kernel, out_shape=outs,
        num_warps=config.pop("num_warps"), maxnreg=config.pop("maxnreg"), H=H, HKV=k.shape[2], D=D,
        CAUSAL=causal, KEEP_F32=keep_f32, **extra, **config)
    return r[:3]


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
SHAPES = ((3, 200, 300, 4, 2, 64), (2, 777, 777, 4, 1, 128), (2, 1000, 1000, 8, 2, 128), (2, 300, 200, 4, 4, 128),
          (4, 4096, 4096, 16, 16, 128), (1, 16384, 16384, 16, 16, 128), (4, 4096, 4096, 16, 16, 64),
          (1, 1024, 1024, 16, 16, 128), (4, 4096, 4096, 32, 8, 128), (8, 2048, 2048, 16, 16, 128))
PICK = [int(i) for i in os.environ.get("SHAPE_IDS", ",".join(map(str, range(len(SHAPES))))).split(",")]
for (B, TQ, TK, H, HKV, D) in [SHAPES[i] for i in PICK]:
    ks = jax.random.split(jax.random.key(TQ + D), 3)
    q = jax.random.normal(ks[0], (B, TQ, H, D), jnp.bfloat16)
    k, v = (jax.random.normal(kk, (B, TK, HKV, D), jnp.bfloat16) for kk in ks[1:])
    for causal in ((True, False) if TQ < 1000 or (B, TQ, D) == (4, 4096, 128) else (True,)):
        row = {"shape": dict(B=B, TQ=TQ, TK=TK, H=H, HKV=HKV, D=D), "causal": causal}
        try:
            for keep in ((True, False) if (B, TQ, D) == (4, 4096, 128) or TQ < 1000 else (False,)):
                a = jax.block_until_ready(fwd(main, q, k, v, causal, keep_f32=keep))
                b = jax.block_until_ready(fwd(new, q, k, v, causal, keep_f32=keep))
                row["equal" + ("_f32" if keep else "")] = [bool(jnp.array_equal(x, y)) for x, y in zip(a, b)]
            if TQ >= 1000:
                args = (q, k, v)
                for rep in ("", "_again"):
                    row["sched" + rep] = timed(lambda *x: fwd(main, *x, causal), args)
                    row["new" + rep] = timed(lambda *x: fwd(new, *x, causal), args)
                if HKV == H and os.environ.get("CUDNN", "1") == "1":
                    row["cudnn"] = timed(lambda *x: jax.nn.dot_product_attention(*x, is_causal=causal,
                                                                               implementation="cudnn"), args)
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
        print(json.dumps(row), flush=True)

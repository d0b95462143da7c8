"""Issue 47 (fifteenth session): the shipped Gluon forward with NAMED (turns by named barriers), ELECT (K/V released
by one elected lane per warp, no partition barrier first) and COAL (o stored through a coalescing layout), each
against the shipped kernel bit for bit, then ms beside the shipped kernel and cuDNN, bf16 D128."""
import json, os, sys, statistics, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workbench
import jax, jax.numpy as jnp, triton
from workbench.flash_attention import Tuning
import pp5

VARIANTS = [tuple(int(c) for c in v) for v in os.environ.get("VARIANTS", "000,100,010,001,111").split(",")]


def fwd(q, k, v, causal, flags, keep_f32=False):
    B, T, H, D = q.shape
    named, elect, coal = (bool(f) for f in flags)
    return workbench.triton_call(
        q, k, v, T, k.shape[1], D ** -0.5, kernel=pp5.flash_fwd_pingpong_kernel,
        out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((B, H, T), jnp.float32),
                   jax.ShapeDtypeStruct(q.shape if keep_f32 else (0,), jnp.float32)],
        grid=(triton.cdiv(T, 128), B * H), num_warps=4, maxnreg=168, H=H, HKV=k.shape[2], D=D, BN=128, NBUF=2,
        REGS=240, CAUSAL=causal, KEEP_F32=keep_f32, NAMED=named, ELECT=elect, COAL=coal)


def timed(f, args, N=8, ITERS=10):
    copies = [jax.tree.map(jnp.copy, args) for _ in range(N)]
    prog = jax.jit(lambda c: [f(*a) for a in c])
    jax.block_until_ready(prog(copies)); jax.block_until_ready(prog(copies))
    ts = []
    for _ in range(ITERS):
        t0 = time.perf_counter(); jax.block_until_ready(prog(copies)); ts.append((time.perf_counter() - t0) * 1e3 / N)
    return round(statistics.median(ts), 4), round(min(ts), 4)


print(json.dumps({"triton": triton.__version__, "device": jax.devices()[0].device_kind, "variants": VARIANTS}), flush=True)
for (B, T, H, HKV, D) in ((2, 1000, 4, 2, 128), (1, 4096, 2, 2, 128), (3, 5, 2, 2, 128), (2, 777, 4, 1, 64)):
    ks = jax.random.split(jax.random.key(T + HKV), 3)
    q = jax.random.normal(ks[0], (B, T, H, D), jnp.bfloat16)
    k, v = (jax.random.normal(kk, (B, T, HKV, D), jnp.bfloat16) for kk in ks[1:])
    for causal in (True, False):
        go, gl_ = workbench.flash_attention(q, k, v, causal=causal, return_lse=True, tuning=Tuning(forward="gluon"))
        for flags in VARIANTS:
            row = {"check": [B, T, H, HKV, D], "causal": causal, "flags": flags}
            try:
                o, lse, o32 = jax.block_until_ready(fwd(q, k, v, causal, flags, keep_f32=True))
                row["o_equal_to_shipped"] = bool(jnp.array_equal(o, go))
                row["lse_equal_to_shipped"] = bool(jnp.array_equal(lse, gl_))
                row["o32_matches_o"] = bool(jnp.array_equal(o32.astype(o.dtype), o))
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {str(e)[:600]}"
            print(json.dumps(row), flush=True)
for (B, T, H) in ((4, 4096, 16), (1, 16384, 16)):
    ks = jax.random.split(jax.random.key(0), 3)
    q, k, v = (jax.random.normal(kk, (B, T, H, 128), jnp.bfloat16) for kk in ks)
    for causal in (True, False):
        row = {"shape": [B, T, H], "causal": causal,
               "cudnn": timed(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=causal,
                                                                           implementation="cudnn"), (q, k, v)),
               "shipped": timed(lambda q, k, v: workbench.flash_attention(q, k, v, causal=causal,
                                                                          tuning=Tuning(forward="gluon")), (q, k, v))}
        for flags in VARIANTS:
            try:
                row["".join(map(str, flags))] = timed(lambda q, k, v, f=flags: fwd(q, k, v, causal, f)[0], (q, k, v))
            except Exception as e:
                row["error_" + "".join(map(str, flags))] = f"{type(e).__name__}: {str(e)[:300]}"
        row["cudnn_again"] = timed(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=causal,
                                                                                implementation="cudnn"), (q, k, v))
        print(json.dumps(row), flush=True)

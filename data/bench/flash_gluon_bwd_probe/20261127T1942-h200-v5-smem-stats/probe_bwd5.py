"""Issue 47: the Gluon backward, second version (gluon_bwd5.py: two warp groups of 64 keys taking turns, dQ by TMA
reductions), against the reference's gradients and, in time, against
workbench's and cuDNN's backward (forward+backward minus forward), B4 T4096 H16 D128 bf16, one GPU."""
import json, os, sys, statistics, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workbench
import jax, jax.numpy as jnp, numpy as np, triton
from workbench import gpu_call
import gluon_bwd5

LOG2E = 1.4426950408889634

def timed(f, args, N=8, ITERS=10):
    copies = [jax.tree.map(jnp.copy, args) for _ in range(N)]
    prog = jax.jit(lambda c: [f(*a) for a in c])
    jax.block_until_ready(prog(copies)); jax.block_until_ready(prog(copies))
    ts = []
    for _ in range(ITERS):
        t0 = time.perf_counter(); jax.block_until_ready(prog(copies)); ts.append((time.perf_counter() - t0) * 1e3 / N)
    return round(statistics.median(ts), 4), round(min(ts), 4)

def hm(x):
    B, T, H, D = x.shape
    return jnp.transpose(x, (0, 2, 1, 3)).reshape(B * H * T, D)

def gluon_grads(q, k, v, do, o, lse, causal):
    """dq, dk, dv head-major from the Gluon kernel (lse natural [B, H, T])."""
    B, T, H, D = q.shape
    scale = D ** -0.5
    delta = jnp.sum(do.astype(jnp.float32) * o.astype(jnp.float32), -1)  # [B, T, H]
    delta = jnp.transpose(delta, (0, 2, 1)).reshape(-1)
    lse2 = lse.reshape(-1) * LOG2E
    dk, dv, dq = workbench.triton_call(
        hm(q), hm(k), hm(v), hm(do), lse2, delta, T, B * H * T, scale * LOG2E, scale,
        kernel=gluon_bwd5.gluon_attn_bwd2,
        out_shape=[jax.ShapeDtypeStruct((B * H * T, D), q.dtype)] * 2 + [jax.ShapeDtypeStruct((B * H * T, D), jnp.float32)],
        grid=(triton.cdiv(T, 128), B * H), zeroed_outputs=(2,), num_warps=4, num_stages=2, maxnreg=168,
        D=D, BM=64, NBUF=int(os.environ.get("NBUF", "2")), CAUSAL=causal, REGS=int(os.environ.get("REGS", "240")))
    return dq * scale, dk, dv

print(json.dumps({"triton": triton.__version__, "device": jax.devices()[0].device_kind}), flush=True)
for (B, T, H) in ((1, 1000, 2), (1, 1024, 2), (4, 4096, 16)):
    ks = jax.random.split(jax.random.key(T), 4)
    q, k, v, do = (jax.random.normal(kk, (B, T, H, 128), jnp.bfloat16) for kk in ks)
    for causal in (True, False):
        row = {"shape": [B, T, H], "causal": causal}
        try:
            o, lse = workbench.flash_attention(q, k, v, causal=causal, return_lse=True)
            dq, dk, dv = jax.block_until_ready(gluon_grads(q, k, v, do, o, lse, causal))
            _, pull = jax.vjp(lambda q, k, v: workbench.flash_attention(q, k, v, causal=causal), q, k, v)
            rq, rk, rv = pull(do)
            for name, mine, ref in (("dq", dq, rq), ("dk", dk, rk), ("dv", dv, rv)):
                ref = hm(ref).astype(jnp.float32)
                row[name + "_rel_rms"] = float(jnp.sqrt(jnp.mean((mine.astype(jnp.float32) - ref) ** 2) / jnp.mean(ref ** 2)))
            if T == 4096:
                g = lambda q, k, v, do, o, lse: gluon_grads(q, k, v, do, o, lse, causal)
                row["gluon_bwd"] = timed(g, (q, k, v, do, o, lse))
                fwd = lambda q, k, v: workbench.flash_attention(q, k, v, causal=causal)
                def fb(q, k, v, do):
                    o, pull = jax.vjp(fwd, q, k, v)
                    return o, *pull(do)
                row["workbench_fwd"], row["workbench_fwd_bwd"] = timed(fwd, (q, k, v)), timed(fb, (q, k, v, do))
                cf = lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=causal, implementation="cudnn")
                def cfb(q, k, v, do):
                    o, pull = jax.vjp(cf, q, k, v)
                    return o, *pull(do)
                row["cudnn_fwd"], row["cudnn_fwd_bwd"] = timed(cf, (q, k, v)), timed(cfb, (q, k, v, do))
                row["warps"] = sorted({r.num_warps for r in gpu_call._COMPILED.values() if r.name.startswith("gluon")})
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e)[:800]}"
        print(json.dumps(row), flush=True)

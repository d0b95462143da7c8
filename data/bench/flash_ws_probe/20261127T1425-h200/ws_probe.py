"""Issue 47 probe: prototype forward, warp-specialized or not, against cuDNN and workbench.flash_attention,
B4 T4096 H16 D128 bf16. One JSON line per row."""
import json, os, sys, statistics, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workbench
import jax, jax.numpy as jnp, numpy as np, triton
import wsproto
from workbench import gpu_call

B, T, H, D = 4, 4096, 16, 128
key = jax.random.split(jax.random.key(0), 3)
q, k, v = (jax.random.normal(kk, (B, T, H, D), jnp.bfloat16) for kk in key)
hm = lambda x: jnp.transpose(x, (0, 2, 1, 3)).reshape(B * H * T, D)
qh, kh, vh = hm(q), hm(k), hm(v)
N, ITERS = 8, 10
scale = D ** -0.5

def timed(f, args):
    copies = [jax.tree.map(jnp.copy, args) for _ in range(N)]
    prog = jax.jit(lambda c: [f(*a) for a in c])
    t0 = time.perf_counter(); jax.block_until_ready(prog(copies)); first = time.perf_counter() - t0
    jax.block_until_ready(prog(copies))
    ts = []
    for _ in range(ITERS):
        t0 = time.perf_counter(); jax.block_until_ready(prog(copies)); ts.append((time.perf_counter() - t0) * 1e3 / N)
    return round(statistics.median(ts), 4), round(min(ts), 4), round(first, 1)

def proto(causal, BM, BN, w, s, ws, one):
    def f(qh, kh, vh):
        return workbench.triton_call(qh, kh, vh, T, B * H * T, scale, kernel=wsproto.attn_fwd,
                                     out_shape=[jax.ShapeDtypeStruct((B * H * T, D), jnp.bfloat16),
                                                jax.ShapeDtypeStruct((B * H * T,), jnp.float32)],
                                     grid=(T // BM, B * H), num_warps=w, num_stages=s,
                                     D=D, BM=BM, BN=BN, CAUSAL=causal, WS=ws, ONE_LOOP=one)[0]
    return f

print(json.dumps({"triton": triton.__version__, "jax": jax.__version__, "device": jax.devices()[0].device_kind}), flush=True)
for causal in (True, False):
    cud = lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=causal, implementation="cudnn")
    ref = cud(q, k, v)
    refh = hm(ref).astype(jnp.float32)
    print(json.dumps({"causal": causal, "impl": "cudnn", "ms": timed(cud, (q, k, v))}), flush=True)
    wb = lambda q, k, v: workbench.flash_attention(q, k, v, causal=causal)
    print(json.dumps({"causal": causal, "impl": "workbench", "ms": timed(wb, (q, k, v))}), flush=True)
    rows = [(128, 128, 8, 3, False, False), (128, 128, 8, 2, False, False),
            (128, 128, 4, 2, True, True), (128, 64, 4, 2, True, True), (128, 64, 4, 3, True, True),
            (128, 64, 4, 4, True, True), (128, 128, 8, 3, False, True), (256, 64, 4, 2, True, True), (256, 64, 4, 3, True, True)]
    if not causal:
        rows = [r for r in rows if r[5]]
    for BM, BN, w, s, ws, one in rows:
        row = {"causal": causal, "impl": "proto", "config": [BM, BN, w, s], "ws": ws, "one_loop": one}
        try:
            f = proto(causal, BM, BN, w, s, ws, one)
            out = f(qh, kh, vh)
            row["max_abs_vs_cudnn"] = float(jnp.max(jnp.abs(out.astype(jnp.float32) - refh)))
            row["warps"] = sorted({r.num_warps for r in gpu_call._COMPILED.values() if r.name.startswith("attn_fwd")})
            row["ms"] = timed(f, (qh, kh, vh))
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
        gpu_call._COMPILED.clear() if hasattr(gpu_call._COMPILED, "clear") else None
        print(json.dumps(row), flush=True)

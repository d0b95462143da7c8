"""Issue 47: where should Tuning(backward=None) pick the Gluon backward? forward+backward of the op with
backward="gluon" against backward="triton" (the forward as the default picks it), D 64 and grouped heads, which the
bench's sets do not have; one H100/H200. Prints one JSON line per shape."""
import json, statistics, time
import workbench
import jax, jax.numpy as jnp, triton
from workbench.flash_attention import Tuning


def timed(f, args, N=6, ITERS=10):
    copies = [jax.tree.map(jnp.copy, args) for _ in range(N)]
    prog = jax.jit(lambda c: [f(*a) for a in c])
    jax.block_until_ready(prog(copies)); jax.block_until_ready(prog(copies))
    ts = []
    for _ in range(ITERS):
        t0 = time.perf_counter(); jax.block_until_ready(prog(copies)); ts.append((time.perf_counter() - t0) * 1e3 / N)
    return round(statistics.median(ts), 4), round(min(ts), 4)


print(json.dumps({"triton": triton.__version__, "jax": jax.__version__, "device": jax.devices()[0].device_kind}),
      flush=True)
for (B, T, H, HKV, D) in ((4, 4096, 16, 16, 64), (1, 1024, 16, 16, 64), (1, 16384, 16, 16, 64),
                          (4, 4096, 16, 2, 128), (1, 4096, 16, 1, 128), (2, 2048, 8, 8, 64)):
    ks = jax.random.split(jax.random.key(T), 4)
    q, do = (jax.random.normal(kk, (B, T, H, D), jnp.bfloat16) for kk in ks[:2])
    k, v = (jax.random.normal(kk, (B, T, HKV, D), jnp.bfloat16) for kk in ks[2:])
    for causal in (True, False):
        row = {"shape": dict(B=B, T=T, H=H, HKV=HKV, D=D), "causal": causal}
        for name in ("gluon", "triton"):
            tuning = Tuning(backward=name)

            def fb(q, k, v, do, tuning=tuning):
                o, pull = jax.vjp(lambda q, k, v: workbench.flash_attention(q, k, v, causal=causal, tuning=tuning),
                                  q, k, v)
                return o, *pull(do)
            try:
                row[f"fwd_bwd_{name}"] = timed(fb, (q, k, v, do))
            except Exception as e:
                row[f"error_{name}"] = f"{type(e).__name__}: {str(e)[:300]}"
        print(json.dumps(row), flush=True)

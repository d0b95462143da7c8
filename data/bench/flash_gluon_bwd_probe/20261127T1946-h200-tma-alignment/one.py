"""One Gluon-backward call in its own process: B T H HKV D dtype causal [fwd]; prints OK with errors or the failure."""
import sys, json
import jax, jax.numpy as jnp, numpy as np
import workbench
from workbench.flash_attention import Tuning
B, T, H, HKV, D = map(int, sys.argv[1:6]); dtype = jnp.dtype(sys.argv[6]); causal = sys.argv[7] == "1"
fwd = sys.argv[8] if len(sys.argv) > 8 else "gluon"
ks = jax.random.split(jax.random.key(0), 4)
q = jax.random.normal(ks[0], (B, T, H, D)).astype(dtype)
k = jax.random.normal(ks[1], (B, T, HKV, D)).astype(dtype)
v = jax.random.normal(ks[2], (B, T, HKV, D)).astype(dtype)
do = jax.random.normal(ks[3], (B, T, H, D)).astype(dtype)
def run(tuning, impl="triton"):
    f = lambda q, k, v: workbench.flash_attention(q, k, v, causal=causal, implementation=impl, tuning=tuning)
    o, vjp = jax.vjp(f, q, k, v)
    return [np.asarray(x, np.float32) for x in vjp(do)]
tag = dict(shape=[B, T, H, HKV, D], dtype=str(dtype), causal=causal, fwd=fwd)
try:
    g = run(Tuning(forward=fwd, backward="gluon"))
    r = run(Tuning(forward="triton"))
    tag["rel"] = [float(np.sqrt(np.mean((a - b) ** 2)) / np.sqrt(np.mean(b ** 2))) for a, b in zip(g, r)]
    tag["ok"] = True
except Exception as e:
    tag["ok"] = False; tag["err"] = str(e).splitlines()[0][:200]
print(json.dumps(tag), flush=True)

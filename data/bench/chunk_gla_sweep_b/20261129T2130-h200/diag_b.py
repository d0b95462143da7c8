"""b (gla.3) as the forward sweep (chunk_h_kernel) and the backward one (chunk_dh_kernel) form it on the GPU, per
config, against float64 prefix sums: float32 log-decays as the op folds g + gk, strengths 1 and 5."""
import json, sys
import numpy as np
import workbench  # first
import jax, jax.numpy as jnp, triton
from workbench.chunk_gla import kernels as gla
BT = 64
B, T, H, K, V = 2, 1000, 3, 64, 64
TT = B * T
cu = jnp.arange(B + 1, dtype=jnp.int32) * T
NS = TT // BT + B + 1
f32 = jnp.float32
rows = np.arange(TT)
chunk_of = np.concatenate([np.arange(T) // BT + n * 10**6 for n in range(B)])
def b64_of(a):
    a = np.asarray(a, np.float64)
    out = np.empty_like(a)
    for c in np.unique(chunk_of):
        m = chunk_of == c
        out[m] = np.cumsum(a[m], axis=0)
    return out
for strength in (1.0, 5.0):
    key = jax.random.key(0)
    a = (-strength * jax.nn.softplus(jax.random.normal(key, (TT, H, K)))
         - strength * jax.nn.softplus(jax.random.normal(jax.random.key(1), (TT, H, 1)))).astype(f32)
    x = jax.random.normal(jax.random.key(2), (TT, H, K), f32)
    y = jax.random.normal(jax.random.key(3), (TT, H, V), f32)
    ref = b64_of(a)
    got = {}
    for BK, BV, w, s in ((64, 32, 4, 2), (32, 64, 4, 1), (32, 64, 4, 2), (16, 64, 4, 3), (64, 64, 8, 2)):
        for rev in (False, True):
            kern = gla.chunk_dh_kernel if rev else gla.chunk_h_kernel
            extra = dict(scale=0.125) if rev else {}
            out = workbench.triton_call(x, y, a, jnp.zeros((B, H, K, V), f32), cu, kernel=kern.fn.fn,
                out_shape=[jax.ShapeDtypeStruct((B, H, K, V), f32), jax.ShapeDtypeStruct((NS, H, K, V), f32),
                           jax.ShapeDtypeStruct((TT, H, K), f32)],
                grid=(triton.cdiv(V, BV), B * H, triton.cdiv(K, BK)), H=H, K=K, V=V, BT=BT, BK=BK, BV=BV,
                F32_DOT="ieee", num_warps=w, num_stages=s, USE_GK=True, **extra)
            b = np.asarray(out[2], np.float64)
            got[(BK, BV, w, s, rev)] = b
            err = np.abs(b - ref)
            print(json.dumps(dict(strength=strength, BK=BK, BV=BV, w=w, s=s, reverse=rev,
                                  max_rel=float(np.max(err / np.maximum(np.abs(ref), 1e-30))),
                                  rms_rel=float(np.sqrt(np.mean(err**2)) / np.sqrt(np.mean(ref**2))))), flush=True)
    first = got[(64, 32, 4, 2, False)]
    for k, b in got.items():
        print(json.dumps(dict(strength=strength, config=k, max_abs_vs_h_64_32=float(np.max(np.abs(b - first))))), flush=True)
    # XLA's float32 cumsum per chunk (what the reference computes)
    ax = np.asarray(a)
    xla = np.empty_like(ax)
    for c in np.unique(chunk_of):
        m = chunk_of == c
        xla[m] = np.asarray(jnp.cumsum(jnp.asarray(ax[m]), axis=0))
    err = np.abs(xla.astype(np.float64) - ref)
    print(json.dumps(dict(strength=strength, xla_cumsum_rms_rel=float(np.sqrt(np.mean(err**2)) / np.sqrt(np.mean(ref**2))))), flush=True)

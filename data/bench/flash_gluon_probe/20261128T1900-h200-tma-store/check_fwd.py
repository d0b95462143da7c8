"""The Gluon forward at small shapes with more blocks than programs (the counter, blocks run back to back, o stored
by TMA and by masked stores), for compute-sanitizer (racecheck, synccheck): each call's o against the Triton
forward's."""
import sys
import workbench
import jax, jax.numpy as jnp
from workbench.flash_attention import Tuning

for (B, T, H, HKV, D) in ((1, 1024, 40, 40, 64), (2, 1000, 24, 8, 128)):
    ks = jax.random.split(jax.random.key(T), 3)
    q = jax.random.normal(ks[0], (B, T, H, D), jnp.bfloat16)
    k, v = (jax.random.normal(kk, (B, T, HKV, D), jnp.bfloat16) for kk in ks[1:])
    for causal in (True, False):
        o = workbench.flash_attention(q, k, v, causal=causal, tuning=Tuning(forward="gluon"))
        ref = workbench.flash_attention(q, k, v, causal=causal, tuning=Tuning(forward="triton"))
        err = float(jnp.max(jnp.abs(o.astype(jnp.float32) - ref.astype(jnp.float32))))
        print(B, T, H, HKV, D, causal, "max|o - triton|", err, flush=True)
        if not err < 0.05:
            sys.exit(1)

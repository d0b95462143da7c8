# chunk_kda's prep and fused backward kernels: their candidates compiled by compile_check.precompile (workbench tune
# --compile-workers) with 1 and 2 workers, on a CPU (sm_90 PTX; the launches traced abstractly at B1 T128 H16 K=V=128).
#   python data/bench/precompile_cpu/measure.py
import os, time, tempfile
os.environ["WORKBENCH_CACHE_DIR"] = tempfile.mkdtemp()
import workbench
import jax, jax.numpy as jnp
from workbench import launch, autotune, compile_check, signature
seen = []
B, T, H, K = 1, 128, 16, 128
f = jax.ShapeDtypeStruct
q = f((B, T, H, K), jnp.bfloat16); g = f((B, T, H, K), jnp.bfloat16); beta = f((B, T, H), jnp.bfloat16)
def loss(q, k, v, g, beta):
    o = workbench.chunk_kda(q, k, v, g, beta)
    o = o[0] if isinstance(o, tuple) else o
    return o.astype(jnp.float32).sum()
with launch.observing(seen.append):
    jax.eval_shape(jax.grad(loss, argnums=(0, 1, 2, 3, 4)), q, q, q, g, beta)
names = [signature.unwrap(s.kernel)[2].__name__ for s in seen]
print(names)
for s in seen:
    name = signature.unwrap(s.kernel)[2].__name__
    if name not in ("chunk_kda_bwd_wy_dqkg_fused_kernel", "chunk_kda_fwd_prep_kernel"):
        continue
    p = autotune.plan(s.kernel, s.args, s.out_shapes, s.metaparams, device="NVIDIA H200", versions=autotune.versions())
    for w in (1, 2):
        os.environ["WORKBENCH_CACHE_DIR"] = tempfile.mkdtemp()
        t = time.perf_counter()
        r = compile_check.precompile(s.kernel, s.args, s.out_shapes, p.candidates, s.metaparams, workers=w, cc=90)
        print(name, len(p.candidates), "candidates, workers", w, "compiled", r["compiled"], "failed", len(r["failed"]), f"{time.perf_counter()-t:.1f} s")

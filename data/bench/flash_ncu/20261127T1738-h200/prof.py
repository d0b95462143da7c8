"""Issue 47: one call each of workbench's and cuDNN's forward and forward+backward, B4 T4096 H16 D128 bf16,
causal and not, for ncu to profile (inputs made on the host: no other kernels than the ops' own)."""
import os, sys
import numpy as np, jax, jax.numpy as jnp
import workbench

B, T, H, D = 4, 4096, 16, 128
rng = np.random.default_rng(0)
q, k, v, do = (jnp.asarray(rng.standard_normal((B, T, H, D), np.float32)).astype(jnp.bfloat16) for _ in range(4))
jax.block_until_ready((q, k, v, do))
which = os.environ.get("WHICH", "ours,cudnn").split(",")
for causal in (True, False):
    fns = {}
    if "ours" in which:
        f = lambda q, k, v: workbench.flash_attention(q, k, v, causal=causal)
        fns["ours"] = f
    if "cudnn" in which:
        fns["cudnn"] = lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=causal, implementation="cudnn")
    for name, f in fns.items():
        fwd = jax.jit(f)
        fb = jax.jit(lambda q, k, v, do, f=f: jax.vjp(f, q, k, v)[1](do))
        fwd_c = fwd.lower(q, k, v).compile(); fb_c = fb.lower(q, k, v, do).compile()
        print(f"== {name} causal={causal} forward", flush=True, file=sys.stderr)
        jax.block_until_ready(fwd_c(q, k, v))
        print(f"== {name} causal={causal} forward+backward", flush=True, file=sys.stderr)
        jax.block_until_ready(fb_c(q, k, v, do))

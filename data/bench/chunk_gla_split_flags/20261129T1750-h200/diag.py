"""Which program of tests/chunk_gla/test_gpu.py::test_compiled_target_rows_bf16_within_budget compiles slowly
on the GPU: each of the three (triton, bf16 reference, float64 oracle), lowered and compiled alone, timed."""
import sys, time
import jax, jax.numpy as jnp
import workbench
from workbench.testing import random_cotangents, recurrent_inputs, to_float64
jax.config.update("jax_enable_x64", True)
which = sys.argv[1]
B, T, H, K, V = 2, 4096, 16, 64, 64
inputs = recurrent_inputs(7, B, T, H, K, V, dtype=jnp.bfloat16, gates=("gk",), strength=0.1, initial_state=False)
cts = random_cotangents(8, (jax.ShapeDtypeStruct((B, T, H, V), jnp.bfloat16), jax.ShapeDtypeStruct((B, H, K, V), jnp.float32)))
impl = "triton" if which == "triton" else "reference"
if which == "oracle":
    inputs, cts = to_float64(inputs), to_float64(cts)
names = [n for n in ("q", "k", "v", "g", "gk", "initial_state") if n in inputs]
fixed = {n: x for n, x in inputs.items() if n not in names}


def f(primals, cotangents):
    out, pullback = jax.vjp(lambda *xs: workbench.chunk_gla(**dict(zip(names, xs)), **fixed, implementation=impl), *primals)
    return out, pullback(cotangents)


with jax.default_matmul_precision("highest"):
    t0 = time.time()
    lowered = jax.jit(f).lower([inputs[n] for n in names], cts)
    t1 = time.time()
    print(which, "lowered", round(t1 - t0, 1), "s", flush=True)
    compiled = lowered.compile()
    t2 = time.time()
    print(which, "compiled", round(t2 - t1, 1), "s", flush=True)
    jax.block_until_ready(compiled([inputs[n] for n in names], cts))
    print(which, "ran", round(time.time() - t2, 1), "s", flush=True)

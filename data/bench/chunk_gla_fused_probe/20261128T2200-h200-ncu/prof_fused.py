"""Issue 48: one call of chunk_gla's forward (the op's kernels) and one of the fused prototype
(`../20261128T1930-prototype/fused_kernels.py`, one sweep, BV 64, 8 warps) at the target B8 T4096 H16 K=V=64 bf16,
for ncu to profile (inputs made before; both warmed first so that no compile or autotune runs under ncu's replay)."""
import os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "20261128T1930-prototype"))
import workbench  # noqa: F401  (first)
import jax
import probe_fused as pf

q, k, v, gk = pf.inputs(8, 4096, 16, 64, 64, jax.numpy.bfloat16)
op = jax.jit(pf.op_forward)
fused = jax.jit(lambda *x: pf.fused_forward(*x, BV=64, warps=8))
jax.block_until_ready((op(q, k, v, gk), fused(q, k, v, gk)))  # compiled, autotuned (table)
print("== profiled calls", file=sys.stderr, flush=True)
jax.block_until_ready(op(q, k, v, gk))
jax.block_until_ready(fused(q, k, v, gk))

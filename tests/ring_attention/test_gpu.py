"""The ring on real GPUs (compiled kernels, NCCL collective-permutes), at sizes the interpreter cannot
reach: skipped on CPU, and skipped with its reason where fewer than 2 GPUs are visible.

Ring vs flash attention's reference in the same dtype vs the float64 oracle, all on the gathered
sequence, with the 1.5× budget (`workbench.testing.compare`); forward and gradients under random
cotangents. As in tests/flash_attention/test_gpu.py, the yardsticks run under
`jax.default_matmul_precision("highest")` (XLA's TF32 default would make them meaningless); the ring
runs as a user calls it.
"""

import jax
import jax.numpy as jnp
import pytest

import workbench
from workbench import testing
from workbench.bench_ring import use_gspmd_on_gpus
from workbench.ring_attention.reference import ring_attention_ref

pytestmark = pytest.mark.gpu


def _mesh():
    n = jax.device_count()
    if n < 2:
        pytest.skip(f"ring attention needs ≥ 2 GPUs, this machine has {n}")
    use_gspmd_on_gpus()  # Shardy's compile of the ring crashes on GPUs (workbench/bench_ring.py)
    return jax.make_mesh((n,), ("sp",))


CASES = [  # (dtype, causal, layout, T per device, H, Hkv, D)
    ("bfloat16", True, "zigzag", 1024, 8, 2, 128),
    ("bfloat16", True, "contiguous", 1024, 8, 8, 128),
    ("bfloat16", False, "contiguous", 512, 4, 4, 64),
    ("float32", True, "zigzag", 512, 4, 1, 80),
    ("float32", False, "zigzag", 384, 4, 2, 128),
]


@pytest.mark.parametrize("dtype, causal, layout, T, H, Hkv, D", CASES,
                         ids=["-".join(map(str, c)) for c in CASES])
def test_ring_matches_full_sequence_on_gpus(dtype, causal, layout, T, H, Hkv, D):
    mesh = _mesh()
    n = mesh.size
    x = testing.attention_inputs(7, 1, n * T, n * T, H, Hkv, D, dtype=jnp.dtype(dtype))
    primals = (x["q"], x["k"], x["v"])
    do = testing.random_cotangents(8, x["q"])

    def ring(q, k, v):
        return workbench.sharded_ring_attention(q, k, v, mesh=mesh, axis_name="sp", causal=causal, layout=layout)

    def full(q, k, v):
        return ring_attention_ref(q, k, v, causal=causal)[0]

    o, grads = jax.jit(lambda p, c: testing.vjp_all(ring, p, c))(primals, do)
    with jax.default_matmul_precision("highest"):
        ref_o, ref_grads = jax.jit(lambda p, c: testing.vjp_all(full, p, c))(primals, do)
        oracle_o, oracle_grads = jax.jit(lambda p, c: testing.vjp_all(full, p, c))(
            testing.to_float64(primals), testing.to_float64(do))
    comparisons = [testing.compare(name, got, ref, want) for name, got, ref, want in
                   zip(("o", "dq", "dk", "dv"), (o, *grads), (ref_o, *ref_grads), (oracle_o, *oracle_grads))]
    print("\n".join(map(str, comparisons)))
    testing.assert_within_budget(comparisons)

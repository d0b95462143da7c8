"""The ring on real GPUs (compiled kernels, NCCL collective-permutes), at sizes the interpreter cannot
reach: skipped on CPU, and skipped with its reason where fewer than 2 GPUs are visible.

Ring vs flash attention's reference in the same dtype vs the float64 oracle, all on the gathered
sequence, with the 1.5× budget (`workbench.testing.compare`); forward and gradients under random
cotangents. As in tests/flash_attention/test_gpu.py, the yardsticks run under
`jax.default_matmul_precision("highest")` (XLA's TF32 default would make them meaningless); the ring
runs as a user calls it.

Gradients are held to the budget with the floor of tests/flash_attention/test_gpu.py
(`testing.compare_with_floor`): each block's backward takes P from the ring's merged lse and Delta =
rowsum(dO ∘ O) from its merged float32 O, so it inherits their rounding (largest on causal rows that
see one key, where the reference's dS cancels exactly); the floor is the float64 VJP at
`testing.attention_backward_cotangents` of the ring's own o and lse (`_ring_o_lse`).
"""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

import workbench
from workbench import testing
from workbench.ring_attention import _placed, _ring_forward, _Static, _to_zigzag
from workbench.ring_attention.reference import ring_attention_ref

pytestmark = pytest.mark.gpu


def _mesh():
    n = jax.device_count()
    if n < 2:
        pytest.skip(f"ring attention needs ≥ 2 GPUs, this machine has {n}")
    return jax.make_mesh((n,), ("sp",))


def _ring_o_lse(mesh, causal, layout, q, k, v):
    """The ring's merged o (float32) and lse `[B, H, T]` on the gathered sequence, in sequence order:
    what its backward reads (`_ring_forward`, with sharded_ring_attention's zigzag reordering)."""
    n = mesh.size
    st = _Static("sp", n, causal, q.shape[-1] ** -0.5, layout, "triton")

    def local(q, k, v):
        if layout == "zigzag":
            q, k, v = (_to_zigzag(x, "sp", n) for x in (q, k, v))
        o, lse = _ring_forward(q, k, v, st)
        lse = jnp.swapaxes(lse, 1, 2)  # [B, T, H]: the sequence on axis 1, as _to_zigzag expects
        if layout == "zigzag":
            o, lse = (_to_zigzag(x, "sp", n, inverse=True) for x in (o, lse))
        return o, lse

    spec = P(None, "sp")
    o, lse = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(spec, spec, spec), out_specs=(spec, spec)))(
        *(_placed(x, mesh, spec) for x in (q, k, v)))
    return o, jnp.swapaxes(lse, 1, 2)


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
    # gathered to one device: the float64 floor below mixes them with unsharded arrays
    ring_o, ring_lse = (jnp.asarray(jax.device_get(a)) for a in _ring_o_lse(mesh, causal, layout, *primals))
    with jax.default_matmul_precision("highest"):
        ref_o, ref_grads = jax.jit(lambda p, c: testing.vjp_all(full, p, c))(primals, do)
        primals64, do64 = testing.to_float64(primals), testing.to_float64(do)
        oracle_o, oracle_grads = jax.jit(lambda p, c: testing.vjp_all(full, p, c))(primals64, do64)
        oracle_lse = ring_attention_ref(*primals64, causal=causal)[1]
        dlse0 = jnp.zeros_like(oracle_lse)
        # (do', dlse'): the backward's cotangents, under which the exact VJP of (o, lse) is what it computes
        shifted = testing.attention_backward_cotangents(do64, dlse0, ring_o, ring_lse, oracle_o, oracle_lse)
        _, bound = jax.jit(lambda p, c: testing.vjp_all(lambda *x: ring_attention_ref(*x, causal=causal), p, c))(
            primals64, shifted)
    comparisons = [testing.compare("o", o, ref_o, oracle_o)]
    comparisons += [testing.compare_with_floor(name, got, ref, floor, want) for name, got, ref, floor, want in
                    zip(("dq", "dk", "dv"), grads, ref_grads, bound, oracle_grads)]
    print("\n".join(map(str, comparisons)))
    testing.assert_within_budget(comparisons)

"""Bad input to `workbench.chunk_kda` and `workbench.recurrent_kda` raises ValueError naming the
argument and the shapes it got (API.md, Conventions).

Each case starts from a valid call (checked first, so that every case can fail) and breaks one
thing. Validation runs before any kernel, so the failing cases are fast on both implementations.
"""

import workbench  # noqa: F401  (first: configures Triton's interpreter before triton loads)

import jax
import jax.numpy as jnp
import pytest

from tests.helpers import raises
from workbench.kda import WY_VARIANTS, Tuning, chunk_kda_wy_variant

B, T, H, K, V = 2, 5, 3, 4, 6
IMPLEMENTATIONS = ["triton", "reference"]
OPS = {"chunk_kda": lambda **a: workbench.chunk_kda(**a, chunk_size=16),
       "recurrent_kda": lambda **a: workbench.recurrent_kda(**a)}


def valid(packed=False):
    """Valid arguments with every optional input given ([1, 5, …] packed as 2 sequences)."""
    b = 1 if packed else B
    key = iter(jax.random.split(jax.random.key(0), 8))
    normal = lambda shape: jax.random.normal(next(key), shape, jnp.float32)  # noqa: E731
    args = dict(q=normal((b, T, H, K)), k=normal((b, T, H, K)), v=normal((b, T, H, V)),
                g=-jnp.abs(normal((b, T, H, K))), beta=jax.nn.sigmoid(normal((b, T, H))),
                initial_state=normal((2 if packed else b, H, K, V)))
    if packed:
        args["cu_seqlens"] = jnp.asarray([0, 2, T], jnp.int32)
    return args


def call(op, implementation, packed=False, **changes):
    args = {**valid(packed=packed), **changes}
    return OPS[op](**{n: x for n, x in args.items() if x is not None}, implementation=implementation)


@pytest.mark.parametrize("op, implementation, packed", [
    ("chunk_kda", "triton", True), ("chunk_kda", "reference", False),
    ("recurrent_kda", "triton", False), ("recurrent_kda", "reference", True)],
    ids=["chunk-triton-packed", "chunk-reference-batch", "recurrent-triton-batch", "recurrent-reference-packed"])
def test_valid_inputs_are_accepted(op, implementation, packed):
    args = {n: x for n, x in valid(packed=packed).items() if x is not None}
    o, ht = jax.jit(lambda a: OPS[op](**a, implementation=implementation))(args)
    assert o.shape == ((1 if packed else B), T, H, V)
    assert ht.shape == ((2 if packed else B), H, K, V)
    assert bool(jnp.all(jnp.isfinite(o)))


def _cases():
    a = valid()
    q, v = a["q"], a["v"]
    return {
        "q-rank-3": ("q", dict(q=q[0]), (T, H, K)),
        "k-other-T": ("k", dict(k=a["k"][:, :T - 1]), (B, T - 1, H, K)),
        "v-other-heads": ("v", dict(v=v[:, :, :2]), (B, T, 2, V)),
        "v-dtype-differs": ("q, k, v", dict(v=v.astype(jnp.bfloat16)), "bfloat16"),
        "q-int": ("q", dict(q=q.astype(jnp.int32)), "int32"),
        "g-per-head-only": ("g", dict(g=a["g"][..., 0]), (B, T, H)),
        "g-other-K": ("g", dict(g=a["g"][..., :2]), (B, T, H, 2)),
        "g-missing": ("g", dict(g=None), "NoneType"),
        "beta-per-key": ("beta", dict(beta=a["g"]), (B, T, H, K)),
        "beta-other-T": ("beta", dict(beta=a["beta"][:, 1:]), (B, T - 1, H)),
        "beta-int": ("beta", dict(beta=a["beta"].astype(jnp.int32)), "int32"),
        "initial_state-other-N": ("initial_state", dict(initial_state=a["initial_state"][:1]), (1, H, K, V)),
        "cu_seqlens-with-B-2": ("cu_seqlens", dict(cu_seqlens=jnp.asarray([0, 2, T], jnp.int32)), "batch size 1"),
    }


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", _cases().values(), ids=_cases().keys())
def test_bad_argument_raises(op, implementation, case):
    name, changes, shown = case
    args = {**valid(), **changes}
    with raises(name, shown):
        OPS[op](**args, implementation=implementation)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_bad_scale_raises(op, implementation):
    with raises("scale", "0.0"):
        OPS[op](**valid(), scale=0.0, implementation=implementation)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("bounds, shown", [([0, 3, 2], "non-decreasing"), ([1, 2, T], "start at 0"),
                                           ([0, 2, T - 1], "last entry")], ids=["decreasing", "start", "end"])
def test_bad_cu_seqlens_values_raise(op, implementation, bounds, shown):
    with raises("cu_seqlens", shown):
        call(op, implementation, packed=True, cu_seqlens=jnp.asarray(bounds, jnp.int32))


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("chunk_size", [0, 8, 48, 128, True, 64.0, "64"], ids=repr)
def test_bad_chunk_size_raises(implementation, chunk_size):
    with raises("chunk_size", repr(chunk_size)):
        workbench.chunk_kda(**valid(), chunk_size=chunk_size, implementation=implementation)


@pytest.mark.parametrize("op", OPS)
def test_bad_implementation_raises(op):
    with raises("implementation", "'cuda'"):
        OPS[op](**valid(), implementation="cuda")


@pytest.mark.parametrize("op", OPS)
def test_triton_refuses_head_dims_over_256(op):
    a = valid()
    q = jnp.zeros((B, T, H, 260), jnp.float32)
    with raises("q, v", "K=260"):
        OPS[op](**{**a, "q": q, "k": q, "g": q, "initial_state": None})


@pytest.mark.parametrize("K", [200, 256])
def test_two_level_state_pass_refuses_keys_wider_than_128(K):
    """NOTES.md, "Shared memory at K = 256": more than one segment is refused for K > 128 (on the Triton
    path; the reference has no segments), one segment is one sweep and runs."""
    a = valid()
    q = jnp.zeros((B, T, H, K), jnp.float32)
    wide = {**a, "q": q, "k": q, "g": q, "initial_state": None}
    with raises("tuning", "segments=2", str((B, T, H, K))):
        workbench.chunk_kda(**wide, tuning=Tuning(segments=2))
    jax.eval_shape(lambda: workbench.chunk_kda(**wide, tuning=Tuning(segments=1)))
    jax.eval_shape(lambda: workbench.chunk_kda(**wide, tuning=Tuning(segments=2), implementation="reference"))


def test_unknown_wy_variant_raises():
    assert "transposed_pointer" in WY_VARIANTS
    with raises("variant", "'transposed'"):
        chunk_kda_wy_variant(**valid(), variant="transposed")

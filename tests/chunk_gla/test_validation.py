"""Bad input to `workbench.chunk_gla` raises ValueError naming the argument (API.md, Conventions).

Each case starts from a valid call (checked first, so that every case can fail) and breaks one
thing. Validation runs before any kernel, so these tests are fast on both implementations.
"""

import workbench  # noqa: F401  (first: configures Triton's interpreter before triton loads)

import jax
import jax.numpy as jnp
import pytest

from tests.helpers import raises

from workbench import testing

B, T, H, K, V = 2, 5, 3, 4, 6
IMPLEMENTATIONS = ["triton", "reference"]


def valid(packed=False):
    """Valid arguments with every optional input given ([1, 5, …] packed as 2 sequences)."""
    b = 1 if packed else B
    key = iter(jax.random.split(jax.random.key(0), 8))
    normal = lambda shape: testing.normal(next(key), shape)  # noqa: E731
    args = dict(q=normal((b, T, H, K)), k=normal((b, T, H, K)), v=normal((b, T, H, V)),
                g=-jnp.abs(normal((b, T, H))), gk=-jnp.abs(normal((b, T, H, K))),
                initial_state=normal((2 if packed else b, H, K, V)))
    if packed:
        args["cu_seqlens"] = jnp.asarray([0, 2, T], jnp.int32)
    return args


def call(implementation, packed=False, **changes):
    args = {**valid(packed=packed), **changes}
    return workbench.chunk_gla(**{n: x for n, x in args.items() if x is not None}, chunk_size=16,
                               implementation=implementation)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("packed", [False, True], ids=["batch", "packed"])
def test_valid_inputs_are_accepted(implementation, packed):
    o, ht = call(implementation, packed=packed)
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
        "g-per-key": ("g", dict(g=a["gk"]), (B, T, H, K)),
        "gk-other-K": ("gk", dict(gk=a["gk"][..., :2]), (B, T, H, 2)),
        "initial_state-other-N": ("initial_state", dict(initial_state=a["initial_state"][:1]), (1, H, K, V)),
        "scale-zero": ("scale", dict(scale=0.0), "0.0"),
        "cu_seqlens-with-B-2": ("cu_seqlens", dict(cu_seqlens=jnp.asarray([0, 2, T], jnp.int32)), "batch size 1"),
    }


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", _cases().values(), ids=_cases().keys())
def test_bad_argument_raises(implementation, case):
    name, changes, shown = case
    if "scale" in changes:  # scale is keyword-only and not part of valid()
        with raises(name, shown):
            workbench.chunk_gla(**valid(), scale=changes["scale"], implementation=implementation)
        return
    with raises(name, shown):
        call(implementation, **changes)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("bounds, shown", [([0, 3, 2], "non-decreasing"), ([1, 2, T], "start at 0"),
                                           ([0, 2, T - 1], "last entry")], ids=["decreasing", "start", "end"])
def test_bad_cu_seqlens_values_raise(implementation, bounds, shown):
    with raises("cu_seqlens", shown):
        call(implementation, packed=True, cu_seqlens=jnp.asarray(bounds, jnp.int32))


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("chunk_size", [0, 8, 48, 128, True, 64.0, "64"], ids=repr)
def test_bad_chunk_size_raises(implementation, chunk_size):
    with raises("chunk_size", repr(chunk_size)):
        workbench.chunk_gla(**valid(), chunk_size=chunk_size, implementation=implementation)


def test_bad_implementation_raises():
    with raises("implementation", "'cuda'"):
        workbench.chunk_gla(**valid(), implementation="cuda")


def test_triton_refuses_head_dims_over_256():
    q = jnp.zeros((1, 2, 1, 260), jnp.float32)
    with raises("q, v", "K=260"):
        workbench.chunk_gla(q, q, jnp.zeros((1, 2, 1, 4), jnp.float32))

"""Bad input to `workbench.recurrent` raises ValueError naming the argument (API.md, Conventions).

Each case starts from a valid call (checked first, so that every case can fail) and breaks one
thing. Validation runs before any kernel, so these tests are fast on both implementations.
"""

import workbench  # noqa: F401  (first: configures Triton's interpreter before triton loads)

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import raises

from workbench import testing
from workbench.recurrent import Tuning

B, T, H, K, V = 2, 5, 3, 4, 6
IMPLEMENTATIONS = ["triton", "reference"]


def valid(dtype=jnp.float32, packed=False):
    """A valid set of arguments with every optional input given ([1, 5, …] packed as 2 sequences)."""
    b = 1 if packed else B
    key = iter(jax.random.split(jax.random.key(0), 8))
    normal = lambda shape: testing.normal(next(key), shape, dtype)  # noqa: E731
    args = dict(q=normal((b, T, H, K)), k=normal((b, T, H, K)), v=normal((b, T, H, V)),
                g=-jnp.abs(normal((b, T, H))), gk=-jnp.abs(normal((b, T, H, K))), gv=-jnp.abs(normal((b, T, H, V))),
                g_gamma=-jnp.linspace(0.1, 0.3, H, dtype=jnp.float32),
                initial_state=testing.normal(next(key), (2 if packed else b, H, K, V)))
    if packed:
        args["cu_seqlens"] = jnp.asarray([0, 2, T], jnp.int32)
    return args


def call(implementation, packed=False, **changes):
    args = {**valid(packed=packed), **changes}
    return workbench.recurrent(**{n: x for n, x in args.items() if x is not None}, implementation=implementation)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("packed", [False, True], ids=["batch", "packed"])
def test_valid_inputs_are_accepted(implementation, packed):
    o, ht = call(implementation, packed=packed)
    assert o.shape == ((1 if packed else B), T, H, V)
    assert ht.shape == ((2 if packed else B), H, K, V)
    assert bool(jnp.all(jnp.isfinite(o)))


# ----------------------------------------------------------------------------- shapes and ranks


def _shape_cases():
    a = valid()
    q, v = a["q"], a["v"]
    return {
        "q-rank-3": ("q", dict(q=q[0]), (T, H, K)),
        "q-rank-5": ("q", dict(q=q[None]), (1, B, T, H, K)),
        "k-rank-3": ("k", dict(k=a["k"][0]), (T, H, K)),
        "k-other-T": ("k", dict(k=a["k"][:, :T - 1]), (B, T - 1, H, K)),
        "k-other-heads": ("k", dict(k=a["k"][:, :, :H - 1]), (B, T, H - 1, K)),
        "k-other-K": ("k", dict(k=a["k"][..., :K - 1]), (B, T, H, K - 1)),
        "k-other-B": ("k", dict(k=a["k"][:1]), (1, T, H, K)),
        "v-rank-3": ("v", dict(v=v[0]), (T, H, V)),
        "v-other-heads": ("v", dict(v=v[:, :, :H - 1]), (B, T, H - 1, V)),
        "v-other-T": ("v", dict(v=v[:, 1:]), (B, T - 1, H, V)),
        "v-other-B": ("v", dict(v=v[:1]), (1, T, H, V)),
        "g-rank-4": ("g", dict(g=a["g"][..., None]), (B, T, H, 1)),
        "g-rank-2": ("g", dict(g=a["g"][:, :, 0]), (B, T)),
        "g-other-heads": ("g", dict(g=a["g"][:, :, :H - 1]), (B, T, H - 1)),
        "g-other-T": ("g", dict(g=a["g"][:, 1:]), (B, T - 1, H)),
        "gk-rank-3": ("gk", dict(gk=a["gk"][..., 0]), (B, T, H)),
        "gk-other-K": ("gk", dict(gk=a["gk"][..., :K - 1]), (B, T, H, K - 1)),
        "gk-has-V": ("gk", dict(gk=a["gv"]), (B, T, H, V)),
        "gk-other-heads": ("gk", dict(gk=a["gk"][:, :, :1]), (B, T, 1, K)),
        "gv-rank-3": ("gv", dict(gv=a["gv"][..., 0]), (B, T, H)),
        "gv-has-K": ("gv", dict(gv=a["gk"]), (B, T, H, K)),
        "gv-other-T": ("gv", dict(gv=a["gv"][:, :2]), (B, 2, H, V)),
        "g_gamma-rank-0": ("g_gamma", dict(g_gamma=a["g_gamma"][0]), ()),
        "g_gamma-rank-2": ("g_gamma", dict(g_gamma=a["g_gamma"][None]), (1, H)),
        "g_gamma-other-heads": ("g_gamma", dict(g_gamma=a["g_gamma"][:H - 1]), (H - 1,)),
        "initial_state-rank-3": ("initial_state", dict(initial_state=a["initial_state"][0]), (H, K, V)),
        "initial_state-other-N": ("initial_state", dict(initial_state=a["initial_state"][:1]), (1, H, K, V)),
        "initial_state-K-V-swapped": ("initial_state", dict(initial_state=jnp.swapaxes(a["initial_state"], -1, -2)),
                                      (B, H, V, K)),
        "initial_state-other-heads": ("initial_state", dict(initial_state=a["initial_state"][:, :1]), (B, 1, K, V)),
    }


SHAPE_CASES = _shape_cases()


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", SHAPE_CASES.values(), ids=SHAPE_CASES.keys())
def test_bad_shape_names_the_argument_and_its_shape(implementation, case):
    argument, changes, got = case
    with raises(argument, got):
        call(implementation, **changes)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_not_an_array(implementation):
    with raises("q", "list"):
        call(implementation, q=np.zeros((B, T, H, K)).tolist())


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_initial_state_must_have_one_entry_per_sequence(implementation):
    h0 = valid(packed=True)["initial_state"]
    with raises("initial_state", (1, H, K, V)):
        call(implementation, packed=True, initial_state=h0[:1])
    with raises("initial_state", (3, H, K, V)):
        call(implementation, packed=True, initial_state=jnp.concatenate([h0, h0[:1]]))


# ----------------------------------------------------------------------------- dtypes


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("name", ["q", "k", "v"])
def test_q_k_v_must_share_a_dtype(implementation, name):
    a = valid()
    with pytest.raises(ValueError, match=rf"\b{name}\b.*dtype"):
        call(implementation, **{name: a[name].astype(jnp.bfloat16)})


@pytest.mark.parametrize("name", ["q", "k", "v", "g", "gk", "gv", "g_gamma"])
def test_float64_is_refused_by_triton(name):
    a = valid()
    if name in ("q", "k", "v"):  # all three, so the dtype itself is what is wrong
        changes = {n: a[n].astype(jnp.float64) for n in ("q", "k", "v")}
        name = "q"
    else:
        changes = {name: a[name].astype(jnp.float64)}
    with raises(name, "float64"):
        call("triton", **changes)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("name", ["q", "g", "gk", "gv", "g_gamma", "initial_state"])
@pytest.mark.parametrize("dtype", [jnp.int32, jnp.bool_], ids=["int32", "bool"])
def test_non_float_inputs_are_refused(implementation, name, dtype):
    a = valid()
    if name == "q":
        changes = {n: a[n].astype(dtype) for n in ("q", "k", "v")}
    else:
        changes = {name: a[name].astype(dtype)}
    with raises(name, jnp.dtype(dtype).name):
        call(implementation, **changes)


def test_float64_is_accepted_by_the_reference():
    a = {n: x.astype(jnp.float64) for n, x in valid().items()}
    o, ht = workbench.recurrent(**a, implementation="reference")
    assert o.dtype == jnp.float64 and ht.dtype == jnp.float64


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=["bfloat16", "float16"])
def test_low_precision_inputs_are_accepted(dtype):
    a = valid(dtype=dtype)
    o, ht = workbench.recurrent(**a)
    assert o.dtype == dtype and ht.dtype == jnp.float32


# ----------------------------------------------------------------------------- cu_seqlens


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_cu_seqlens_needs_batch_size_one(implementation):
    a = valid()
    with raises("cu_seqlens", tuple(a["q"].shape)):
        call(implementation, cu_seqlens=jnp.asarray([0, 2, T], jnp.int32), initial_state=None)


CU_CASES = {
    "non-monotone": [0, 3, 2, T],
    "first-not-0": [1, 2, T],
    "negative-first": [-1, 2, T],
    "last-short": [0, 2, T - 1],
    "last-long": [0, 2, T + 1],
    "one-entry": [0],
}


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("bounds", CU_CASES.values(), ids=CU_CASES.keys())
def test_bad_cu_seqlens_values(implementation, bounds):
    with raises("cu_seqlens", bounds if len(bounds) > 1 else ""):
        call(implementation, packed=True, cu_seqlens=jnp.asarray(bounds, jnp.int32), initial_state=None)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("cu", [jnp.asarray([0.0, 2.0, T]), jnp.asarray([[0, 2, T]], jnp.int32), [0, 2, T]],
                         ids=["float", "2-D", "list"])
def test_cu_seqlens_must_be_a_1d_integer_array(implementation, cu):
    with raises("cu_seqlens"):
        call(implementation, packed=True, cu_seqlens=cu)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_bad_cu_seqlens_shape_is_caught_under_jit(implementation):
    args = valid(packed=True)
    run = jax.jit(lambda cu: workbench.recurrent(args["q"], args["k"], args["v"], cu_seqlens=cu,
                                                 implementation=implementation))
    with raises("cu_seqlens"):
        run(jnp.asarray([[0, 2, T]], jnp.int32))
    with raises("cu_seqlens"):
        run(jnp.asarray([0.0, 2.0, T]))


# ----------------------------------------------------------------------------- scalars and options


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("scale", [0.0, -0.5, float("nan"), float("inf")], ids=["zero", "negative", "nan", "inf"])
def test_scale_must_be_positive(implementation, scale):
    a = valid()
    with raises("scale"):
        workbench.recurrent(**a, scale=scale, implementation=implementation)


@pytest.mark.parametrize("implementation", ["Triton", "pallas", "", "ref"])
def test_unknown_implementation(implementation):
    with raises("implementation", repr(implementation)):
        workbench.recurrent(**valid(), implementation=implementation)


def test_traced_scale_is_refused():
    a = valid()
    with raises("scale"):
        jax.jit(lambda s: workbench.recurrent(**a, scale=s))(0.5)


def test_tuning_block_k_must_be_a_power_of_two():
    a = valid()
    diff = {n: a[n] for n in ("q", "k", "v")}
    loss = lambda d: jnp.vdot(workbench.recurrent(**d, tuning=Tuning(block_k=3))[0], a["v"])  # noqa: E731
    with raises("tuning.block_k", 3):
        jax.grad(loss)(diff)

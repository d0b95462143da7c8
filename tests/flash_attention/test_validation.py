"""Bad input to `workbench.flash_attention` raises ValueError naming the argument (API.md, Conventions).

Each case starts from a valid call with every optional input given and breaks one thing; the
message must start with the intended argument's name and show what it got, so a case cannot pass
by failing for another reason. Validation (`_validate.validate`) runs before any kernel, so the
error cases are fast on both implementations; only the valid calls run the op. Until the public
function exists, the cases call `validate` directly.
"""

import workbench  # noqa: F401  (first: configures Triton's interpreter before triton loads)

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import raises

from workbench import _checks, testing
from workbench.flash_attention._validate import Static, validate

B, TQ, TK, H, HKV, D = 2, 5, 6, 4, 2, 8
IMPLEMENTATIONS = ["triton", "reference"]
OPTIONS = dict(causal=False, scale=None, sliding_window=None, softcap=None, sinks=None, bias=None,
               segment_ids=None, cu_seqlens_q=None, cu_seqlens_k=None, dropout_rate=0.0, dropout_key=None,
               return_lse=False)
CU_Q, CU_K = [0, 2, TQ], [0, 4, TK]


def valid(dtype=jnp.float32, packed=False):
    """Valid arguments with every optional input given (packed: B = 1, two sequences)."""
    b = 1 if packed else B
    key = iter(jax.random.split(jax.random.key(0), 8))
    normal = lambda shape, dt=dtype: testing.normal(next(key), shape, dt)  # noqa: E731
    args = dict(q=normal((b, TQ, H, D)), k=normal((b, TK, HKV, D)), v=normal((b, TK, HKV, D)),
                causal=True, scale=0.3, sliding_window=3, softcap=2.0, sinks=normal((H,), jnp.float32),
                bias=normal((1, H, TQ, TK)),
                segment_ids=(jnp.asarray([[0, 0, 1, 1, 1]] * b, jnp.int32), jnp.asarray([[0, 0, 0, 1, 1, 1]] * b,
                                                                                        jnp.int32)),
                dropout_rate=0.1, dropout_key=jax.random.key(1), return_lse=True)
    if packed:
        args.update(cu_seqlens_q=jnp.asarray(CU_Q, jnp.int32), cu_seqlens_k=jnp.asarray(CU_K, jnp.int32))
    return args


def public():
    """`workbench.flash_attention` once the glue exists (the package itself is not callable)."""
    fa = getattr(workbench, "flash_attention", None)
    return fa if callable(fa) else None


def run(implementation, **args):
    fa = public()
    if fa is not None:
        return fa(**args, implementation=implementation)
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    return validate(q, k, v, **{**OPTIONS, **args}, impl=_checks.implementation_name(implementation))


ARRAYS = ("q", "k", "v", "sinks", "bias", "segment_ids", "cu_seqlens_q", "cu_seqlens_k", "dropout_key")


def run_jitted(implementation, **args):
    """A valid call, under `jit` (one compilation instead of op-by-op dispatch)."""
    arrays = {n: a for n, a in args.items() if n in ARRAYS}
    options = {n: a for n, a in args.items() if n not in ARRAYS}
    return jax.jit(lambda arrays: run(implementation, **arrays, **options))(arrays)


def call(implementation, packed=False, **changes):
    """The valid call with `changes`; the unchanged baseline is validated first."""
    base = valid(packed=packed)
    validate(**{n: base[n] for n in ("q", "k", "v")}, **{**OPTIONS, **{n: a for n, a in base.items()
                                                                        if n not in ("q", "k", "v")}},
             impl=implementation if implementation in IMPLEMENTATIONS else "reference")
    return run(implementation, **{**base, **changes})


def static(**changes):
    """`validate` of the valid reference call with `changes`: the returned Static."""
    args = {**valid(), **changes}
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    return validate(q, k, v, **{**OPTIONS, **args}, impl="reference")


# ----------------------------------------------------------------------------- valid calls


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("packed", [False, True], ids=["batch", "packed"])
def test_valid_inputs_are_accepted(implementation, packed):
    out = run_jitted(implementation, **valid(packed=packed))
    if public() is None:
        assert isinstance(out, Static)
        return
    o, lse = out
    b = 1 if packed else B
    assert o.shape == (b, TQ, H, D) and o.dtype == jnp.float32
    assert lse.shape == (b, H, TQ) and lse.dtype == jnp.float32
    assert bool(jnp.all(jnp.isfinite(o)))


def test_static_configuration():
    s = static()
    assert s == Static(scale=0.3, causal=True, window=(3, 0), softcap=2.0, dropout_rate=0.1, return_lse=True)
    assert static(scale=None).scale == D ** -0.5
    assert static(causal=False).window == (3, 3)
    assert static(sliding_window=[1, 2]).window == (1, 2)
    assert static(sliding_window=(0, 0)).window == (0, 0)
    assert static(sliding_window=np.int64(4), causal=False).window == (4, 4)
    assert static(sliding_window=None).window is None
    assert static(softcap=3).softcap == 3.0 and isinstance(static(softcap=3).softcap, float)
    assert static(dropout_rate=0, dropout_key=None).dropout_rate == 0.0
    assert static(causal=np.bool_(False)).causal is False
    hash(s)  # a static argument of jit / custom_vjp


def test_float64_is_accepted_by_the_reference():
    a = valid()
    for n in ("q", "k", "v", "bias", "sinks"):
        a[n] = a[n].astype(jnp.float64)
    out = run_jitted("reference", **a)
    if public() is not None:
        assert out[0].dtype == jnp.float64


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_float32_sinks_and_bias_with_bfloat16_inputs(implementation):
    a = valid(dtype=jnp.bfloat16)
    a["sinks"] = a["sinks"].astype(jnp.float32)
    a["bias"] = a["bias"].astype(jnp.float32)
    out = run_jitted(implementation, **a)
    if public() is not None:
        assert out[0].dtype == jnp.bfloat16 and out[1].dtype == jnp.float32


def test_reference_accepts_head_dims_past_256():
    a = valid()
    for n in ("q", "k", "v"):
        a[n] = jnp.zeros(a[n].shape[:3] + (264,), jnp.float32)
    static(**{n: a[n] for n in ("q", "k", "v")})


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_traced_cu_seqlens_are_accepted_under_jit(implementation):
    a = valid(packed=True)
    cu_q, cu_k = a.pop("cu_seqlens_q"), a.pop("cu_seqlens_k")
    out = jax.jit(lambda cq, ck: run(implementation, **a, cu_seqlens_q=cq, cu_seqlens_k=ck))(cu_q, cu_k)
    if public() is not None:
        assert out[0].shape == (1, TQ, H, D)


# ----------------------------------------------------------------------------- q, k, v


def _qkv_cases():
    a = valid()
    q, k, v = a["q"], a["k"], a["v"]
    dims = lambda d: {n: jnp.zeros(x.shape[:3] + (d,), x.dtype) for n, x in (("q", q), ("k", k), ("v", v))}  # noqa: E731
    heads = lambda n: dict(k=jnp.zeros((B, TK, n, D), k.dtype), v=jnp.zeros((B, TK, n, D), v.dtype))  # noqa: E731
    return {
        "q-rank-3": ("q", dict(q=q[0]), (TQ, H, D)),
        "q-rank-5": ("q", dict(q=q[None]), (1, B, TQ, H, D)),
        "k-rank-3": ("k", dict(k=k[0]), (TK, HKV, D)),
        "v-rank-5": ("v", dict(v=v[None]), (1, B, TK, HKV, D)),
        "k-other-batch": ("k", dict(k=k[:1], v=v[:1]), (1, TK, HKV, D)),
        "v-other-Tk": ("v", dict(v=v[:, 1:]), (B, TK - 1, HKV, D)),
        "v-other-heads": ("v", dict(v=v[:, :, :1]), (B, TK, 1, D)),
        "v-other-D": ("v", dict(v=v[..., 1:]), (B, TK, HKV, D - 1)),
        "k-v-other-D": ("k", dict(k=k[..., 1:], v=v[..., 1:]), (B, TK, HKV, D - 1)),
        "heads-not-a-multiple": ("k", heads(3), "Hkv=3"),
        "more-kv-heads": ("k", heads(8), "Hkv=8"),
        "D-0": ("q", dict(**dims(0)), (B, TQ, H, 0)),
        "H-0": ("q", dict(q=q[:, :, :0]), (B, TQ, 0, D)),
        "Hkv-0": ("k", dict(k=k[:, :, :0], v=v[:, :, :0]), (B, TK, 0, D)),
    }


QKV_CASES = _qkv_cases()


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", QKV_CASES.values(), ids=QKV_CASES.keys())
def test_bad_q_k_v(implementation, case):
    argument, changes, got = case
    with raises(argument, got):
        call(implementation, **changes)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_not_an_array(implementation):
    with raises("q", "list"):
        call(implementation, q=np.zeros((B, TQ, H, D)).tolist())


def test_triton_head_dim_at_most_256():
    a = valid()
    wide = {n: jnp.zeros(a[n].shape[:3] + (264,), jnp.float32) for n in ("q", "k", "v")}
    with raises("q", "D=264"):
        call("triton", **wide)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("name", ["k", "v"])
def test_q_k_v_must_share_a_dtype(implementation, name):
    with raises(name, "bfloat16"):
        call(implementation, **{name: valid()[name].astype(jnp.bfloat16)})


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("dtype", [jnp.int32, jnp.bool_, jnp.complex64], ids=["int32", "bool", "complex64"])
def test_non_float_q_k_v_are_refused(implementation, dtype):
    a = valid()
    with raises("q", jnp.dtype(dtype).name):
        call(implementation, **{n: a[n].astype(dtype) for n in ("q", "k", "v")})


def test_float64_is_refused_by_triton():
    a = valid()
    with raises("q", "float64"):
        call("triton", **{n: a[n].astype(jnp.float64) for n in ("q", "k", "v")})


# ----------------------------------------------------------------------------- options

OPTION_CASES = {
    "causal-int": ("causal", dict(causal=1), 1),
    "causal-str": ("causal", dict(causal="yes"), "yes"),
    "causal-None": ("causal", dict(causal=None), None),
    "causal-array": ("causal", dict(causal=jnp.asarray(True)), "Array"),
    "scale-zero": ("scale", dict(scale=0.0), 0.0),
    "scale-negative": ("scale", dict(scale=-0.5), -0.5),
    "scale-nan": ("scale", dict(scale=float("nan")), "nan"),
    "scale-inf": ("scale", dict(scale=float("inf")), "inf"),
    "scale-str": ("scale", dict(scale="0.1"), "str"),
    "scale-bool": ("scale", dict(scale=True), "bool"),
    "window-0": ("sliding_window", dict(sliding_window=0), 0),
    "window-negative": ("sliding_window", dict(sliding_window=-2), -2),
    "window-bool": ("sliding_window", dict(sliding_window=True), True),
    "window-float": ("sliding_window", dict(sliding_window=2.0), 2.0),
    "window-1-tuple": ("sliding_window", dict(sliding_window=(1,)), (1,)),
    "window-3-tuple": ("sliding_window", dict(sliding_window=(1, 2, 3)), (1, 2, 3)),
    "window-negative-left": ("sliding_window", dict(sliding_window=(-1, 0)), (-1, 0)),
    "window-negative-right": ("sliding_window", dict(sliding_window=(2, -1)), (2, -1)),
    "window-float-pair": ("sliding_window", dict(sliding_window=(1.0, 2)), (1.0, 2)),
    "window-bool-pair": ("sliding_window", dict(sliding_window=(True, 1)), (True, 1)),
    "window-str": ("sliding_window", dict(sliding_window="3"), "3"),
    "softcap-zero": ("softcap", dict(softcap=0.0), 0.0),
    "softcap-negative": ("softcap", dict(softcap=-1.0), -1.0),
    "softcap-inf": ("softcap", dict(softcap=float("inf")), "inf"),
    "softcap-nan": ("softcap", dict(softcap=float("nan")), "nan"),
    "softcap-bool": ("softcap", dict(softcap=True), "bool"),
    "softcap-array": ("softcap", dict(softcap=jnp.asarray(2.0)), "Array"),
    "dropout-1": ("dropout_rate", dict(dropout_rate=1.0), 1.0),
    "dropout-negative": ("dropout_rate", dict(dropout_rate=-0.1), -0.1),
    "dropout-nan": ("dropout_rate", dict(dropout_rate=float("nan")), "nan"),
    "dropout-bool": ("dropout_rate", dict(dropout_rate=True), "bool"),
    "dropout-str": ("dropout_rate", dict(dropout_rate="0.1"), "str"),
    "dropout-array": ("dropout_rate", dict(dropout_rate=jnp.asarray(0.1)), "Array"),
    "dropout-no-key": ("dropout_key", dict(dropout_key=None), "None"),
    "key-int": ("dropout_key", dict(dropout_key=3), "int"),
    "key-float": ("dropout_key", dict(dropout_key=jnp.zeros((2,), jnp.float32)), "float32"),
    "key-batch": ("dropout_key", dict(dropout_key=jax.random.split(jax.random.key(0), 3)), (3,)),
    "return_lse-int": ("return_lse", dict(return_lse=1), 1),
    "return_lse-None": ("return_lse", dict(return_lse=None), None),
}


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", OPTION_CASES.values(), ids=OPTION_CASES.keys())
def test_bad_options(implementation, case):
    argument, changes, got = case
    with raises(argument, got):
        call(implementation, **changes)


@pytest.mark.parametrize("name, value", [("scale", 0.3), ("softcap", 2.0), ("dropout_rate", 0.1),
                                         ("causal", True), ("sliding_window", 3)])
def test_traced_static_options_are_refused(name, value):
    with raises(name):
        jax.jit(lambda x: call("reference", **{name: x}))(value)


@pytest.mark.parametrize("implementation", ["Triton", "pallas", "", "ref"])
def test_unknown_implementation(implementation):
    with raises("implementation", repr(implementation)):
        call(implementation)


# ----------------------------------------------------------------------------- sinks, bias, segment_ids


def _input_cases():
    a = valid()
    sinks, bias = a["sinks"], a["bias"]
    q_ids, kv_ids = a["segment_ids"]
    return {
        "sinks-rank-0": ("sinks", dict(sinks=sinks[0]), ()),
        "sinks-rank-2": ("sinks", dict(sinks=sinks[None]), (1, H)),
        "sinks-other-H": ("sinks", dict(sinks=sinks[:HKV]), (HKV,)),
        "sinks-int": ("sinks", dict(sinks=sinks.astype(jnp.int32)), "int32"),
        "bias-rank-3": ("bias", dict(bias=bias[0]), (H, TQ, TK)),
        "bias-other-Tk": ("bias", dict(bias=bias[..., 1:]), (1, H, TQ, TK - 1)),
        "bias-Tq-Tk-swapped": ("bias", dict(bias=jnp.swapaxes(bias, -1, -2)), (1, H, TK, TQ)),
        "bias-other-B": ("bias", dict(bias=jnp.zeros((3, H, TQ, TK), jnp.float32)), (3, H, TQ, TK)),
        "bias-other-H": ("bias", dict(bias=jnp.zeros((1, HKV, TQ, TK), jnp.float32)), (1, HKV, TQ, TK)),
        "bias-int": ("bias", dict(bias=bias.astype(jnp.int32)), "int32"),
        "segments-one-array": ("segment_ids", dict(segment_ids=q_ids), "Array"),
        "segments-triple": ("segment_ids", dict(segment_ids=(q_ids, kv_ids, kv_ids)), "tuple"),
        "segments-float": ("segment_ids", dict(segment_ids=(q_ids.astype(jnp.float32), kv_ids)), "float32"),
        "segments-bool": ("segment_ids", dict(segment_ids=(q_ids, kv_ids > 0)), "bool"),
        "segments-q-shape": ("segment_ids", dict(segment_ids=(kv_ids, kv_ids)), (B, TK)),
        "segments-kv-shape": ("segment_ids", dict(segment_ids=(q_ids, q_ids)), (B, TQ)),
        "segments-rank-1": ("segment_ids", dict(segment_ids=(q_ids[0], kv_ids)), (TQ,)),
        "segments-lists": ("segment_ids", dict(segment_ids=(q_ids.tolist(), kv_ids)), "list"),
    }


INPUT_CASES = _input_cases()


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", INPUT_CASES.values(), ids=INPUT_CASES.keys())
def test_bad_optional_inputs(implementation, case):
    argument, changes, got = case
    with raises(argument, got):
        call(implementation, **changes)


def test_float64_sinks_and_bias_are_refused_by_triton():
    a = valid()
    with raises("sinks", "float64"):
        call("triton", sinks=a["sinks"].astype(jnp.float64))
    with raises("bias", "float64"):
        call("triton", bias=a["bias"].astype(jnp.float64))


@pytest.mark.parametrize("shape", [(B, H, TQ, TK), (1, 1, TQ, TK), (B, 1, TQ, TK)], ids=["BH", "11", "B1"])
def test_bias_broadcast_shapes_are_accepted(shape):
    static(bias=jnp.zeros(shape, jnp.float32))


# ----------------------------------------------------------------------------- cu_seqlens


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_cu_seqlens_come_in_pairs(implementation):
    cu_q, cu_k = jnp.asarray(CU_Q, jnp.int32), jnp.asarray(CU_K, jnp.int32)
    with raises("cu_seqlens_k", "cu_seqlens_q"):
        call(implementation, packed=True, cu_seqlens_k=None)
    with raises("cu_seqlens_q", "cu_seqlens_k"):
        call(implementation, packed=True, cu_seqlens_q=None)
    # and each alone is refused on a batch too
    with raises("cu_seqlens_k"):
        call(implementation, cu_seqlens_q=cu_q)
    with raises("cu_seqlens_q"):
        call(implementation, cu_seqlens_k=cu_k)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_cu_seqlens_need_batch_size_one(implementation):
    a = valid()
    with raises("cu_seqlens_q", tuple(a["q"].shape)):
        call(implementation, cu_seqlens_q=jnp.asarray([0, 2, TQ], jnp.int32),
             cu_seqlens_k=jnp.asarray([0, 2, TK], jnp.int32))


CU_CASES = {
    "q-non-monotone": ("cu_seqlens_q", dict(cu_seqlens_q=[0, 3, 2, TQ], cu_seqlens_k=[0, 1, 4, TK]), [0, 3, 2, TQ]),
    "q-first-not-0": ("cu_seqlens_q", dict(cu_seqlens_q=[1, 2, TQ]), [1, 2, TQ]),
    "q-last-short": ("cu_seqlens_q", dict(cu_seqlens_q=[0, 2, TQ - 1]), [0, 2, TQ - 1]),
    "q-last-is-Tk": ("cu_seqlens_q", dict(cu_seqlens_q=[0, 2, TK]), [0, 2, TK]),
    "k-last-is-Tq": ("cu_seqlens_k", dict(cu_seqlens_k=[0, 2, TQ]), [0, 2, TQ]),
    "k-non-monotone": ("cu_seqlens_k", dict(cu_seqlens_k=[0, 5, 4, TK], cu_seqlens_q=[0, 1, 2, TQ]), [0, 5, 4, TK]),
    "k-more-sequences": ("cu_seqlens_k", dict(cu_seqlens_k=[0, 2, 4, TK]), (4,)),
    "q-more-sequences": ("cu_seqlens_k", dict(cu_seqlens_q=[0, 1, 2, TQ]), (4,)),
    "q-one-entry": ("cu_seqlens_q", dict(cu_seqlens_q=[0]), (1,)),
}


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("case", CU_CASES.values(), ids=CU_CASES.keys())
def test_bad_cu_seqlens_values(implementation, case):
    argument, changes, got = case
    changes = {n: jnp.asarray(x, jnp.int32) for n, x in changes.items()}
    with raises(argument, got):
        call(implementation, packed=True, **changes)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("name", ["cu_seqlens_q", "cu_seqlens_k"])
@pytest.mark.parametrize("kind", ["float", "2-D", "list"])
def test_cu_seqlens_must_be_1d_integer_arrays(implementation, name, kind):
    bounds = CU_Q if name == "cu_seqlens_q" else CU_K
    cu = {"float": jnp.asarray(bounds, jnp.float32), "2-D": jnp.asarray([bounds], jnp.int32), "list": bounds}[kind]
    with raises(name):
        call(implementation, packed=True, **{name: cu})


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_bad_cu_seqlens_shape_is_caught_under_jit(implementation):
    a = valid(packed=True)
    cu_k = a.pop("cu_seqlens_k")
    a.pop("cu_seqlens_q")
    with raises("cu_seqlens_q"):
        jax.jit(lambda cq: run(implementation, **a, cu_seqlens_q=cq, cu_seqlens_k=cu_k))(
            jnp.asarray([CU_Q], jnp.int32))
    with raises("cu_seqlens_q"):
        jax.jit(lambda cq: run(implementation, **a, cu_seqlens_q=cq, cu_seqlens_k=cu_k))(
            jnp.asarray(CU_Q, jnp.float32))

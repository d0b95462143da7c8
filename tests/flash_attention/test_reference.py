"""`attention_ref` (workbench/flash_attention/reference.py) against an independent per-row NumPy
loop in float64 that writes every mask out as its condition, and its behaviour at the edges:
empty rows, Tq ≠ Tk, packed sequences, dtypes, gradients without NaN."""

import workbench  # noqa: F401  (first: configures Triton's interpreter before triton loads)

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from workbench import strategies
from workbench.flash_attention.dropout import dropout_keep_mask
from workbench.flash_attention.reference import allowed_mask, attention_ref

RTOL = 1e-12
STATIC = ("scale", "causal", "window", "softcap", "dropout_rate")
ref = jax.jit(attention_ref, static_argnames=STATIC)  # one compilation per configuration, not per op


# ----------------------------------------------------------------------------- the naive oracle


def sequence_of(t, cu):
    """(start, end) of the packed sequence holding row t (cu None: the whole axis)."""
    for n in range(len(cu) - 1):
        if cu[n] <= t < cu[n + 1]:
            return n, cu[n], cu[n + 1]
    raise AssertionError(f"row {t} outside cu_seqlens {cu}")


def naive_allowed(b, i, j, Tq, Tk, causal=False, window=None, segment_ids=None, cu_q=None, cu_k=None):
    """Whether query row i of batch b may attend to key row j, straight from API.md's wording."""
    if cu_q is not None:
        n, q0, q1 = sequence_of(i, cu_q)
        k0, k1 = cu_k[n], cu_k[n + 1]
        if not k0 <= j < k1:
            return False  # another sequence
        i, j, Lq, Lk = i - q0, j - k0, q1 - q0, k1 - k0
    else:
        Lq, Lk = Tq, Tk
    shifted = j - (Lk - Lq)
    if causal and not shifted <= i:
        return False
    if window is not None and not (i - window[0] <= shifted <= i + window[1]):
        return False
    if segment_ids is not None and segment_ids[0][b, i] != segment_ids[1][b, j]:
        return False
    return True


def naive_attention(q, k, v, *, scale, causal=False, window=None, softcap=None, sinks=None, bias=None,
                    segment_ids=None, cu_seqlens_q=None, cu_seqlens_k=None, dropout_rate=0.0,
                    dropout_mask=None):
    """One row at a time in float64: logits, softcap, mask, softmax with the sink, dropout, o."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    sinks, bias, dropout_mask = (None if x is None else np.asarray(x, np.float64) for x in (sinks, bias, dropout_mask))
    B, Tq, H, D = q.shape
    Tk, Hkv = k.shape[1], k.shape[2]
    ids = None if segment_ids is None else tuple(np.asarray(x) for x in segment_ids)
    cu_q = None if cu_seqlens_q is None else [int(c) for c in cu_seqlens_q]
    cu_k = None if cu_seqlens_k is None else [int(c) for c in cu_seqlens_k]
    o = np.zeros((B, Tq, H, D))
    lse = np.full((B, H, Tq), -np.inf)
    for b in range(B):
        for h in range(H):
            hk = h // (H // Hkv)
            for i in range(Tq):
                keys, logits = [], []
                for j in range(Tk):
                    if not naive_allowed(b, i, j, Tq, Tk, causal, window, ids, cu_q, cu_k):
                        continue
                    s = scale * float(q[b, i, h] @ k[b, j, hk])
                    if bias is not None:
                        s += float(bias[b if bias.shape[0] > 1 else 0, h if bias.shape[1] > 1 else 0, i, j])
                    if softcap is not None:
                        s = softcap * np.tanh(s / softcap)
                    keys.append(j)
                    logits.append(s)
                terms = logits + ([float(sinks[h])] if sinks is not None else [])
                if not terms:
                    continue
                top = max(terms)
                lse[b, h, i] = top + np.log(sum(np.exp(t - top) for t in terms))
                for j, s in zip(keys, logits):
                    p = np.exp(s - lse[b, h, i])
                    if dropout_mask is not None:
                        p = p * float(dropout_mask[b, h, i, j]) / (1 - dropout_rate)
                    o[b, i, h] += p * v[b, j, hk]
    return o, lse


# ----------------------------------------------------------------------------- inputs


def make(seed, B=2, Tq=6, Tk=7, H=4, Hkv=2, D=5, dtype=np.float64):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, Tq, H, D))
    k = rng.standard_normal((B, Tk, Hkv, D))
    v = rng.standard_normal((B, Tk, Hkv, D))
    return [jnp.asarray(x, dtype) for x in (q, k, v)], rng


def assert_close(actual, expected, rtol=RTOL):
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    np.testing.assert_array_equal(np.isneginf(actual), np.isneginf(expected))
    fin = np.isfinite(expected)
    np.testing.assert_allclose(actual[fin], expected[fin], rtol=rtol, atol=rtol * max(1.0, np.abs(expected[fin]).max(initial=0)))


def options(name, rng, B, Tq, Tk, H):
    """Keyword arguments of one named configuration (random parts from rng)."""
    ids = lambda T: jnp.asarray(np.sort(rng.integers(0, 3, (B, T)), axis=1), jnp.int32)  # noqa: E731
    return {
        "plain": {},
        "causal": dict(causal=True),
        "window": dict(window=(2, 1)),
        "window-causal": dict(window=(2, 3), causal=True),
        "window-0-0": dict(window=(0, 0)),
        "softcap": dict(softcap=1.5),
        "sinks": dict(sinks=jnp.asarray(rng.standard_normal(H) * 2)),
        "bias-full": dict(bias=jnp.asarray(rng.standard_normal((B, H, Tq, Tk)))),
        "bias-broadcast": dict(bias=jnp.asarray(rng.standard_normal((1, H, Tq, Tk)))),
        "bias-softcap": dict(bias=jnp.asarray(rng.standard_normal((B, 1, Tq, Tk))), softcap=0.8),
        "segments": dict(segment_ids=(ids(Tq), ids(Tk))),
        "window-segments": dict(window=(1, 1), segment_ids=(ids(Tq), ids(Tk))),
        "everything": dict(causal=True, window=(3, 0), softcap=2.0, sinks=jnp.asarray(rng.standard_normal(H)),
                           bias=jnp.asarray(rng.standard_normal((B, H, Tq, Tk))),
                           segment_ids=(ids(Tq), ids(Tk))),
        "dropout": dict(dropout_rate=0.3, dropout_mask=dropout_keep_mask(jax.random.key(1), (B, H, Tq, Tk), 0.3)),
    }[name]


CONFIGS = ["plain", "causal", "window", "window-causal", "window-0-0", "softcap", "sinks", "bias-full",
           "bias-broadcast", "bias-softcap", "segments", "window-segments", "everything", "dropout"]


# ----------------------------------------------------------------------------- forward vs the loop


SHAPES = {"square": (6, 6), "Tq>Tk": (6, 4), "Tq<Tk": (4, 7)}
UNEVEN = ("causal", "window-causal", "window-segments", "everything")  # where Tq ≠ Tk moves the masks
CASES = [(c, "square") for c in CONFIGS] + [(c, s) for c in UNEVEN for s in ("Tq>Tk", "Tq<Tk")]


@pytest.mark.parametrize("config, shape", CASES, ids=[f"{c}-{s}" for c, s in CASES])
def test_matches_the_naive_loop(config, shape):
    Tq, Tk = SHAPES[shape]
    (q, k, v), rng = make(sum(map(ord, config)) + Tq, Tq=Tq, Tk=Tk)
    kw = options(config, rng, 2, Tq, Tk, 4)
    o, lse = ref(q, k, v, scale=0.6, **kw)
    o_loop, lse_loop = naive_attention(q, k, v, scale=0.6, **kw)
    assert o.dtype == jnp.float64 and lse.dtype == jnp.float64
    assert o.shape == q.shape and lse.shape == (2, 4, Tq)
    assert_close(o, o_loop)
    assert_close(lse, lse_loop)


@pytest.mark.parametrize("Hkv", [1, 2, 4], ids=["MQA", "GQA", "MHA"])
def test_kv_heads(Hkv):
    (q, k, v), _ = make(3, Hkv=Hkv)
    o, lse = ref(q, k, v, scale=0.4, causal=True)
    o_loop, lse_loop = naive_attention(q, k, v, scale=0.4, causal=True)
    assert_close(o, o_loop)
    assert_close(lse, lse_loop)


def test_causal_more_queries_than_keys_has_empty_rows():
    """Bottom-right alignment: with Tq = Tk + 3 the first 3 query rows see no key."""
    (q, k, v), _ = make(4, Tq=7, Tk=4)
    o, lse = ref(q, k, v, scale=0.5, causal=True)
    assert np.all(np.asarray(o[:, :3]) == 0) and np.all(np.isneginf(np.asarray(lse[:, :, :3])))
    assert np.all(np.isfinite(np.asarray(lse[:, :, 3:])))
    # row 3 sees exactly key 0: its output is v_0 of its kv head
    np.testing.assert_allclose(o[:, 3, 0], v[:, 0, 0], rtol=1e-14)


def test_causal_fewer_queries_than_keys():
    """With Tq = Tk − 3, query i sees keys 0 … i + 3; the last query sees every key."""
    (q, k, v), _ = make(5, Tq=4, Tk=7)
    o, lse = ref(q, k, v, scale=0.5, causal=True)
    full_o, full_lse = ref(q, k, v, scale=0.5)
    assert_close(o[:, -1], full_o[:, -1])
    assert_close(lse[..., -1], full_lse[..., -1])
    mask = np.asarray(allowed_mask(1, 4, 7, causal=True))[0]
    np.testing.assert_array_equal(mask.sum(1), [4, 5, 6, 7])


def test_sink_without_keys():
    """A row with nothing to attend to but a sink: lse = sink, o = 0."""
    (q, k, v), _ = make(6, Tq=5, Tk=3)
    sinks = jnp.asarray([0.3, -1.0, 2.0, 0.0])
    o, lse = ref(q, k, v, scale=0.5, causal=True, sinks=sinks)
    assert np.all(np.asarray(o[:, :2]) == 0)
    np.testing.assert_array_equal(np.asarray(lse[:, :, :2]), np.broadcast_to(np.asarray(sinks)[None, :, None], (2, 4, 2)))


def test_allowed_mask_matches_the_conditions():
    rng = np.random.default_rng(7)
    B, Tq, Tk = 2, 6, 9
    ids = (rng.integers(0, 2, (B, Tq)), rng.integers(0, 2, (B, Tk)))
    for kw in (dict(causal=True), dict(window=(1, 2)), dict(causal=True, window=(2, 2)),
               dict(segment_ids=ids), dict(causal=True, window=(0, 0), segment_ids=ids)):
        got = np.asarray(allowed_mask(B, Tq, Tk, **{n: (tuple(map(jnp.asarray, x)) if n == "segment_ids" else x)
                                                    for n, x in kw.items()}))
        want = np.array([[[naive_allowed(b, i, j, Tq, Tk, **kw) for j in range(Tk)] for i in range(Tq)]
                         for b in range(B)])
        np.testing.assert_array_equal(got, want, err_msg=str(kw))


# ----------------------------------------------------------------------------- packed sequences

CU_Q = [0, 3, 3, 7, 8, 8]  # empty q sequences (1 and 4)
CU_K = [0, 2, 4, 9, 9, 11]  # an empty k sequence (3): its query row sees nothing


@pytest.mark.parametrize("kw", [dict(causal=True, window=(1, 0), softcap=1.2),
                                dict(window=(1, 2), sinks=jnp.asarray([0.5, -0.5, 1.0, 0.0]))],
                         ids=["causal-window-softcap", "window-sinks"])
def test_varlen_is_a_loop_over_sequences(kw):
    """Packed sequences equal the non-packed reference run on each sequence alone."""
    (q, k, v), rng = make(8, B=1, Tq=CU_Q[-1], Tk=CU_K[-1])
    bias = jnp.asarray(rng.standard_normal((1, 4, CU_Q[-1], CU_K[-1])))
    cu_q, cu_k = jnp.asarray(CU_Q, jnp.int32), jnp.asarray(CU_K, jnp.int32)
    o, lse = ref(q, k, v, scale=0.7, bias=bias, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, **kw)
    for n in range(len(CU_Q) - 1):
        rq, rk = slice(CU_Q[n], CU_Q[n + 1]), slice(CU_K[n], CU_K[n + 1])
        o_n, lse_n = ref(q[:, rq], k[:, rk], v[:, rk], scale=0.7, bias=bias[:, :, rq, rk], **kw)
        assert_close(o[:, rq], o_n)
        assert_close(lse[..., rq], lse_n)
    o_loop, lse_loop = naive_attention(q, k, v, scale=0.7, bias=bias, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, **kw)
    assert_close(o, o_loop)
    assert_close(lse, lse_loop)
    # the query of sequence 3 (row 7) has no key: o = 0 and lse = −inf unless a sink catches it
    assert np.all(np.asarray(o[:, 7]) == 0)
    if "sinks" not in kw:
        assert np.all(np.isneginf(np.asarray(lse[..., 7])))


def test_varlen_with_traced_cu_seqlens():
    (q, k, v), _ = make(9, B=1, Tq=CU_Q[-1], Tk=CU_K[-1])
    cu_q, cu_k = jnp.asarray(CU_Q, jnp.int32), jnp.asarray(CU_K, jnp.int32)
    run = jax.jit(lambda cq, ck: ref(q, k, v, scale=0.5, causal=True, cu_seqlens_q=cq, cu_seqlens_k=ck))
    o, lse = run(cu_q, cu_k)
    o_eager, lse_eager = ref(q, k, v, scale=0.5, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    assert_close(o, o_eager)
    assert_close(lse, lse_eager)
    # gradients through the traced bounds: the same as with concrete ones, finite for the empty row
    do, dlse = (jnp.asarray(np.random.default_rng(0).standard_normal(x.shape)) for x in (o, lse))
    grads = jax.jit(lambda cq, ck: jax.vjp(
        lambda q, k, v: ref(q, k, v, scale=0.5, causal=True, cu_seqlens_q=cq, cu_seqlens_k=ck), q, k, v
    )[1]((do, dlse)))(cu_q, cu_k)
    eager = jax.vjp(lambda q, k, v: ref(q, k, v, scale=0.5, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k),
                    q, k, v)[1]((do, dlse))
    for g, e in zip(grads, eager):
        assert np.all(np.isfinite(np.asarray(g)))
        assert_close(g, e)
    # other values, same shape: no retrace, a different answer
    cu_q2, cu_k2 = jnp.asarray([0, 8, 8, 8, 8, 8], jnp.int32), jnp.asarray([0, 11, 11, 11, 11, 11], jnp.int32)
    o2, _ = run(cu_q2, cu_k2)
    assert_close(o2, ref(q, k, v, scale=0.5, causal=True)[0])


# ----------------------------------------------------------------------------- gradients of empty rows


EMPTY_ROW_CASES = {
    "causal-Tq>Tk": dict(causal=True),
    "causal-softcap-bias": dict(causal=True, softcap=1.0, bias="full"),
    "causal-sinks": dict(causal=True, sinks=True),
    "segments-unmatched": dict(segment_ids=True),
    "window-dropout": dict(window=(0, 0), causal=True, dropout=True),
}


@pytest.mark.parametrize("case", EMPTY_ROW_CASES.values(), ids=EMPTY_ROW_CASES.keys())
def test_empty_rows_have_zero_not_nan_gradients(case):
    """Random cotangents for o and lse (finite, also on rows where lse = −inf): every gradient is
    finite, and an empty row contributes nothing: dq of its row is exactly 0."""
    B, Tq, Tk, H = 2, 7, 4, 4
    (q, k, v), rng = make(10, B=B, Tq=Tq, Tk=Tk, H=H)
    kw, diff = dict(case), dict(q=q, k=k, v=v)
    if kw.pop("bias", None):
        diff["bias"] = jnp.asarray(rng.standard_normal((B, H, Tq, Tk)))
    if kw.pop("sinks", None):
        diff["sinks"] = jnp.asarray(rng.standard_normal(H))
    if kw.pop("segment_ids", None):  # query segment 5 has no key
        kw["segment_ids"] = (jnp.asarray([[0, 0, 5, 1, 1, 5, 1]] * B), jnp.asarray([[0, 1, 1, 0]] * B))
    if kw.pop("dropout", None):
        kw.update(dropout_rate=0.5, dropout_mask=dropout_keep_mask(jax.random.key(2), (B, H, Tq, Tk), 0.5))
    o, vjp = jax.vjp(lambda d: ref(**d, scale=0.5, **kw), diff)
    empty = np.isneginf(np.asarray(o[1]))  # [B, H, Tq]
    if "sinks" not in diff:
        assert empty.any()
    do, dlse = (jnp.asarray(rng.standard_normal(x.shape)) for x in o)
    (grads,) = vjp((do, dlse))
    for name, g in grads.items():
        assert np.all(np.isfinite(np.asarray(g))), name
    rows = np.asarray(allowed_mask(B, Tq, Tk, **{n: x for n, x in kw.items() if n in ("causal", "window",
                                                                                       "segment_ids")}))
    no_keys = ~rows.any(-1)  # [B, Tq]
    assert no_keys.any()
    assert np.all(np.asarray(grads["q"])[no_keys] == 0)
    if "bias" in diff:
        assert np.all(np.asarray(grads["bias"]).transpose(0, 2, 1, 3)[no_keys] == 0)


# ----------------------------------------------------------------------------- dtypes and numerics


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
def test_dtypes_and_the_xla_path(dtype):
    """o in q's dtype, lse float32; the same numbers as `jax.nn.dot_product_attention`'s XLA path."""
    (q, k, v), _ = make(11, Tq=9, Tk=9, H=4, Hkv=2, D=16, dtype=dtype)
    o, lse = ref(q, k, v, scale=0.3, causal=True)
    assert o.dtype == dtype and lse.dtype == jnp.float32
    xla = jax.nn.dot_product_attention(q, k, v, scale=0.3, is_causal=True, implementation="xla")
    ulp = float(jnp.finfo(dtype).eps)
    np.testing.assert_allclose(np.asarray(o, np.float32), np.asarray(xla, np.float32), rtol=ulp, atol=ulp)
    o64, lse64 = ref(*(x.astype(jnp.float64) for x in (q, k, v)), scale=0.3, causal=True)
    assert o64.dtype == jnp.float64 and lse64.dtype == jnp.float64
    np.testing.assert_allclose(lse, lse64, rtol=1e-5)


def test_float32_sinks_with_bfloat16_inputs():
    (q, k, v), _ = make(12, dtype=jnp.bfloat16)
    sinks = jnp.asarray([0.1, 0.2, -0.3, 1.0], jnp.float32)
    o, lse = ref(q, k, v, scale=0.5, sinks=sinks)
    o64, lse64 = naive_attention(q, k, v, scale=0.5, sinks=sinks)
    assert o.dtype == jnp.bfloat16 and lse.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(lse), lse64, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(o, np.float64), o64, atol=2e-2)


# ----------------------------------------------------------------------------- a property


@st.composite
def configurations(draw):
    Tq, Tk = draw(st.sampled_from([1, 3, 5])), draw(st.sampled_from([1, 4, 6]))
    H, Hkv = draw(st.sampled_from([(1, 1), (2, 1), (4, 2)]))
    kw = dict(causal=draw(st.booleans()),
              window=draw(st.sampled_from([None, (0, 0), (1, 2), (3, 0)])),
              softcap=draw(st.sampled_from([None, 0.7])))
    flags = draw(st.sets(st.sampled_from(["sinks", "bias", "segments"])))
    return (Tq, Tk, H, Hkv), kw, flags, draw(strategies.seeds)


@given(configurations())
@example(((5, 1, 2, 1), dict(causal=True, window=(1, 2), softcap=None), {"sinks"}, 0))
def test_property_matches_the_naive_loop(config):
    (Tq, Tk, H, Hkv), kw, flags, seed = config
    (q, k, v), rng = make(seed, B=2, Tq=Tq, Tk=Tk, H=H, Hkv=Hkv, D=3)
    if "sinks" in flags:
        kw["sinks"] = jnp.asarray(rng.standard_normal(H))
    if "bias" in flags:
        kw["bias"] = jnp.asarray(rng.standard_normal((2, 1, Tq, Tk)))
    if "segments" in flags:
        kw["segment_ids"] = (jnp.asarray(rng.integers(0, 2, (2, Tq))), jnp.asarray(rng.integers(0, 2, (2, Tk))))
    o, lse = ref(q, k, v, scale=0.8, **kw)
    o_loop, lse_loop = naive_attention(q, k, v, scale=0.8, **kw)
    assert_close(o, o_loop)
    assert_close(lse, lse_loop)

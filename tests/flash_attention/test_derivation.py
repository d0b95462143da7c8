"""Checks of the derivation in workbench/flash_attention/NOTES.md, one test per tagged equation.

Each formula is evaluated here in NumPy (float64, tiny sizes) and compared with the definition
`attention_ref` (fa.1): its outputs for the forward formulas, its `jax.vjp` with random cotangents
for both `o` and `lse` for the backward ones. Where a formula has a tempting wrong variant (no lse
cotangent, the undropped output in Delta, the wrong head grouping, …) the test shows that the
variant is far off, so that the check can fail.

Arrays follow the reference's layouts: q, o [B, Tq, H, D]; k, v [B, Tk, Hkv, D]; logits and
probabilities [B, H, Tq, Tk]; lse, Delta [B, H, Tq].
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from workbench.flash_attention.dropout import dropout_keep_mask
from workbench.flash_attention.reference import allowed_mask, attention_ref

RTOL = 1e-10
SCALE = 0.6
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
STATIC = ("scale", "causal", "window", "softcap", "dropout_rate")


# ----------------------------------------------------------------------------- inputs and oracles


def make(seed, B=2, Tq=5, Tk=6, H=4, Hkv=2, D=3, sinks=False, bias=None, dropout=None):
    """Random float64 inputs (a dict of the reference's keyword arguments) and a NumPy Generator.

    bias: None or the bias shape's broadcast pattern, e.g. "BH", "1H", "B1", "11".
    dropout: None or the rate (the keep-mask comes from `dropout_keep_mask`).
    """
    rng = np.random.default_rng(seed)
    x = dict(q=rng.standard_normal((B, Tq, H, D)), k=rng.standard_normal((B, Tk, Hkv, D)),
             v=rng.standard_normal((B, Tk, Hkv, D)))
    if sinks:
        x["sinks"] = rng.standard_normal(H)
    if bias is not None:
        x["bias"] = rng.standard_normal((B if bias[0] == "B" else 1, H if bias[1] == "H" else 1, Tq, Tk))
    if dropout is not None:
        x["dropout_rate"] = dropout
        x["dropout_mask"] = np.asarray(dropout_keep_mask(jax.random.key(seed), (B, H, Tq, Tk), dropout))
    return x, rng


def cotangents(rng, x):
    """Random cotangents (do, dlse), never all-ones."""
    B, Tq, H, _ = x["q"].shape
    return rng.standard_normal(x["q"].shape), rng.standard_normal((B, H, Tq))


DIFFERENTIABLE = ("q", "k", "v", "bias", "sinks")


@functools.partial(jax.jit, static_argnames=STATIC)
def _definition_vjp(x, do, dlse, **static):
    diff = {n: x[n] for n in DIFFERENTIABLE if n in x}
    rest = {n: a for n, a in x.items() if n not in diff}
    out, pullback = jax.vjp(lambda d: attention_ref(**d, **rest, **static), diff)
    return out, pullback((do, dlse))[0]


def definition_vjp(x, do, dlse, **static):
    """((o, lse), {input: gradient}) of L = <do, o> + <dlse, lse> for the definition (fa.1)."""
    args = {n: tuple(map(jnp.asarray, a)) if n == "segment_ids" else jnp.asarray(a)
            for n, a in x.items() if n != "dropout_rate"}
    if "dropout_rate" in x:
        static["dropout_rate"] = x["dropout_rate"]
    out, grads = _definition_vjp(args, jnp.asarray(do), jnp.asarray(dlse), scale=SCALE, **static)
    return tuple(np.asarray(a) for a in out), {n: np.asarray(g) for n, g in grads.items()}


def definition(x, **static):
    """(o, lse) of the definition (fa.1) as NumPy arrays."""
    B, Tq, H, _ = x["q"].shape
    return definition_vjp(x, np.zeros(x["q"].shape), np.zeros((B, H, Tq)), **static)[0]


def repeat_kv(x):
    """k, v with each kv head repeated for its G = H / Hkv query heads (query head h → h // G)."""
    G = x["q"].shape[2] // x["k"].shape[2]
    return np.repeat(x["k"], G, axis=2), np.repeat(x["v"], G, axis=2)


def forward(x, causal=False, window=None, softcap=None, segment_ids=None):
    """(fa.1) in NumPy: a dict with s̃ (logits before the cap), s, A, lse, P, the dropout factor
    M / (1 − r), Pd and o. The mask A comes from `allowed_mask` (checked in test_reference.py)."""
    q = x["q"]
    B, Tq, H, _ = q.shape
    k, v = repeat_kv(x)
    Tk = k.shape[1]
    s_raw = SCALE * np.einsum("bihd,bjhd->bhij", q, k) + x.get("bias", 0.0)
    s = softcap * np.tanh(s_raw / softcap) if softcap is not None else s_raw
    A = np.asarray(allowed_mask(B, Tq, Tk, causal=causal, window=window, segment_ids=segment_ids))[:, None]
    s_masked = np.where(A, s, -np.inf)
    terms = [s_masked] + ([np.broadcast_to(x["sinks"][None, :, None, None], (B, H, Tq, 1))] if "sinks" in x else [])
    lse = np.logaddexp.reduce(np.concatenate(terms, -1), axis=-1)
    with np.errstate(over="ignore", invalid="ignore"):
        P = np.where(A, np.exp(s_masked - lse[..., None]), 0.0)
    drop = (x["dropout_mask"] / (1 - x["dropout_rate"])) if "dropout_mask" in x else np.ones_like(P)
    Pd = P * drop
    o = np.einsum("bhij,bjhd->bihd", Pd, v)
    return dict(s_raw=s_raw, s=s, A=A, lse=lse, P=P, drop=drop, Pd=Pd, o=o)


def backward(x, f, do, dlse, softcap=None, delta=None):
    """(fa.5, fa.6) in NumPy from the forward pieces f: dS, dS̃, Delta, dq, dk and dv per query head."""
    k, v = repeat_kv(x)
    dP = np.einsum("bihd,bjhd->bhij", do, v) * f["drop"]
    Delta = np.einsum("bihd,bihd->bhi", do, f["o"]) if delta is None else delta
    dS = f["P"] * (dP - (Delta - dlse)[..., None])
    dS_raw = dS * (1 - np.tanh(f["s_raw"] / softcap) ** 2) if softcap is not None else dS
    return dict(dP=dP, Delta=Delta, dS=dS, dS_raw=dS_raw,
                dq=SCALE * np.einsum("bhij,bjhd->bihd", dS_raw, k),
                dk=SCALE * np.einsum("bhij,bihd->bjhd", dS_raw, x["q"]),
                dv=np.einsum("bhij,bihd->bjhd", f["Pd"], do))


def group_sum(d, Hkv):
    """(fa.9) per-query-head gradients [B, Tk, H, D] summed over each kv head's group."""
    B, Tk, H, D = d.shape
    return d.reshape(B, Tk, Hkv, H // Hkv, D).sum(3)


def assert_close(actual, expected, rtol=RTOL):
    actual, expected = np.asarray(actual), np.asarray(expected)
    np.testing.assert_array_equal(np.isneginf(actual), np.isneginf(expected))
    fin = np.isfinite(expected)
    np.testing.assert_allclose(actual[fin], expected[fin], rtol=rtol,
                               atol=rtol * max(1.0, float(np.abs(expected[fin]).max(initial=0.0))))


def rel_diff(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


# ----------------------------------------------------------------------------- forward


def test_fa_1():
    """The definition in NumPy, every feature at once, against `attention_ref`; the sink takes the
    probability mass the keys do not."""
    x, rng = make(1, Tq=6, Tk=5, sinks=True, bias="BH", dropout=0.25)
    ids = (rng.integers(0, 2, (2, 6)), rng.integers(0, 2, (2, 5)))
    kw = dict(causal=True, window=(3, 0), softcap=1.3)
    f = forward(x, segment_ids=ids, **kw)
    o, lse = definition(dict(x, segment_ids=tuple(map(jnp.asarray, ids))), **kw)
    assert_close(o, f["o"])
    assert_close(lse, f["lse"])
    assert_close(f["P"].sum(-1), 1 - np.exp(x["sinks"][None, :, None] - lse))


def online_softmax(x, tiles, causal=False, base2=False):
    """(fa.2) one key tile at a time, with the sink as the initial state; (fa.4) in base 2."""
    q, (k, v) = x["q"], repeat_kv(x)
    B, Tq, H, D = q.shape
    Tk = k.shape[1]
    A = np.asarray(allowed_mask(B, Tq, Tk, causal=causal))[:, None]
    s = SCALE * np.einsum("bihd,bjhd->bhij", q, k)
    unit, exp = (LOG2E, np.exp2) if base2 else (1.0, np.exp)
    s = np.where(A, s * unit, -np.inf)  # s₂ = LOG2E · s in base 2
    drop = x["dropout_mask"] / (1 - x["dropout_rate"]) if "dropout_mask" in x else np.ones(s.shape)
    if "sinks" in x:
        m = np.broadcast_to(x["sinks"][None, :, None] * unit, (B, H, Tq)).copy()
        l = np.ones((B, H, Tq))
    else:
        m, l = np.full((B, H, Tq), -np.inf), np.zeros((B, H, Tq))
    a = np.zeros((B, H, Tq, D))
    bounds = np.cumsum([0] + list(tiles))
    assert bounds[-1] == Tk
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        s_t = s[..., lo:hi]
        m_new = np.maximum(m, s_t.max(-1, initial=-np.inf))
        m_use = np.where(np.isfinite(m_new), m_new, 0.0)  # nothing seen yet: subtract 0, not −∞
        alpha = exp(m - m_use)
        p = exp(s_t - m_use[..., None])
        l = alpha * l + p.sum(-1)
        a = alpha[..., None] * a + np.einsum("bhij,bjhd->bhid", p * drop[..., lo:hi], v[:, lo:hi])
        m = m_new
    with np.errstate(divide="ignore"):
        lse = LN2 * (m + np.log2(l)) if base2 else m + np.log(l)  # (fa.4) / (fa.2)
    lse = np.where(l > 0, lse, -np.inf)
    o = np.where(l[..., None] > 0, a / np.where(l > 0, l, 1.0)[..., None], 0.0)
    return o.transpose(0, 2, 1, 3), lse


TILINGS = {"one-tile": [7], "singletons": [1] * 7, "uneven": [3, 1, 3], "empty-tiles": [2, 0, 4, 1]}


@pytest.mark.parametrize("tiles", TILINGS.values(), ids=TILINGS.keys())
@pytest.mark.parametrize("sinks", [False, True], ids=["no-sink", "sink"])
def test_fa_2(tiles, sinks):
    """Any split of the keys into tiles gives the dense softmax; causal with Tq > Tk makes rows
    that are empty in early tiles (and empty rows), dropout rides along in the accumulator."""
    x, _ = make(2, Tq=9, Tk=7, sinks=sinks, dropout=0.3)
    o, lse = definition(x, causal=True)
    o_online, lse_online = online_softmax(x, tiles, causal=True)
    assert_close(o_online, o)
    assert_close(lse_online, lse)
    if not sinks:
        assert np.isneginf(lse).any()  # empty rows were exercised


def merge(o_a, lse_a, o_b, lse_b):
    """(fa.3) with the empty-empty guard; o [B, Tq, H, D], lse [B, H, Tq]."""
    lse = np.logaddexp(lse_a, lse_b)
    ref = np.where(np.isfinite(lse), lse, 0.0)
    w = lambda l: np.exp(l - ref).transpose(0, 2, 1)[..., None]  # noqa: E731
    return w(lse_a) * o_a + w(lse_b) * o_b, lse


def test_fa_3():
    """Keys split in two blocks (the sink with the first): merged partial results are the full
    result, rows empty in one block or in both included; the backward of one block from the merged
    lse and Delta gives the full dK, dV of its keys."""
    x, rng = make(3, Tq=6, Tk=7, sinks=True, bias="BH")
    q_ids = np.array([[0, 1, 1, 2, 0, 3]] * 2)  # segment 3 has no key; segment 2 only in block b
    kv_ids = np.array([[0, 1, 0, 1, 2, 2, 0]] * 2)
    cut = 4
    x_no_sink = {n: a for n, a in x.items() if n != "sinks"}
    blk = lambda y, r: dict(y, k=y["k"][:, r], v=y["v"][:, r], bias=y["bias"][..., r])  # noqa: E731
    a, b = slice(0, cut), slice(cut, None)
    ids = lambda r: dict(segment_ids=(jnp.asarray(q_ids), jnp.asarray(kv_ids[:, r])))  # noqa: E731
    o_a, lse_a = definition(dict(blk(x, a), **ids(a)))
    o_b, lse_b = definition(dict(blk(x_no_sink, b), **ids(b)))
    assert np.isneginf(lse_b).any()
    o, lse = merge(o_a, lse_a, o_b, lse_b)
    full = dict(x, segment_ids=(jnp.asarray(q_ids), jnp.asarray(kv_ids)))
    assert_close(o, definition(full)[0])
    assert_close(lse, definition(full)[1])
    # both parts empty and no sink anywhere: o = 0, lse = −∞
    o_a2, lse_a2 = definition(dict(blk(x_no_sink, a), **ids(a)))
    o2, lse2 = merge(o_a2, lse_a2, o_b, lse_b)
    assert_close(o2, definition(dict(x_no_sink, segment_ids=full["segment_ids"]))[0])
    assert np.isneginf(lse2[..., 5]).all() and np.all(o2[:, 5] == 0)

    # backward of block b alone, with the merged lse and the merged output's Delta
    do, dlse = cotangents(rng, x)
    _, grads = definition_vjp(full, do, dlse)
    f = forward(x, segment_ids=(q_ids, kv_ids))
    fb = forward(blk(x_no_sink, b), segment_ids=(q_ids, kv_ids[:, b]))
    fb["P"] = np.where(fb["A"], np.exp(fb["s"] - f["lse"][..., None]), 0.0)  # the full softmax's entries
    fb["Pd"] = fb["P"]
    delta = np.einsum("bihd,bihd->bhi", do, f["o"])
    d = backward(blk(x, b), fb, do, dlse, delta=delta)
    assert_close(group_sum(d["dk"], 2), grads["k"][:, b])
    assert_close(group_sum(d["dv"], 2), grads["v"][:, b])
    # with the block's own lse and Delta it would be wrong
    own = backward(blk(x, b), forward(blk(x_no_sink, b), segment_ids=(q_ids, kv_ids[:, b])), do, dlse)
    assert rel_diff(group_sum(own["dk"], 2), grads["k"][:, b]) > 1e-2


@pytest.mark.parametrize("sinks", [False, True], ids=["no-sink", "sink"])
def test_fa_4(sinks):
    """The online softmax in base 2 (s₂ = LOG2E · s, σ₂ = LOG2E · σ, lse = LN2 (m₂ + log₂ l))."""
    x, _ = make(4, Tq=6, Tk=7, sinks=sinks, dropout=0.2)
    o, lse = definition(x, causal=True)
    o2, lse2 = online_softmax(x, [3, 4], causal=True, base2=True)
    assert_close(o2, o)
    assert_close(lse2, lse)
    z = np.linspace(-30, 5, 11)
    assert_close(np.exp2(z * LOG2E), np.exp(z))
    # forgetting LN2 (an lse in bits) is far off
    fin = np.isfinite(lse)
    assert rel_diff(lse2[fin] / LN2, lse[fin]) > 0.1


# ----------------------------------------------------------------------------- backward


@pytest.mark.parametrize("dropout", [None, 0.4], ids=["no-dropout", "dropout"])
def test_fa_5(dropout):
    """dS = P ∘ (dP − (Delta − dlse)), dQ = scale dS K, dK = scale dSᵀ Q, dV = Pdᵀ dO, one head per kv
    head; Delta = rowsum(dO ∘ O) equals Σ_j P_ij dP_ij; the lse cotangent is needed."""
    x, rng = make(5, Hkv=4, dropout=dropout)
    do, dlse = cotangents(rng, x)
    _, grads = definition_vjp(x, do, dlse, causal=True)
    f = forward(x, causal=True)
    d = backward(x, f, do, dlse)
    assert_close(d["Delta"], (f["P"] * d["dP"]).sum(-1))
    assert_close(d["dq"], grads["q"])
    assert_close(d["dk"], grads["k"])
    assert_close(d["dv"], grads["v"])
    without_dlse = backward(x, f, do, np.zeros_like(dlse))
    assert rel_diff(without_dlse["dq"], grads["q"]) > 1e-2


def test_fa_6():
    """Softcap: dS̃ = dS ∘ (1 − tanh²(s̃/c)); dropping the factor is far off."""
    x, rng = make(6, bias="BH")
    c = 0.9
    do, dlse = cotangents(rng, x)
    _, grads = definition_vjp(x, do, dlse, softcap=c)
    d = backward(x, forward(x, softcap=c), do, dlse, softcap=c)
    assert_close(d["dq"], grads["q"])
    assert_close(group_sum(d["dk"], 2), grads["k"])
    assert_close(d["dS_raw"], grads["bias"])
    assert rel_diff(SCALE * np.einsum("bhij,bjhd->bihd", d["dS"], repeat_kv(x)[0]), grads["q"]) > 1e-2


@pytest.mark.parametrize("dropout", [None, 0.3], ids=["no-dropout", "dropout"])
def test_fa_7(dropout):
    """dσ_h = −Σ_{b,i} e^{σ_h − lse} (Delta − dlse), rows with a sink and no key included."""
    x, rng = make(7, Tq=8, Tk=5, sinks=True, dropout=dropout)
    do, dlse = cotangents(rng, x)
    (o, lse), grads = definition_vjp(x, do, dlse, causal=True)
    Delta = np.einsum("bihd,bihd->bhi", do, o)
    dsinks = -(np.exp(x["sinks"][None, :, None] - lse) * (Delta - dlse)).sum((0, 2))
    assert_close(dsinks, grads["sinks"])
    # rows 0-2 see only the sink: lse = σ, o = 0, and they pass dlse straight to σ
    assert_close(lse[..., :3], np.broadcast_to(x["sinks"][None, :, None], (2, 4, 3)))
    assert rel_diff(-(np.exp(x["sinks"][None, :, None] - lse) * Delta).sum((0, 2)), grads["sinks"]) > 1e-2


@pytest.mark.parametrize("pattern", ["BH", "1H", "B1", "11"])
def test_fa_8(pattern):
    """dbias = dS̃ summed over the broadcast dimensions (softcap on, so dS̃ ≠ dS)."""
    x, rng = make(8, bias=pattern)
    do, dlse = cotangents(rng, x)
    _, grads = definition_vjp(x, do, dlse, causal=True, softcap=1.1)
    d = backward(x, forward(x, causal=True, softcap=1.1), do, dlse, softcap=1.1)
    axes = tuple(n for n, c in enumerate(pattern) if c == "1")
    assert_close(d["dS_raw"].sum(axes, keepdims=True), grads["bias"])
    assert grads["bias"].shape == x["bias"].shape


@pytest.mark.parametrize("Hkv", [1, 2], ids=["MQA", "GQA"])
def test_fa_9(Hkv):
    """dK, dV of kv head g: the sum over query heads h with h // G = g (contiguous groups)."""
    x, rng = make(9, H=4, Hkv=Hkv)
    do, dlse = cotangents(rng, x)
    _, grads = definition_vjp(x, do, dlse, window=(2, 1))
    d = backward(x, forward(x, window=(2, 1)), do, dlse)
    assert_close(group_sum(d["dk"], Hkv), grads["k"])
    assert_close(group_sum(d["dv"], Hkv), grads["v"])
    assert_close(d["dq"], grads["q"])
    if Hkv > 1:  # interleaved groups (h % Hkv) are a different op
        B, Tk, H, D = d["dk"].shape
        interleaved = d["dk"].reshape(B, Tk, H // Hkv, Hkv, D).sum(2)
        assert rel_diff(interleaved, grads["k"]) > 1e-2


def test_fa_10():
    """Empty rows: o = 0, lse = −∞; the kernel's P = exp(s − lse) needs lse := +∞ there (with −∞
    it is NaN), and then its gradients are the definition's: zero for the row, finite everywhere."""
    x, rng = make(10, Tq=8, Tk=5, bias="BH")
    q_ids = np.array([[0, 0, 0, 0, 1, 9, 1, 0]] * 2)  # segment 9 has no key
    kv_ids = np.array([[0, 1, 0, 1, 1]] * 2)
    ids = (jnp.asarray(q_ids), jnp.asarray(kv_ids))
    do, dlse = cotangents(rng, x)
    (o, lse), grads = definition_vjp(dict(x, segment_ids=ids), do, dlse, causal=True)
    f = forward(x, causal=True, segment_ids=(q_ids, kv_ids))
    empty = ~f["A"][:, 0].any(-1)  # [B, Tq]: rows 0-2 (causal, Tq > Tk) and row 5 (segment 9)
    assert empty[:, [0, 1, 2, 5]].all() and empty.sum() == 8
    assert np.all(o.transpose(0, 2, 1, 3)[np.broadcast_to(empty[:, None], lse.shape)] == 0)
    assert np.isneginf(lse.transpose(0, 2, 1)[empty]).all()

    s_masked = np.where(f["A"], f["s"], -np.inf)
    with np.errstate(invalid="ignore"):
        assert np.isnan(np.exp(s_masked - lse[..., None])).any()  # the reason for the convention
    lse_bwd = np.where(np.isneginf(lse), np.inf, lse)
    f["P"] = np.exp(s_masked - lse_bwd[..., None])
    f["Pd"] = f["P"]
    d = backward(x, f, do, dlse)
    for name, g in grads.items():
        assert np.all(np.isfinite(g)), name
    assert np.all(grads["q"][empty] == 0)
    assert_close(d["dq"], grads["q"])
    assert_close(group_sum(d["dk"], 2), grads["k"])
    assert_close(group_sum(d["dv"], 2), grads["v"])
    assert_close(d["dS_raw"], grads["bias"])


def test_fa_11():
    """Dropout: averaged over many keys the output is the undropped one (within 5 standard errors);
    Delta must use the dropped output: the undropped one gives a wrong dQ."""
    rate, n_keys = 0.3, 3000
    x, rng = make(11, B=1, Tq=3, Tk=4, H=2, Hkv=1, D=2)
    q, k, v = (jnp.asarray(x[n]) for n in ("q", "k", "v"))
    undropped, _ = attention_ref(q, k, v, scale=SCALE)

    @jax.jit
    @jax.vmap
    def dropped(key):
        mask = dropout_keep_mask(key, (1, 2, 3, 4), rate)
        return attention_ref(q, k, v, scale=SCALE, dropout_rate=rate, dropout_mask=mask)[0]

    samples = np.asarray(dropped(jax.random.split(jax.random.key(0), n_keys)))
    mean, err = samples.mean(0), samples.std(0) / np.sqrt(n_keys)
    assert np.all(np.abs(mean - np.asarray(undropped)) < 5 * err + 1e-12)
    assert np.all(err > 0)

    x, rng = make(12, dropout=rate)
    do, dlse = cotangents(rng, x)
    _, grads = definition_vjp(x, do, dlse, causal=True)
    f = forward(x, causal=True)
    assert_close(backward(x, f, do, dlse)["dq"], grads["q"])
    o_undropped = np.einsum("bhij,bjhd->bihd", f["P"], repeat_kv(x)[1])
    wrong = backward(x, f, do, dlse, delta=np.einsum("bihd,bihd->bhi", do, o_undropped))
    assert rel_diff(wrong["dq"], grads["q"]) > 1e-2

"""Checks of the derivation in workbench/chunk_gla/NOTES.md, one test per tagged equation.

The formulas are evaluated directly here in NumPy (float64, one sequence and one head, T not a
multiple of the chunk) by `chunkwise`, and compared with the definition `recurrent_ref` (gla.1)
differentiated by `jax.vjp` with random cotangents for `o` and the final state. States the
definition does not return come from a NumPy loop of (gla.1) (itself checked against
`recurrent_ref`), and the gradient of the state at a chunk boundary is the gradient with respect to
`initial_state` of the definition run from that boundary on.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from workbench.chunk_gla.reference import chunk_gla_ref, parallel_ref, recurrent_ref

RTOL = 1e-10
SCALE = 0.7
T, K, V = 37, 4, 3


# ----------------------------------------------------------------------------- inputs and oracles


def make_inputs(seed, strength=1.0, T=T):
    """Random float64 inputs of one sequence and head (log-gates ≤ 0 of size `strength`), and cotangents."""
    rng = np.random.default_rng(seed)
    normal = lambda *shape: rng.standard_normal(shape)  # noqa: E731
    gate = lambda *shape: -strength * np.logaddexp(0.0, normal(*shape))  # noqa: E731  −softplus
    x = dict(q=normal(T, K), k=normal(T, K), v=normal(T, V), g=gate(T), gk=gate(T, K), S0=normal(K, V))
    return x, normal(T, V), normal(K, V)


def _batched(x):
    """[T, ·] arrays as the [1, T, 1, ·] arguments of the references."""
    return dict(q=x["q"][None, :, None], k=x["k"][None, :, None], v=x["v"][None, :, None],
                g=x["g"][None, :, None], gk=x["gk"][None, :, None], initial_state=x["S0"][None, None])


NAMES = ("q", "k", "v", "g", "gk", "initial_state")


@jax.jit
def _definition_vjp(args, do, dST):
    def run(*a):
        o, S = recurrent_ref(**dict(zip(NAMES, a)), scale=SCALE)
        return o[0, :, 0], S[0, 0]

    out, pullback = jax.vjp(run, *[args[n] for n in NAMES])
    return out, pullback((do, dST))


def definition_vjp(x, do, dST):
    """((o [T, V], S_T), {name: gradient}) of L = <do, o> + <dST, S_T> for the definition."""
    out, grads = _definition_vjp(_batched(x), do, dST)
    squeeze = {"g": lambda d: d[0, :, 0], "initial_state": lambda d: d[0, 0]}
    return (np.asarray(out[0]), np.asarray(out[1])), {
        n: np.asarray(squeeze.get(n, lambda d: d[0, :, 0])(d)) for n, d in zip(NAMES, grads)}


def states(x):
    """S_t for t = 0 … T by the loop of (gla.1): [T+1, K, V]."""
    S = [x["S0"]]
    for t in range(len(x["q"])):
        S.append(np.exp(x["g"][t] + x["gk"][t])[:, None] * S[-1] + np.outer(x["k"][t], x["v"][t]))
    return np.stack(S)


def chunkwise(x, do, dST, C, dtype=np.float64):
    """The chunkwise forward (gla.3–gla.5) and backward (gla.7–gla.10), evaluated in `dtype`.

    Returns a dict: o, ST, h (state at each chunk start), dH (gradient at each chunk end), dq, dk,
    dv, da (gradient of a = g + gk), dS0, and da_identity (the reverse-cumulative identity of
    NOTES.md, for the cancellation test).
    """
    f = lambda z: np.asarray(z, dtype)  # noqa: E731
    q, k, v, S0, do, dST = f(x["q"]), f(x["k"]), f(x["v"]), f(x["S0"]), f(do), f(dST)
    a = f(x["g"])[:, None] + f(x["gk"])
    n = len(q)
    bounds = [(s, min(s + C, n)) for s in range(0, n, C)]
    pieces = []
    h = S0
    for s0, s1 in bounds:  # forward: (gla.3) b, (gla.4) the next boundary state, (gla.5) o
        b = np.cumsum(a[s0:s1], axis=0)
        bL = b[-1]
        q_bar = SCALE * q[s0:s1] * np.exp(b)
        k_hat = k[s0:s1] * np.exp(bL - b)
        below = np.tril(np.ones((s1 - s0, s1 - s0), bool), -1)[:, :, None]
        W = np.where(below, np.exp(np.where(below, b[:, None] - b[None, :], 0)), 0)  # [r, s, K]
        A = SCALE * np.einsum("rk,sk,rsk->rs", q[s0:s1], k[s0:s1], W)
        A += SCALE * np.diag(np.einsum("rk,rk->r", q[s0:s1], k[s0:s1]))
        o = q_bar @ h + A @ v[s0:s1]
        pieces.append(dict(b=b, bL=bL, q_bar=q_bar, k_hat=k_hat, W=W, A=A, o=o, h=h))
        h = np.exp(bL)[:, None] * h + k_hat.T @ v[s0:s1]
    out = dict(o=np.concatenate([p["o"] for p in pieces]), ST=h, h=[p["h"] for p in pieces])

    dH = dST
    grads = {n: [] for n in ("dq", "dk", "dv", "da", "da_identity", "dH")}
    for (s0, s1), p in reversed(list(zip(bounds, pieces))):  # backward: last chunk first
        qc, kc, vc, doc = q[s0:s1], k[s0:s1], v[s0:s1], do[s0:s1]
        dA = np.tril(doc @ vc.T)
        dq_strict = SCALE * np.einsum("rs,sk,rsk->rk", dA, kc, p["W"])  # (gla.9), diagonal left out
        dk_strict = SCALE * np.einsum("rs,rk,rsk->sk", dA, qc, p["W"])
        dq_inter = SCALE * np.exp(p["b"]) * (doc @ p["h"].T)
        dq = dq_inter + dq_strict + SCALE * np.diag(dA)[:, None] * kc
        dk = np.exp(p["bL"] - p["b"]) * (vc @ dH.T) + dk_strict + SCALE * np.diag(dA)[:, None] * qc
        dv = p["A"].T @ doc + p["k_hat"] @ dH  # (gla.8)
        P = qc * dq_strict - kc * dk_strict + p["q_bar"] * (doc @ p["h"].T)  # (gla.10)
        X = p["k_hat"] * (vc @ dH.T)
        state = np.exp(p["bL"]) * np.sum(p["h"] * dH, axis=1)
        suffix = lambda z: np.cumsum(z[::-1], axis=0)[::-1]  # noqa: E731
        before = np.concatenate([np.zeros_like(X[:1]), np.cumsum(X, axis=0)[:-1]])  # Σ_{s<t} X_s
        da = suffix(P) + before + state
        da_identity = suffix(qc * dq - kc * dk) + np.sum(X, axis=0) + state
        grads["dH"].insert(0, dH)
        dH = np.exp(p["bL"])[:, None] * dH + p["q_bar"].T @ doc  # (gla.7)
        for name, value in (("dq", dq), ("dk", dk), ("dv", dv), ("da", da), ("da_identity", da_identity)):
            grads[name].insert(0, value)
    out.update({n: np.concatenate(g) for n, g in grads.items() if n != "dH"}, dH=grads["dH"], dS0=dH)
    return out


def assert_close(actual, expected, rtol=RTOL):
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    scale = max(np.max(np.abs(expected)), 1e-300)
    assert np.max(np.abs(actual - expected)) <= rtol * scale, np.max(np.abs(actual - expected)) / scale


CHUNKS = pytest.mark.parametrize("C", [16, 32, 64])


# ----------------------------------------------------------------------------- forms


def test_gla_1():
    """g and gk fold into one per-key log-decay; dg is the sum over keys of its gradient."""
    x, do, dST = make_inputs(0)
    (o, S), grads = definition_vjp(x, do, dST)
    folded = dict(x, g=np.zeros(T), gk=x["g"][:, None] + x["gk"])
    (o2, S2), grads2 = definition_vjp(folded, do, dST)
    assert_close(o2, o)
    assert_close(S2, S)
    assert_close(grads2["gk"], grads["gk"])
    assert_close(grads2["gk"].sum(-1), grads["g"])
    S_loop = states(x)
    assert_close(S_loop[-1], S)
    assert_close(np.einsum("tkv,tk->tv", S_loop[1:], SCALE * x["q"]), o)


def test_gla_2():
    x, _, _ = make_inputs(1)
    o, S = parallel_ref(**_batched(x), scale=SCALE)
    o_def, S_def = recurrent_ref(**_batched(x), scale=SCALE)
    assert_close(o, o_def)
    assert_close(S, S_def)


@CHUNKS
def test_gla_3(C):
    """Every state inside a chunk from the chunk's start state and its local prefix sums."""
    x, _, _ = make_inputs(2)
    S = states(x)
    a = x["g"][:, None] + x["gk"]
    for t0 in range(0, T, C):
        b = np.cumsum(a[t0:t0 + C], axis=0)
        for r in range(len(b)):
            weights = x["k"][t0:t0 + r + 1] * np.exp(b[r] - b[:r + 1])
            assert_close(np.exp(b[r])[:, None] * S[t0] + weights.T @ x["v"][t0:t0 + r + 1], S[t0 + r + 1])


@CHUNKS
def test_gla_4(C):
    x, do, dST = make_inputs(3)
    S = states(x)
    out = chunkwise(x, do, dST, C)
    for c, h in enumerate(out["h"]):
        assert_close(h, S[c * C])
    assert_close(out["ST"], S[-1])


@CHUNKS
def test_gla_5(C):
    x, do, dST = make_inputs(4)
    (o, S), _ = definition_vjp(x, do, dST)
    assert_close(chunkwise(x, do, dST, C)["o"], o)
    o_ref, S_ref = jax.jit(chunk_gla_ref, static_argnames=("scale", "chunk_size"))(**_batched(x), scale=SCALE,
                                                                                    chunk_size=C)
    assert_close(o_ref[0, :, 0], o)
    assert_close(S_ref[0, 0], S)


def test_gla_6():
    """Log-decays of −12 per step: b reaches −800 inside a chunk of 64, exp(−b) is infinite in
    float32, yet both factors of (gla.6) stay in (0, 1] and their product is the ratio."""
    rng = np.random.default_rng(5)
    a = -12.0 * np.logaddexp(0.0, rng.standard_normal((64, 8)))
    b = np.cumsum(a, axis=0).astype(np.float32)
    assert b.min() < -500
    with np.errstate(over="ignore"):
        assert np.isinf(np.exp(-b)).any()  # the naive factorisation exp(b_r) · exp(−b_s) overflows
    n_checked = 0
    for n in range(16, 64, 16):  # the first row of each later sub-chunk
        for r in range(n, 64):
            for s in range(n):
                left, right = np.exp(b[r] - b[n]), np.exp(b[n] - b[s])
                assert np.all((left <= 1) & (right <= 1)) and np.all(np.isfinite(left * right))
                direct = np.exp(np.float64(b[r]) - np.float64(b[s]))
                np.testing.assert_allclose(left.astype(np.float64) * right, direct, rtol=1e-5, atol=1e-30)
                n_checked += 1
    assert n_checked > 1000


def _own_block_products(b, q, k, n):
    """A sub-chunk's own block (rows n … n+15) through reference row n, in float32 as the kernel forms
    it: (q ⊙ exp(b − b_n)) (k ⊙ exp(b_n − b))ᵀ masked to s ≤ r; and the same block in float64 directly."""
    rows = slice(n, n + 16)
    bq = np.exp(b[rows] - b[n]).astype(np.float32)
    bk = np.exp(b[n] - b[rows]).astype(np.float32)
    factored = np.tril((q[rows] * bq) @ (k[rows] * bk).T)
    b64 = b.astype(np.float64)
    direct = np.tril(np.einsum("rk,sk,rsk->rs", q[rows].astype(np.float64), k[rows].astype(np.float64),
                               np.exp(b64[rows][:, None, :] - b64[rows][None, :, :])))
    return factored, direct, bq, bk


def test_gla_11():
    """Where a sub-chunk's span ρ_I = max_k (b_n − b_m) is at most ρ = DIRECT_RANGE, its own block is one
    product through row n: factors in [e^−ρ, e^ρ], every kept entry as accurate as the direct form
    (float32 rounding only). Beyond the bound the same split breaks (a factor overflows or underflows
    while the true weight is ~1), which is why the kernels fall back to the row loop there."""
    from workbench.chunk_gla.kernels import DIRECT_RANGE

    assert DIRECT_RANGE == 20.0  # NOTES.md quotes it
    rng = np.random.default_rng(11)
    q = rng.standard_normal((64, 8)).astype(np.float32)
    k = rng.standard_normal((64, 8)).astype(np.float32)
    for per_step in (0.05, 0.5, 1.2):  # spans of ~1, ~10, ~19 over 16 rows
        a = -per_step * np.ones((64, 8)) * rng.uniform(0.5, 1.0, (1, 8)) * 2.0 / 1.5
        b = np.cumsum(a, axis=0).astype(np.float32)
        for n in range(0, 64, 16):
            span = float(np.max(b[n] - b[n + 15]))
            if span > DIRECT_RANGE:
                continue
            factored, direct, bq, bk = _own_block_products(b, q, k, n)
            assert bq.max() <= 1 and bq.min() >= np.exp(-DIRECT_RANGE) * (1 - 1e-6)
            assert bk.min() >= 1 and bk.max() <= np.exp(DIRECT_RANGE) * (1 + 1e-6)
            scale = np.abs(q[n:n + 16]) @ np.abs(k[n:n + 16]).T  # the size of each entry's terms
            err = np.abs(factored - direct) / np.tril(scale).clip(1e-30)
            assert np.tril(err).max() < 2e-6, (per_step, n, span, np.tril(err).max())
    # the reason for the bound: a span of ~300 (log-decays of −20 per step) overflows exp(b_n − b_s)
    b = np.cumsum(-20.0 * np.ones((64, 8)), axis=0).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        factored, direct, _, _ = _own_block_products(b, q, k, 16)
    assert not np.allclose(factored, direct, rtol=1e-3, atol=1e-6)


def test_gla_12():
    """A chunk whose span max_k (b_0 − b_L) is at most ρ: A, dq° and dk° through its first row, in float32,
    equal the direct float64 sums to float32 rounding (every factor in [e^−ρ, e^ρ]); a first gate of
    −100 (b_0 = −100, outside the span) does not matter, and rows past a short chunk's end must be
    masked before exp (there b would read 0 and exp(−b_0) = e^100 overflows float32)."""
    from workbench.chunk_gla.kernels import DIRECT_RANGE

    rng = np.random.default_rng(12)
    C, Kd = 64, 8
    q, k, dA = (rng.standard_normal(shape).astype(np.float32) for shape in ((C, Kd), (C, Kd), (C, C)))
    a = -rng.uniform(0.0, 0.6, (C, Kd))
    a[0] = -100.0
    b = np.cumsum(a, axis=0).astype(np.float32)
    assert np.max(b[0] - b[-1]) <= DIRECT_RANGE
    e_q, e_k = np.exp(b - b[0]), np.exp(b[0] - b)
    assert e_q.min() >= np.exp(-DIRECT_RANGE) and e_k.max() <= np.exp(DIRECT_RANGE)
    lower, strict = np.tril(np.ones((C, C))), np.tril(np.ones((C, C)), -1)
    A = ((q * e_q) @ (k * e_k).T) * lower
    dq = e_q * ((dA * strict) @ (k * e_k))
    dk = e_k * ((dA * strict).T @ (q * e_q))
    b64 = b.astype(np.float64)
    ratio = np.exp(b64[:, None, :] - b64[None, :, :]) * strict[:, :, None]  # [r, s, k], s < r
    A_direct = np.einsum("rk,sk,rsk->rs", q, k, ratio) + np.diag(np.sum(q * k, axis=1))
    dq_direct = np.einsum("rs,sk,rsk->rk", dA, k, ratio)
    dk_direct = np.einsum("rs,rk,rsk->sk", dA, q, ratio)
    size = lambda x, y: np.abs(x) @ np.abs(y)  # noqa: E731  the size of each entry's terms
    assert np.max(np.abs(A - A_direct) / (size(q, k.T) + 1e-30)) < 1e-5
    assert np.max(np.abs(dq - dq_direct) / (size(np.abs(dA), np.abs(k)) + 1e-30)) < 1e-5
    assert np.max(np.abs(dk - dk_direct) / (size(np.abs(dA).T, np.abs(q)) + 1e-30)) < 1e-5
    with np.errstate(over="ignore"):
        assert np.isinf(np.exp(np.float32(0.0) - b[0])).any()  # an unmasked row past the end


# ----------------------------------------------------------------------------- backward


@CHUNKS
def test_gla_7(C):
    """dH at every chunk boundary is the initial-state gradient of the definition run from there."""
    x, do, dST = make_inputs(6)
    S = states(x)
    out = chunkwise(x, do, dST, C)
    _, grads = definition_vjp(x, do, dST)
    assert_close(out["dS0"], grads["initial_state"])
    for c in range(1, len(out["h"])):  # the gradient of the state at the end of chunk c − 1
        t0 = c * C
        tail = {n: x[n][t0:] for n in ("q", "k", "v", "g", "gk")}
        _, tail_grads = definition_vjp(dict(tail, S0=S[t0]), do[t0:], dST)
        assert_close(out["dH"][c - 1], tail_grads["initial_state"])
    assert_close(out["dH"][-1], dST)


@CHUNKS
def test_gla_8(C):
    x, do, dST = make_inputs(7)
    _, grads = definition_vjp(x, do, dST)
    assert_close(chunkwise(x, do, dST, C)["dv"], grads["v"])


@CHUNKS
def test_gla_9(C):
    x, do, dST = make_inputs(8)
    _, grads = definition_vjp(x, do, dST)
    out = chunkwise(x, do, dST, C)
    assert_close(out["dq"], grads["q"])
    assert_close(out["dk"], grads["k"])


@CHUNKS
@pytest.mark.parametrize("strength", [0.1, 1.0, 5.0])
def test_gla_10(C, strength):
    x, do, dST = make_inputs(9, strength)
    _, grads = definition_vjp(x, do, dST)
    out = chunkwise(x, do, dST, C)
    assert_close(out["da"], grads["gk"])
    assert_close(out["da"].sum(-1), grads["g"])
    assert_close(out["da_identity"], grads["gk"], rtol=1e-8)  # the identity is exact in exact arithmetic


def test_gla_10_has_no_cancellation_under_strong_decay():
    """float32, log-decays near −12: (gla.10) errs only by the rounding of the prefix sums, ε · max |b|
    (NOTES.md, "Precision"); the identity's cancellation costs it more than ten times that."""
    x, do, dST = make_inputs(10, strength=12.0)
    _, grads = definition_vjp(x, do, dST)
    truth = grads["gk"]
    b_max = np.abs(np.cumsum(x["g"][:, None] + x["gk"], axis=0)).max()
    out = chunkwise(x, do, dST, 64, dtype=np.float32)
    rel = lambda z: np.sqrt(np.mean((z - truth) ** 2) / np.mean(truth ** 2))  # noqa: E731
    assert rel(out["da"]) < 2.0 ** -24 * b_max, (rel(out["da"]), b_max)
    assert rel(out["da_identity"]) > 10 * rel(out["da"]), (rel(out["da_identity"]), rel(out["da"]))


# ----------------------------------------------------------------------------- two-level state pass


def _chunk_maps(x, C, dtype=np.float64):
    """Per chunk (ℓ_c, U_c, W_c): the forward map h ↦ exp(ℓ) ⊙ h + U (gla.4) and the backward one
    dH ↦ exp(ℓ) ⊙ dH + W (gla.7, W = Σ_r q̄_rᵀ do_r; do is passed in x["do"])."""
    f = lambda z: np.asarray(z, dtype)  # noqa: E731
    a = f(x["g"])[:, None] + f(x["gk"])
    maps = []
    for s0 in range(0, len(a), C):
        s1 = min(s0 + C, len(a))
        b = np.cumsum(a[s0:s1], axis=0)
        k_hat = f(x["k"][s0:s1]) * np.exp(b[-1] - b)
        q_bar = SCALE * f(x["q"][s0:s1]) * np.exp(b)
        maps.append((b[-1], k_hat.T @ f(x["v"][s0:s1]), q_bar.T @ f(x["do"][s0:s1])))
    return maps


def _two_level(ells, updates, init, cuts, reverse=False):
    """(gla.13) on chunk maps (ℓ_c, U_c): segments [cuts[j], cuts[j+1]) swept from zero, the pass across
    segments from `init`, the correction. Returns (state at every chunk — before it is applied, final)."""
    n = len(ells)
    order = list(range(n))[::-1] if reverse else list(range(n))
    position = {c: i for i, c in enumerate(order)}  # segments are runs in the walking order
    segments = [order[cuts[j]:cuts[j + 1]] for j in range(len(cuts) - 1)]
    local, ends, lams = [None] * n, [], []
    for seg in segments:
        h, lam = np.zeros_like(init), np.zeros_like(ells[0])
        for c in seg:
            local[c] = h
            h = np.exp(ells[c])[:, None] * h + updates[c]
            lam = lam + ells[c]
        ends.append(h)
        lams.append(lam)
    S, starts = init, []
    for E, lam in zip(ends, lams):
        starts.append(S)
        S = np.exp(lam)[:, None] * S + E
    out = [None] * n
    for seg, S_j in zip(segments, starts):
        d = np.zeros_like(ells[0])
        for c in seg:
            out[c] = local[c] + np.exp(d)[:, None] * S_j
            d = d + ells[c]
    assert sorted(position[c] for seg in segments for c in seg) == list(range(n))
    return out, S


@pytest.mark.parametrize("cuts", [[0, 1, 2, 3, 4, 5, 6], [0, 3, 6], [0, 2, 2, 5, 6], [0, 6], [0, 0, 6]])
def test_gla_13(cuts):
    """Any cut of the chunks into segments (empty ones included) gives every chunk-start state h and every
    chunk-end gradient dH of the chunkwise form (gla.4, gla.7), and the final state and dS_0; the pair
    composition is associative."""
    C = 16
    x, do, dST = make_inputs(31, T=6 * C)
    x["do"] = do
    out = chunkwise(x, do, dST, C)
    ells, U, W = (list(z) for z in zip(*_chunk_maps(x, C)))
    h, ST = _two_level(ells, U, x["S0"], cuts)
    for c in range(6):
        assert_close(h[c], out["h"][c])
    assert_close(ST, out["ST"])
    dH, dS0 = _two_level(ells, W, dST, cuts, reverse=True)
    for c in range(6):
        assert_close(dH[c], out["dH"][c])
    assert_close(dS0, out["dS0"])

    def compose(second, first):  # (ℓ₂, U₂) ∘ (ℓ₁, U₁)
        return first[0] + second[0], np.exp(second[0])[:, None] * first[1] + second[1]

    p1, p2, p3 = ((ells[c], U[c]) for c in range(3))
    left, right = compose(p3, compose(p2, p1)), compose(compose(p3, p2), p1)
    assert_close(left[0], right[0])
    assert_close(left[1], right[1])


def test_gla_13_stays_finite_and_accurate_in_float32_under_strong_decay():
    """Log-decays of about −12 per step make Λ of a segment ≈ −12·16·C: its exp underflows to exactly 0,
    nothing overflows, and the float32 two-level states match float64 as closely as the float32 single
    sweep does (gates weak: the same)."""
    C = 16
    for strength in (12.0, 0.05):
        x, do, dST = make_inputs(32, strength=strength, T=8 * C)
        x["do"] = do
        exact = [np.asarray(z) for z in _two_level(*[list(z) for z in zip(*_chunk_maps(x, C))][:2],
                                                   x["S0"], [0, 8])[0]]
        maps32 = [list(z) for z in zip(*_chunk_maps(x, C, np.float32))]
        S0 = x["S0"].astype(np.float32)
        single, _ = _two_level(maps32[0], maps32[1], S0, [0, 8])
        split, _ = _two_level(maps32[0], maps32[1], S0, [0, 2, 4, 6, 8])
        err = lambda hs: max(np.max(np.abs(h - e)) / np.max(np.abs(e)) for h, e in zip(hs, exact))  # noqa: E731
        assert all(np.all(np.isfinite(h)) for h in split)
        assert err(split) <= 2 * err(single) + 1e-7, (strength, err(split), err(single))

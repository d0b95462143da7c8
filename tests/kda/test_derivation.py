"""Checks of the derivation in workbench/kda/NOTES.md, one test per tagged equation.

The formulas are evaluated directly here in NumPy (float64, one sequence and one head, T not a
multiple of the chunk) by `chunkwise`, and compared with the definition `recurrent_kda_ref` (kda.1)
differentiated by `jax.vjp` with random cotangents for `o` and the final state. States the definition
does not return come from a NumPy loop of (kda.1) (itself checked against `recurrent_kda_ref`), and
the gradient of the state at a chunk boundary is the gradient with respect to `initial_state` of the
definition run from that boundary on.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from workbench.kda.reference import chunk_kda_ref, forward_substitution, invert_unit_lower, recurrent_kda_ref

RTOL = 1e-10
SCALE = 0.7
T, K, V = 37, 6, 5
BC = 16


# ----------------------------------------------------------------------------- inputs and oracles


def make_inputs(seed, strength=1.0, T=T, key_scale=None):
    """Random float64 inputs of one sequence and head, and cotangents. Keys unit-norm unless key_scale."""
    rng = np.random.default_rng(seed)
    normal = lambda *shape: rng.standard_normal(shape)  # noqa: E731
    k = normal(T, K)
    k = k / np.linalg.norm(k, axis=-1, keepdims=True) if key_scale is None else k * key_scale / np.sqrt(K)
    x = dict(q=normal(T, K), k=k, v=normal(T, V), g=-strength * np.logaddexp(0.0, normal(T, K)),
             beta=1 / (1 + np.exp(-normal(T))), S0=normal(K, V))
    return x, normal(T, V), normal(K, V)


NAMES = ("q", "k", "v", "g", "beta", "initial_state")


def _batched(x):
    return dict(q=x["q"][None, :, None], k=x["k"][None, :, None], v=x["v"][None, :, None], g=x["g"][None, :, None],
                beta=x["beta"][None, :, None], initial_state=x["S0"][None, None])


@jax.jit
def _definition_vjp(args, do, dST):
    def run(*a):
        o, S = recurrent_kda_ref(**dict(zip(NAMES, a)), scale=SCALE)
        return o[0, :, 0], S[0, 0]

    out, pullback = jax.vjp(run, *[args[n] for n in NAMES])
    return out, pullback((do, dST))


def definition_vjp(x, do, dST):
    """((o [T, V], S_T), {name: gradient}) of L = <do, o> + <dST, S_T> for the definition."""
    out, grads = _definition_vjp(_batched(x), do, dST)
    squeeze = {"beta": lambda d: d[0, :, 0], "initial_state": lambda d: d[0, 0]}
    return (np.asarray(out[0]), np.asarray(out[1])), {
        n: np.asarray(squeeze.get(n, lambda d: d[0, :, 0])(d)) for n, d in zip(NAMES, grads)}


def loop(x):
    """The states S_t (t = 0 … T, [T+1, K, V]) and the corrections δ_t = β_t (v_t − (D_t S_{t−1})ᵀ k_t)."""
    S, deltas = [x["S0"]], []
    for t in range(len(x["q"])):
        Sd = np.exp(x["g"][t])[:, None] * S[-1]
        deltas.append(x["beta"][t] * (x["v"][t] - Sd.T @ x["k"][t]))
        S.append(Sd + np.outer(x["k"][t], deltas[-1]))
    return np.stack(S), np.stack(deltas)


def chunk_terms(q, k, v, g, beta):
    """One chunk's b, k̃, k̂, q̄ (without the state), L, A, Aqk, w, u (kda.2, kda.3, kda.6)."""
    b = np.cumsum(g, axis=0)
    bL = b[-1]
    n = len(q)
    ratio = np.exp(b[:, None] - b[None, :])  # [r, s, K]
    strict = np.tril(np.ones((n, n), bool), -1)
    L = np.where(strict, beta[:, None] * np.einsum("rk,sk,rsk->rs", k, k, ratio), 0.0)
    Aqk = np.where(np.tril(np.ones((n, n), bool)), SCALE * np.einsum("rk,sk,rsk->rs", q, k, ratio), 0.0)
    A = np.linalg.inv(np.eye(n) + L)
    kg = k * np.exp(b)
    w, u = A @ (beta[:, None] * kg), A @ (beta[:, None] * v)
    return dict(b=b, bL=bL, kg=kg, khat=k * np.exp(bL - b), qbar=SCALE * q * np.exp(b), L=L, A=A, Aqk=Aqk, w=w, u=u,
                ratio=ratio, strict=strict)


def chunkwise(x, do, dST, C):
    """The chunkwise forward (kda.2–kda.6) and backward (kda.9–kda.13) in float64 NumPy."""
    q, k, v, g, beta = (x[n] for n in ("q", "k", "v", "g", "beta"))
    n_rows = len(q)
    bounds = [(s, min(s + C, n_rows)) for s in range(0, n_rows, C)]
    pieces, h = [], x["S0"]
    for s0, s1 in bounds:
        p = chunk_terms(q[s0:s1], k[s0:s1], v[s0:s1], g[s0:s1], beta[s0:s1])
        p.update(h=h, delta=p["u"] - p["w"] @ h)
        p["o"] = p["qbar"] @ h + p["Aqk"] @ p["delta"]
        pieces.append(p)
        h = np.exp(p["bL"])[:, None] * h + p["khat"].T @ p["delta"]
    out = dict(o=np.concatenate([p["o"] for p in pieces]), ST=h, h=[p["h"] for p in pieces],
               delta=np.concatenate([p["delta"] for p in pieces]))

    dH = dST
    grads = {n: [] for n in ("dq", "dk", "dv", "dbeta", "dg", "dH")}
    for (s0, s1), p in reversed(list(zip(bounds, pieces))):
        qc, kc, vc, bc, doc = q[s0:s1], k[s0:s1], v[s0:s1], beta[s0:s1], do[s0:s1]
        ddelta = p["Aqk"].T @ doc + p["khat"] @ dH  # (kda.9)
        dAqk = np.tril(doc @ p["delta"].T)
        dqbar, dkhat, dw = doc @ p["h"].T, p["delta"] @ dH.T, -ddelta @ p["h"].T
        dA = dw @ (bc[:, None] * p["kg"]).T + ddelta @ (bc[:, None] * vc).T  # (kda.10)
        dvb, dkgb = p["A"].T @ ddelta, p["A"].T @ dw
        dL = np.where(p["strict"], -p["A"].T @ dA @ p["A"].T, 0.0)  # (kda.7)
        dv = bc[:, None] * dvb
        # (kda.11) with e_rs = exp(b_r − b_s): the strict parts (°) and the diagonal of Aqk
        E = p["ratio"]
        dq_s = SCALE * np.einsum("rs,sk,rsk->rk", np.where(p["strict"], dAqk, 0), kc, E)
        dk_s = SCALE * np.einsum("rs,rk,rsk->sk", np.where(p["strict"], dAqk, 0), qc, E)
        Y = np.einsum("rs,sk,rsk->rk", dL, kc, E)
        Z = np.einsum("rs,r,rk,rsk->sk", dL, bc, kc, E)
        diag = np.diag(dAqk)[:, None]
        dkg = bc[:, None] * dkgb
        dq = SCALE * np.exp(p["b"]) * dqbar + dq_s + SCALE * diag * kc
        dk = (np.exp(p["b"]) * dkg + np.exp(p["bL"] - p["b"]) * dkhat + dk_s + SCALE * diag * qc + bc[:, None] * Y
              + Z)
        dbeta = np.sum(dvb * vc, 1) + np.sum(dkgb * p["kg"], 1) + np.sum(kc * Y, 1)  # (kda.12)
        # (kda.13) P summed from the end, X summed from the start, and the state term
        P = (p["qbar"] * dqbar + p["kg"] * dkg + qc * dq_s - kc * dk_s + kc * bc[:, None] * Y - kc * Z)
        X = p["khat"] * dkhat
        suffix = np.cumsum(P[::-1], axis=0)[::-1]
        before = np.concatenate([np.zeros_like(X[:1]), np.cumsum(X, axis=0)[:-1]])
        dg = suffix + before + np.exp(p["bL"]) * np.sum(p["h"] * dH, axis=1)
        grads["dH"].insert(0, dH)
        dH = np.exp(p["bL"])[:, None] * dH + p["qbar"].T @ doc - p["w"].T @ ddelta  # (kda.9)
        for name, value in (("dq", dq), ("dk", dk), ("dv", dv), ("dbeta", dbeta), ("dg", dg)):
            grads[name].insert(0, value)
    out.update({n: np.concatenate(gr) for n, gr in grads.items() if n != "dH"}, dH=grads["dH"], dS0=dH)
    return out


def assert_close(actual, expected, rtol=RTOL):
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    scale = max(np.max(np.abs(expected)), 1e-300)
    assert np.max(np.abs(actual - expected)) <= rtol * scale, np.max(np.abs(actual - expected)) / scale


CHUNKS = pytest.mark.parametrize("C", [16, 32, 64])


# ----------------------------------------------------------------------------- forward


def test_kda_1():
    """The loop of (kda.1) equals the reference definition, and each step is a gradient step of rate β on
    ½‖Sᵀk − v‖² taken from the decayed state: S_t = (I − β k kᵀ) D S_{t−1} + β k vᵀ."""
    x, do, dST = make_inputs(0)
    S, _ = loop(x)
    (o, ST), _ = definition_vjp(x, do, dST)
    assert_close(S[-1], ST)
    assert_close(np.einsum("tkv,tk->tv", S[1:], SCALE * x["q"]), o)
    for t in range(T):
        Sd = np.exp(x["g"][t])[:, None] * S[t]
        kt, vt, bt = x["k"][t], x["v"][t], x["beta"][t]
        assert_close((np.eye(K) - bt * np.outer(kt, kt)) @ Sd + bt * np.outer(kt, vt), S[t + 1])
        grad = np.outer(kt, Sd.T @ kt - vt)  # ∇_S ½‖Sᵀk − v‖² at S = D S_{t−1}
        assert_close(Sd - bt * grad, S[t + 1])


@CHUNKS
def test_kda_2(C):
    """Every state inside a chunk from the chunk's start state, its prefix sums and the corrections δ."""
    x, _, _ = make_inputs(1)
    S, delta = loop(x)
    for t0 in range(0, T, C):
        b = np.cumsum(x["g"][t0:t0 + C], axis=0)
        for r in range(len(b)):
            weights = x["k"][t0:t0 + r + 1] * np.exp(b[r] - b[:r + 1])
            assert_close(np.exp(b[r])[:, None] * S[t0] + weights.T @ delta[t0:t0 + r + 1], S[t0 + r + 1])


@CHUNKS
def test_kda_3(C):
    """The corrections solve (I + L) δ = β ⊙ (v − k̃ h), i.e. δ = u − w h with w, u the WY vectors."""
    x, _, _ = make_inputs(2, key_scale=2.0)
    S, delta = loop(x)
    for t0 in range(0, T, C):
        sl = slice(t0, t0 + C)
        p = chunk_terms(*(x[n][sl] for n in ("q", "k", "v", "g", "beta")))
        h = S[t0]
        lhs = (np.eye(len(p["b"])) + p["L"]) @ delta[sl]
        assert_close(lhs, x["beta"][sl, None] * (x["v"][sl] - p["kg"] @ h))
        assert_close(p["u"] - p["w"] @ h, delta[sl])


@CHUNKS
def test_kda_4(C):
    """The WY representation: the chunk's product of transitions (I − β k kᵀ) D is Γ_L − k̂ᵀ w, and the
    boundary states follow h' = exp(b_L) ⊙ h + k̂ᵀ δ."""
    x, do, dST = make_inputs(3)
    S, _ = loop(x)
    out = chunkwise(x, do, dST, C)
    for c, h in enumerate(out["h"]):
        assert_close(h, S[c * C])
    assert_close(out["ST"], S[-1])
    for t0 in range(0, T, C):
        sl = slice(t0, t0 + C)
        p = chunk_terms(*(x[n][sl] for n in ("q", "k", "v", "g", "beta")))
        M = np.eye(K)
        for t in range(t0, min(t0 + C, T)):
            M = (np.eye(K) - x["beta"][t] * np.outer(x["k"][t], x["k"][t])) @ np.diag(np.exp(x["g"][t])) @ M
        assert_close(np.diag(np.exp(p["bL"])) - p["khat"].T @ p["w"], M)


def blocked_inverse(L, bc=BC):
    """(kda.5) The kernel's order: block row i of A = D_i (E_i − L_{i,<i} A_{<i,:}), D_i = (I + L_ii)⁻¹ by
    forward substitution on a bc × bc block."""
    n = len(L)
    A = np.zeros_like(L)
    for i0 in range(0, n, bc):
        i1 = min(i0 + bc, n)
        D = np.eye(i1 - i0)
        for r in range(1, i1 - i0):
            D[r] = D[r] - L[i0 + r, i0:i1] @ D
        E = np.zeros((i1 - i0, n))
        E[:, i0:i1] = np.eye(i1 - i0)
        A[i0:i1] = D @ (E - L[i0:i1, :i0] @ A[:i0])
    return A


@pytest.mark.parametrize("n", [16, 37, 64])
def test_kda_5(n):
    x, _, _ = make_inputs(4, T=n, key_scale=3.0)
    L = chunk_terms(*(x[m] for m in ("q", "k", "v", "g", "beta")))["L"]
    exact = np.linalg.inv(np.eye(n) + L)
    assert_close(blocked_inverse(L), exact)
    assert_close(np.asarray(forward_substitution(jnp.asarray(L))), exact)
    assert_close(np.asarray(invert_unit_lower(jnp.asarray(L))), exact)


@pytest.mark.parametrize("key_scale", [None, 1.0, 3.0])
def test_kda_5b(key_scale):
    """(kda.5b) The kernel's diagonal blocks: (I + L_ii)⁻¹ = (I + N)(I + N²)(I + N⁴)(I + N⁸), N = −L_ii, equal to
    the inverse in float64, and in float32 within a few times substitution's error (both printed)."""
    x, _, _ = make_inputs(6, T=64, key_scale=key_scale)
    L = chunk_terms(*(x[m] for m in ("q", "k", "v", "g", "beta")))["L"]
    for i0 in range(0, 64, BC):
        Lii = L[i0:i0 + BC, i0:i0 + BC]
        exact = np.linalg.inv(np.eye(BC) + Lii)

        def product(N):
            X, P = np.eye(BC, dtype=N.dtype) + N, N
            for _ in range(3):
                P = P @ P
                X = X + X @ P
            return X

        assert_close(product(-Lii), exact)
        L32 = Lii.astype(np.float32)
        D = np.eye(BC, dtype=np.float32)
        for r in range(1, BC):
            D[r] = D[r] - L32[r] @ D
        err_product = np.linalg.norm(product(-L32) - exact) / np.linalg.norm(exact)
        err_substitution = np.linalg.norm(D - exact) / np.linalg.norm(exact)
        print(f"block {i0 // BC}: max|L| {np.abs(Lii).max():.2f} float32 error product {err_product:.1e}, "
              f"substitution {err_substitution:.1e}")
        assert err_product <= 4 * err_substitution + 1e-7


@CHUNKS
def test_kda_6(C):
    x, do, dST = make_inputs(5)
    (o, ST), _ = definition_vjp(x, do, dST)
    assert_close(chunkwise(x, do, dST, C)["o"], o)
    if C == 16:  # the reference's chunkwise form too (one chunk size: each compiles for seconds)
        o_ref, S_ref = jax.jit(chunk_kda_ref, static_argnames=("scale", "chunk_size"))(**_batched(x), scale=SCALE,
                                                                                        chunk_size=C)
        assert_close(o_ref[0, :, 0], o)
        assert_close(S_ref[0, 0], ST)


def _chunk_problem(seed, n_rows, Kd):
    """One chunk's q, unit-scale k, β ∈ (0.1, 1), and cotangents dAqk (lower) and dL (strictly lower),
    with the generator for what the test draws next."""
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((n_rows, Kd)), rng.standard_normal((n_rows, Kd)) / np.sqrt(Kd)
    beta = rng.uniform(0.1, 1.0, n_rows)
    dAqk = np.tril(rng.standard_normal((n_rows, n_rows)))
    dL = np.tril(rng.standard_normal((n_rows, n_rows)), -1)
    return rng, q, k, beta, dAqk, dL


def _own_block_terms(b, q, k, beta, dAqk, dL, n, dtype):
    """Sub-chunk n … n+15 of one chunk as the kernels form it on (kda.16)'s direct path, in `dtype`:
    forward rows through row n (earlier and own keys in one product, masked to s ≤ r for Aqk, s < r for
    L); backward dq°, Y (rows of the sub-chunk, reference n, s < r) and dk°, Z (its keys, reference m,
    r > s). Returns those and the factors."""
    m = n + 15
    rows, o = slice(n, m + 1), np.arange(len(b))
    r_pos = np.arange(n, m + 1)
    c = lambda x: np.asarray(x, dtype)  # noqa: E731
    b = c(b)  # the exponents' differences and exponentials in `dtype`, as the kernels take them
    e_qn = np.exp(b[rows] - b[n])  # [16, K] ∈ [e^−ρ, 1]
    e_kn = np.exp(b[n] - b[:m + 1])  # keys s ≤ m: ≤ 1 before n, ∈ [1, e^ρ] inside
    e_km = np.exp(b[m] - b[rows])  # [16, K] ∈ [e^−ρ, 1]
    e_qm = np.exp(b[n:] - b[m])  # rows r ≥ n: ∈ [1, e^ρ] inside, ≤ 1 after
    kn = c(k[:m + 1]) * e_kn
    Aqk = np.where(o[None, :m + 1] <= r_pos[:, None], SCALE * (c(q[rows]) * e_qn) @ kn.T, 0.0)
    L = np.where(o[None, :m + 1] < r_pos[:, None], c(beta[rows])[:, None] * ((c(k[rows]) * e_qn) @ kn.T), 0.0)
    strict_r = o[None, :m + 1] < r_pos[:, None]
    dq = SCALE * e_qn * (np.where(strict_r, c(dAqk[rows, :m + 1]), 0) @ kn)
    Y = e_qn * (np.where(strict_r, c(dL[rows, :m + 1]), 0) @ kn)
    strict_c = o[n:, None] > r_pos[None, :]
    dk = SCALE * e_km * (np.where(strict_c, c(dAqk[n:, rows]), 0).T @ (c(q[n:]) * e_qm))
    Z = e_km * (np.where(strict_c, c(dL[n:, rows]), 0).T @ (c(beta[n:])[:, None] * c(k[n:]) * e_qm))
    return dict(Aqk=Aqk, L=L, dq=dq, Y=Y, dk=dk, Z=Z), (e_qn, e_kn[n:], e_km, e_qm[:16])


def _own_block_direct(b, q, k, beta, dAqk, dL, n):
    """The same quantities from e_rs = exp(b_r − b_s) formed directly, float64 (kda.3, kda.6, kda.11)."""
    m = n + 15
    rows = slice(n, m + 1)
    E = np.exp(b[:, None] - b[None, :])  # [r, s, K], used only where s ≤ r
    low = np.tril(np.ones((len(b), len(b)), bool))
    strict = np.tril(low, -1)
    E = np.where(low[:, :, None], E, 0.0)
    Aqk = SCALE * np.einsum("rk,sk,rsk->rs", q[rows], k[:m + 1], E[rows, :m + 1])
    L = beta[rows, None] * np.where(strict[rows, :m + 1], np.einsum("rk,sk,rsk->rs", k[rows], k[:m + 1],
                                                                    E[rows, :m + 1]), 0.0)
    dq = SCALE * np.einsum("rs,sk,rsk->rk", np.where(strict, dAqk, 0)[rows], k, E[rows])
    Y = np.einsum("rs,sk,rsk->rk", np.where(strict, dL, 0)[rows], k, E[rows])
    dk = SCALE * np.einsum("rs,rk,rsk->sk", np.where(strict, dAqk, 0)[:, rows], q, E[:, rows])
    Z = np.einsum("rs,r,rk,rsk->sk", np.where(strict, dL, 0)[:, rows], beta, k, E[:, rows])
    return dict(Aqk=Aqk, L=L, dq=dq, Y=Y, dk=dk, Z=Z)


def test_kda_16():
    """(kda.16) Where a sub-chunk's span ρ_I = max_k (b_n − b_m) is at most ρ = DIRECT_RANGE, its own block
    joins the products of the earlier sub-chunks: through row n for L, Aqk (forward) and dq°, Y, through
    row m for dk°, Z (backward), with every factor in [e^−ρ, e^ρ]. In float64 the factored forms equal
    the direct ones (masks s ≤ r for Aqk, s < r for L and the backward); in float32 each entry is as
    accurate as float32 rounding of its terms allows. Beyond the bound a factor overflows."""
    from workbench.tl_chunked import DIRECT_RANGE

    n_rows, Kd = 64, 8
    rng, q, k, beta, dAqk, dL = _chunk_problem(16, n_rows, Kd)
    checked = 0
    for per_step in (0.05, 0.6, 1.3):  # spans of ~0.7, ~9, ~19 over 16 rows
        g = -per_step * rng.uniform(0.9, 1.0, (n_rows, Kd))
        b = np.cumsum(g, axis=0).astype(np.float32).astype(np.float64)  # b as the kernels hold it
        for n in range(16, n_rows, 16):
            span = float(np.max(b[n] - b[n + 15]))
            assert span <= DIRECT_RANGE, span
            direct = _own_block_direct(b, q, k, beta, dAqk, dL, n)
            exact, _ = _own_block_terms(b, q, k, beta, dAqk, dL, n, np.float64)
            single, factors = _own_block_terms(b, q, k, beta, dAqk, dL, n, np.float32)
            lo, hi = np.exp(-DIRECT_RANGE) * (1 - 1e-6), np.exp(DIRECT_RANGE) * (1 + 1e-6)
            for f in factors:
                assert f.min() >= lo and f.max() <= hi
            for name in direct:
                assert_close(exact[name], direct[name])
                size = np.max(np.abs(direct[name]))
                err = np.max(np.abs(single[name] - direct[name])) / size
                assert err <= 1e-6, (name, per_step, n, err)
                checked += 1
    assert checked == 3 * 3 * 6
    # the reason for the bound: at a span of ~300 (log-decays of −20 per step) exp(b_n − b_s) overflows
    b = np.cumsum(-20.0 * np.ones((n_rows, Kd)), axis=0)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        single, _ = _own_block_terms(b, q, k, beta, dAqk, dL, 16, np.float32)
    assert not np.all(np.isfinite(single["Aqk"])) or not np.allclose(
        single["Aqk"], _own_block_direct(b, q, k, beta, dAqk, dL, 16)["Aqk"], rtol=1e-3, atol=1e-6)


def _whole_chunk_terms(b, q, k, beta, dAqk, dL, dtype):
    """(kda.17) L, Aqk and the backward's dq°, Y, dk°, Z of one chunk from whole-chunk products through
    b_mid = (b_0 + b_last) / 2, every operand formed in `dtype` as the kernels form it; and the factors."""
    c = lambda x: np.asarray(x, dtype)  # noqa: E731
    n = len(q)
    d = c(b) - (c(0.5) * (c(b[0]) + c(b[-1])))
    up, down = np.exp(d), np.exp(-d)
    kcol = c(k) * down
    strict = np.tril(np.ones((n, n), bool), -1)
    Aqk = np.where(np.tril(np.ones((n, n), bool)), SCALE * ((c(q) * up) @ kcol.T), 0.0)
    L = np.where(strict, c(beta)[:, None] * ((c(k) * up) @ kcol.T), 0.0)
    dA, dl = np.where(strict, c(dAqk), 0), np.where(strict, c(dL), 0)
    dq = SCALE * up * (dA @ kcol)
    Y = up * (dl @ kcol)
    dk = SCALE * down * (dA.T @ (c(q) * up))
    Z = down * (dl.T @ (c(beta)[:, None] * c(k) * up))
    return dict(Aqk=Aqk, L=L, dq=dq, Y=Y, dk=dk, Z=Z), (up, down)


def test_kda_17():
    """(kda.17) Where a chunk's span ρ_C = max_k (b_0 − b_last) is at most WHOLE_RANGE, L and Aqk (and the
    backward's dq°, Y, dk°, Z) come from whole-chunk products through b_mid = (b_0 + b_last)/2, every
    factor in [e^−ρ_C/2, e^ρ_C/2]. In float64 they equal the direct forms; in float32, against the
    float64 truth, no worse than twice the direct float32 form (both start from b in float32). Beyond
    float32's range (ρ_C/2 > 88) a factor overflows, which is why the span is bounded."""
    from workbench.kda.steps import WHOLE_RANGE

    n_rows, Kd = 64, 8
    rng, q, k, beta, dAqk, dL = _chunk_problem(17, n_rows, Kd)
    strict = np.tril(np.ones((n_rows, n_rows), bool), -1)

    def direct(b, dtype):
        c = lambda x: np.asarray(x, dtype)  # noqa: E731
        E = np.exp(c(b)[:, None] - c(b)[None, :])  # [r, s, K]
        dA, dl = np.where(strict, c(dAqk), 0), np.where(strict, c(dL), 0)
        return dict(Aqk=np.where(np.tril(np.ones((n_rows, n_rows), bool)),
                                 SCALE * np.einsum("rk,sk,rsk->rs", c(q), c(k), E), 0.0),
                    L=np.where(strict, c(beta)[:, None] * np.einsum("rk,sk,rsk->rs", c(k), c(k), E), 0.0),
                    dq=SCALE * np.einsum("rs,sk,rsk->rk", dA, c(k), E), Y=np.einsum("rs,sk,rsk->rk", dl, c(k), E),
                    dk=SCALE * np.einsum("rs,rk,rsk->sk", dA, c(q), E),
                    Z=np.einsum("rs,rk,rsk->sk", dl, c(beta)[:, None] * c(k), E))

    for per_step in (0.02, 0.4, 0.9):  # chunk spans of ~1.3, ~25, ~57 over 64 rows
        g = (-per_step * rng.uniform(0.9, 1.0, (n_rows, Kd))).astype(np.float32)
        b64 = np.cumsum(g.astype(np.float64), axis=0)
        b = np.cumsum(g, axis=0).astype(np.float64)  # b as the kernels hold it: a float32 prefix sum
        span = float(np.max(b[0] - b[-1]))
        assert span <= WHOLE_RANGE, span
        exact, _ = _whole_chunk_terms(b64, q, k, beta, dAqk, dL, np.float64)
        want, want32 = direct(b64, np.float64), direct(b, np.float32)
        single, factors = _whole_chunk_terms(b, q, k, beta, dAqk, dL, np.float32)
        for f in factors:
            assert f.min() >= np.exp(-span / 2) * (1 - 1e-5) and f.max() <= np.exp(span / 2) * (1 + 1e-5)
        for name in want:
            assert_close(exact[name], want[name])
            # float32, both from the float32 prefix sums b: an exponent x rounds to a relative error of
            # about x·ε in its factor, up to span/2 here; b's own rounding costs the direct form as much
            size = np.max(np.abs(want[name]))
            err = np.max(np.abs(single[name] - want[name])) / size
            err_direct = np.max(np.abs(want32[name] - want[name])) / size
            print(f"kda.17 span {span:5.1f} {name:>3s}: float32 whole-chunk {err:.1e}, direct {err_direct:.1e}")
            assert err <= 2 * err_direct, (name, per_step, err, err_direct)
    # the reason for the bound: at a span of ~640 (log-decays of −10 per step) a factor overflows float32
    b = np.cumsum(-10.0 * np.ones((n_rows, Kd)), axis=0)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        _, (up, down) = _whole_chunk_terms(b, q, k, beta, dAqk, dL, np.float32)
    assert not np.all(np.isfinite(up)) and not np.all(np.isfinite(down))


# ----------------------------------------------------------------------------- the inverse and its layout


def test_kda_7():
    """For A = X⁻¹: dX = −Aᵀ dA Aᵀ (against jax.vjp of the inverse), and with X = I + L, L strictly
    lower, dL is that restricted to the strictly lower triangle (against jax.vjp through the solve)."""
    rng = np.random.default_rng(6)
    X = np.eye(9) + 0.3 * rng.standard_normal((9, 9))
    dA = rng.standard_normal((9, 9))
    A = np.linalg.inv(X)
    _, pullback = jax.vjp(jnp.linalg.inv, jnp.asarray(X))
    assert_close(pullback(jnp.asarray(dA))[0], -A.T @ dA @ A.T)
    L = np.tril(rng.standard_normal((9, 9)), -1)
    A = np.linalg.inv(np.eye(9) + L)
    _, pullback = jax.vjp(lambda L: invert_unit_lower(jnp.tril(L, -1)), jnp.asarray(L))
    assert_close(pullback(jnp.asarray(dA))[0], np.tril(-A.T @ dA @ A.T, -1))


def test_kda_8():
    """A stored [TT, H, BT] (row r of its chunk's matrix at the row of token r): the natural pointer
    offsets (row_i · H + h) · BT + j give A; the transposed ones (row_j · H + h) · BT + i — the seed's
    block pointer, shape (BT, T), strides (1, H·BT), offsets (0, i_t·BT) — give Aᵀ. So `tl.dot(b_A, x)`
    on the transposed tile is Aᵀ x, what the WY backward needs, and `tl.trans(b_A)` there would be A x."""
    rng = np.random.default_rng(7)
    H, BT, i_h, NT = 3, 16, 1, 4
    TT = NT * BT
    store = rng.standard_normal((TT, H, BT))  # chunk c's A is store[c·BT:(c+1)·BT, h, :]
    flat = store.reshape(-1)
    i_t = 2
    rows = i_t * BT + np.arange(BT)
    o = np.arange(BT)
    A = store[rows, i_h, :]
    natural = flat[(rows[:, None] * H + i_h) * BT + o[None, :]]
    transposed = flat[(rows[None, :] * H + i_h) * BT + o[:, None]]
    # the block pointer: base + i · 1 + (i_t · BT + j) · H·BT, the head's offset i_h · BT folded into base
    block_ptr = flat[i_h * BT + o[:, None] * 1 + (i_t * BT + o[None, :]) * (H * BT)]
    np.testing.assert_array_equal(natural, A)
    np.testing.assert_array_equal(transposed, A.T)
    np.testing.assert_array_equal(block_ptr, A.T)
    x = rng.standard_normal((BT, 5))
    assert_close(transposed @ x, A.T @ x)
    assert not np.allclose(transposed.T @ x, A.T @ x)


# ----------------------------------------------------------------------------- backward


@CHUNKS
def test_kda_9(C):
    """dH at every chunk boundary (through dδ) is the initial-state gradient of the definition run from there."""
    x, do, dST = make_inputs(8)
    S, _ = loop(x)
    out = chunkwise(x, do, dST, C)
    _, grads = definition_vjp(x, do, dST)
    assert_close(out["dS0"], grads["initial_state"])
    for c in range(1, len(out["h"])):
        t0 = c * C
        tail = {n: x[n][t0:] for n in ("q", "k", "v", "g", "beta")}
        _, tail_grads = definition_vjp(dict(tail, S0=S[t0]), do[t0:], dST)
        assert_close(out["dH"][c - 1], tail_grads["initial_state"])
    assert_close(out["dH"][-1], dST)


@CHUNKS
def test_kda_10(C):
    x, do, dST = make_inputs(9, key_scale=2.0)
    _, grads = definition_vjp(x, do, dST)
    assert_close(chunkwise(x, do, dST, C)["dv"], grads["v"])


@CHUNKS
def test_kda_11(C):
    x, do, dST = make_inputs(10, key_scale=2.0)
    _, grads = definition_vjp(x, do, dST)
    out = chunkwise(x, do, dST, C)
    assert_close(out["dq"], grads["q"])
    assert_close(out["dk"], grads["k"])


@CHUNKS
def test_kda_12(C):
    x, do, dST = make_inputs(11, key_scale=2.0)
    _, grads = definition_vjp(x, do, dST)
    assert_close(chunkwise(x, do, dST, C)["dbeta"], grads["beta"])


@CHUNKS
@pytest.mark.parametrize("strength", [0.1, 1.0, 5.0])
def test_kda_13(C, strength):
    x, do, dST = make_inputs(12, strength)
    _, grads = definition_vjp(x, do, dST)
    assert_close(chunkwise(x, do, dST, C)["dg"], grads["g"])


def test_kda_14():
    """The recurrent backward, one step against time order (what `recurrent_kda_bwd_kernel` does)."""
    x, do, dST = make_inputs(13, key_scale=2.0)
    _, grads = definition_vjp(x, do, dST)
    S, _ = loop(x)
    dS = dST
    got = {n: np.zeros_like(x[n]) for n in ("q", "k", "v", "g", "beta")}
    for t in reversed(range(T)):
        qt, kt, vt, gt, bt = (x[n][t] for n in ("q", "k", "v", "g", "beta"))
        Sp = np.exp(gt)[:, None] * S[t]  # S' = D S_{t−1}
        r = vt - Sp.T @ kt
        dS = dS + SCALE * np.outer(qt, do[t])  # dS_t
        ddelta = dS.T @ kt
        dp = -bt * ddelta
        dSp = dS + np.outer(kt, dp)
        got["q"][t] = SCALE * S[t + 1] @ do[t]
        got["k"][t] = dS @ (bt * r) + Sp @ dp
        got["v"][t] = bt * ddelta
        got["beta"][t] = ddelta @ r
        got["g"][t] = np.sum(dSp * Sp, axis=1)
        dS = np.exp(gt)[:, None] * dSp  # dS_{t−1}
    for n in got:
        assert_close(got[n], grads[n])
    assert_close(dS, grads["initial_state"])


# ----------------------------------------------------------------------------- two-level state pass


def _chunk_maps(x, do, C):
    """Per chunk the forward map h ↦ M h + B and the backward map dH ↦ Mᵀ dH + R (kda.18)."""
    maps = []
    for s0 in range(0, len(x["q"]), C):
        s1 = min(s0 + C, len(x["q"]))
        p = chunk_terms(*(x[n][s0:s1] for n in ("q", "k", "v", "g", "beta")))
        M = np.diag(np.exp(p["bL"])) - p["khat"].T @ p["w"]
        R = p["qbar"].T @ do[s0:s1] - p["w"].T @ (p["Aqk"].T @ do[s0:s1])
        maps.append((M, p["khat"].T @ p["u"], R))
    return maps


def _segments_forward(maps, h0, cuts):
    """(kda.18) forward: each segment's sweep from zero (E_j) and of the identity with u = 0 (P_j), the pass
    across segments, then every chunk-start state by the segment's sweep from its true entering state."""
    starts, h = [], h0
    for j in range(len(cuts) - 1):
        E, P = np.zeros_like(h0), np.eye(len(h0))
        for M, B, _ in maps[cuts[j]:cuts[j + 1]]:
            E, P = M @ E + B, M @ P
        starts.append(h)
        h = P @ h + E
    states = []
    for j, S in enumerate(starts):
        for M, B, _ in maps[cuts[j]:cuts[j + 1]]:
            states.append(S)
            S = M @ S + B
    return states, h


@pytest.mark.parametrize("cuts", [[0, 1, 2, 3, 4, 5], [0, 2, 5], [0, 3, 3, 5], [0, 5]])
def test_kda_18(cuts):
    """Segments of any cut (empty ones too) give every chunk-start state, the final state, every chunk-end
    dH and dS_0 of the chunkwise form (kda.4, kda.9); the chunk maps are contractions for unit keys and
    β ∈ (0, 1), so their products stay bounded."""
    C = 8
    x, do, dST = make_inputs(41, T=5 * C)
    out = chunkwise(x, do, dST, C)
    maps = _chunk_maps(x, do, C)
    states, ST = _segments_forward(maps, x["S0"], cuts)
    for c in range(5):
        assert_close(states[c], out["h"][c])
    assert_close(ST, out["ST"])
    # backward: the transposed maps walked from the last chunk, segments in the same cut of that order
    reverse = [(M.T, R, None) for M, _, R in maps[::-1]]
    back_cuts = [5 - c for c in cuts[::-1]]
    dH_states, dS0 = _segments_forward(reverse, dST, back_cuts)
    for c in range(5):
        assert_close(dH_states[4 - c], out["dH"][c])
    assert_close(dS0, out["dS0"])
    for M, _, _ in maps:
        assert np.linalg.norm(M, 2) <= 1 + 1e-12


def test_kda_18_products_stay_bounded_in_float32():
    """Sixteen chunks of strong decay and unit keys: the segment product P (float32, chunk by chunk) is finite,
    of norm ≤ 1, and close to the float64 product."""
    C = 8
    x, do, _ = make_inputs(42, strength=8.0, T=16 * C)
    maps = _chunk_maps(x, do, C)
    P64, P32 = np.eye(K), np.eye(K, dtype=np.float32)
    for M, _, _ in maps:
        P64, P32 = M @ P64, M.astype(np.float32) @ P32
    assert np.all(np.isfinite(P32)) and np.linalg.norm(P32, 2) <= 1 + 1e-5
    assert np.max(np.abs(P32 - P64)) <= 1e-6

"""Checks of the derivation in workbench/recurrent/NOTES.md, one test per tagged equation.

Every formula is evaluated directly here (in NumPy, float64, tiny sizes) and compared with the
definition `recurrent_ref` (rec.1) differentiated by `jax.vjp`, with random cotangents for `o` and
for the final state. Quantities that the definition does not return are taken from it too:

* S_t, the state after step t, is the final state of a run whose steps after t are neutral
  (k = v = 0 and every gate 0, so S passes through them unchanged);
* dS_t = ∂L/∂S_t is the gradient w.r.t. `initial_state` of a run whose steps up to t are neutral
  except that step t still reads the state through q_t: that run's initial state *is* S_t, so
  its gradient is the cotangent of S_t by definition, not by (rec.3).

Indices follow NOTES.md: steps t = 1 … T in processing order (t = 1 is the last token when
`reverse`), S_0 the initial state, D_t = exp(G_t). `p(a)` puts an array's time axis in processing
order; row t-1 then holds step t.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from workbench.recurrent.reference import recurrent_bwd_ref, recurrent_ref

RTOL = 1e-10
SCALE = 0.7
ALL_GATES = ("g", "g_gamma", "gk", "gv")
DIFFERENTIABLE = ("q", "k", "v", "g", "gk", "gv", "initial_state")


# ----------------------------------------------------------------------------- inputs and oracles


def make_inputs(seed, B=2, T=7, H=2, K=5, V=3, gates=ALL_GATES, strength=1.0):
    """Random float64 inputs (log-gates ≤ 0 of typical size `strength`) and random cotangents."""
    rng = np.random.default_rng(seed)
    normal = lambda *shape: rng.standard_normal(shape)  # noqa: E731
    gate = lambda *shape: -strength * np.logaddexp(0.0, normal(*shape))  # noqa: E731  −softplus
    x = dict(q=normal(B, T, H, K), k=normal(B, T, H, K), v=normal(B, T, H, V),
             g=gate(B, T, H) if "g" in gates else None,
             g_gamma=-strength * np.linspace(0.1, 0.4, H) if "g_gamma" in gates else None,
             gk=gate(B, T, H, K) if "gk" in gates else None,
             gv=gate(B, T, H, V) if "gv" in gates else None,
             initial_state=normal(B, H, K, V))
    return x, normal(B, T, H, V), normal(B, H, K, V)


def _run(x, reverse, **overrides):
    y = dict(x, **overrides)
    return recurrent_ref(y["q"], y["k"], y["v"], y["g"], y["g_gamma"], y["gk"], y["gv"], scale=SCALE,
                         initial_state=y["initial_state"], reverse=reverse)


@functools.partial(jax.jit, static_argnames="reverse")
def _definition_vjp(x, do, dST, reverse):
    names = [n for n in DIFFERENTIABLE if x[n] is not None]
    out, pullback = jax.vjp(lambda *a: _run(x, reverse, **dict(zip(names, a))), *[x[n] for n in names])
    return out, dict(zip(names, pullback((do, dST))))


def definition_vjp(x, do, dST, reverse):
    """((o, S_T), {input: gradient}) of L = <do, o> + <dST, S_T>, every given differentiable input."""
    return jax.tree.map(np.asarray, _definition_vjp(x, do, dST, reverse))


def _steps(mask, reverse):
    """A [T] mask over steps in processing order, put back in token order."""
    return jnp.flip(mask, 0) if reverse else mask


def _neutral(x, keep):
    """x with the steps where `keep` [T] is False made neutral: k = v = 0 and every gate 0."""
    m = keep[None, :, None, None]
    y = dict(x, k=jnp.where(m, x["k"], 0.0), v=jnp.where(m, x["v"], 0.0), g_gamma=None)
    y["gk"] = None if x["gk"] is None else jnp.where(m, x["gk"], 0.0)
    y["gv"] = None if x["gv"] is None else jnp.where(m, x["gv"], 0.0)
    if x["g"] is not None or x["g_gamma"] is not None:  # g_gamma folded into g to switch it off
        g = (0.0 if x["g"] is None else x["g"]) + (0.0 if x["g_gamma"] is None else x["g_gamma"])
        y["g"] = jnp.where(keep[None, :, None], g, 0.0)
    return y


@functools.partial(jax.jit, static_argnames="reverse")
def _states(x, reverse):
    order = jnp.arange(x["q"].shape[1])
    upto = lambda s: _run(_neutral(x, _steps(order <= s, reverse)), reverse)[1]  # noqa: E731
    return jnp.moveaxis(jax.vmap(upto)(order), 0, 1)


def states(x, reverse):
    """S_t for t = 1 … T from the definition, in processing order: [B, T, H, K, V]."""
    return np.asarray(_states(x, reverse))


@functools.partial(jax.jit, static_argnames="reverse")
def _state_cotangents(x, do, dST, reverse):
    order = jnp.arange(x["q"].shape[1])

    def cotangent(s):
        y = _neutral(x, _steps(order > s, reverse))
        seen = _steps(order >= s, reverse)[None, :, None, None]
        y["q"] = jnp.where(seen, x["q"], 0.0)
        _, pullback = jax.vjp(lambda X: _run(y, reverse, initial_state=X), x["initial_state"])
        return pullback((jnp.where(seen, do, 0.0), dST))[0]

    return jnp.moveaxis(jax.vmap(cotangent)(order), 0, 1)


def state_cotangents(x, do, dST, reverse):
    """dS_t = ∂L/∂S_t for t = 1 … T from the definition, in processing order: [B, T, H, K, V]."""
    return np.asarray(_state_cotangents(x, do, dST, reverse))


derived_bwd = jax.jit(recurrent_bwd_ref, static_argnames=("scale", "reverse"))


def derived(x, do, dST, reverse, scale=SCALE):
    """reference.py's derived backward: (dq, dk, dv, dg, dgk, dgv, dS0) as NumPy arrays."""
    out = derived_bwd(x["q"], x["k"], x["v"], x["g"], x["g_gamma"], x["gk"], x["gv"], x["initial_state"],
                      do, dST, scale=scale, reverse=reverse)
    return [None if a is None else np.asarray(a) for a in out]


# ----------------------------------------------------------------------------- formulas in NumPy


def in_order(reverse):
    return (lambda a: np.flip(a, 1)) if reverse else (lambda a: a)


def log_decay(x):
    """G[b, t, h, i, j] = g_t + g_gamma + gk_t[i] + gv_t[j] (rec.1); missing gates contribute 0."""
    B, T, H, K = x["q"].shape
    G = np.zeros((B, T, H, K, x["v"].shape[-1]))
    for gate, expand in (("g", (..., None, None)), ("gk", (..., slice(None), None)),
                         ("gv", (..., None, slice(None)))):
        if x[gate] is not None:
            G = G + x[gate][expand]
    if x["g_gamma"] is not None:
        G = G + x["g_gamma"][:, None, None]
    return G


def shifted(a, last):
    """a_{t+1} for t = 1 … T along axis 1, with a_{T+1} := last."""
    return np.concatenate([a[:, 1:], last[:, None]], 1)


def previous(S, S0):
    """S_{t-1} for t = 1 … T along axis 1, from S_t and S_0."""
    return np.concatenate([S0[:, None], S[:, :-1]], 1)


def rcumsum(a):
    """Σ_{s ≥ t} a_s along axis 1."""
    return np.flip(np.cumsum(np.flip(a, 1), 1), 1)


def identity_dgk(q, k, dq, dk, dST, ST):
    """(rec.8) Σ_{s≥t}(q_s ⊙ dq_s − k_s ⊙ dk_s) + Σ_j (dS̄ ⊙ S_T)[:, j]; time axis 1 in processing order."""
    return rcumsum(q * dq - k * dk) + (dST * ST).sum(-1)[:, None]


def identity_dgv(o, do, v, dv, dST, ST):
    """(rec.9) Σ_{s≥t}(o_s ⊙ do_s − v_s ⊙ dv_s) + Σ_i (dS̄ ⊙ S_T)[i, :]."""
    return rcumsum(o * do - v * dv) + (dST * ST).sum(-2)[:, None]


def assert_close(actual, expected, rtol=RTOL):
    expected = np.asarray(expected)
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=rtol,
                               atol=rtol * float(np.max(np.abs(expected))))


def rel_diff(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


reverse_cases = pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])


# ----------------------------------------------------------------------------- forward


@reverse_cases
def test_rec_1(reverse):
    """The definition against a plain loop over the formula, every gate present."""
    x, _, _ = make_inputs(1)
    o, ST = _run(x, reverse)
    q, k, v, g, gk, gv, gamma = (x[n] for n in ("q", "k", "v", "g", "gk", "gv", "g_gamma"))
    B, T, H, K = q.shape
    o_loop, S_loop = np.zeros(v.shape), x["initial_state"].copy()
    for b in range(B):
        for h in range(H):
            S = S_loop[b, h]
            for t in (range(T - 1, -1, -1) if reverse else range(T)):
                G = g[b, t, h] + gamma[h] + gk[b, t, h][:, None] + gv[b, t, h][None, :]
                S = S * np.exp(G) + np.outer(k[b, t, h], v[b, t, h])
                o_loop[b, t, h] = S.T @ (SCALE * q[b, t, h])
            S_loop[b, h] = S
    assert_close(o, o_loop)
    assert_close(ST, S_loop)


def test_rec_2():
    """Folding g and g_gamma into the per-key gate: same outputs, dg = Σ_i dgk_eff, dgk = dgk_eff."""
    x, do, dST = make_inputs(2)
    folded = dict(x, g=None, g_gamma=None, gk=x["gk"] + x["g"][..., None] + x["g_gamma"][:, None])
    out, grads = definition_vjp(x, do, dST, reverse=False)
    out_f, grads_f = definition_vjp(folded, do, dST, reverse=False)
    for a, b in zip(out, out_f):
        assert_close(a, b)
    assert_close(grads["g"], grads_f["gk"].sum(-1))
    assert_close(grads["gk"], grads_f["gk"])
    for n in ("q", "k", "v", "gv", "initial_state"):
        assert_close(grads[n], grads_f[n])
    # g_gamma is a constant of the API; differentiated anyway, the fold would give
    # dg_gamma[h] = Σ_{b, t, i} dgk_eff[b, t, h, i]: nothing a kernel would need to compute.
    _, pullback = jax.vjp(lambda gamma: _run(x, False, g_gamma=gamma), x["g_gamma"])
    assert_close(pullback((do, dST))[0], grads_f["gk"].sum((0, 1, 3)))


# ----------------------------------------------------------------------------- backward


@reverse_cases
def test_rec_3(reverse):
    """dS_t = scale q_t do_tᵀ + D_{t+1} ⊙ dS_{t+1}, with dS_{T+1} := dS̄ and D_{T+1} := 1."""
    x, do, dST = make_inputs(3)
    p = in_order(reverse)
    dS = state_cotangents(x, do, dST, reverse)
    D = p(np.exp(log_decay(x)))
    local = SCALE * p(x["q"])[..., :, None] * p(do)[..., None, :]
    assert_close(dS, local + shifted(D, np.ones_like(D[:, 0])) * shifted(dS, dST))
    # the check tells the index of D apart: D_t in place of D_{t+1} is far off
    assert rel_diff(local + D * shifted(dS, dST), dS) > 1e-2


@reverse_cases
def test_rec_4(reverse):
    """dq_t = scale S_t do_t."""
    x, do, dST = make_inputs(4)
    p = in_order(reverse)
    _, grads = definition_vjp(x, do, dST, reverse)
    S = states(x, reverse)
    assert_close(p(grads["q"]), SCALE * np.einsum("bthkv,bthv->bthk", S, p(do)))


@reverse_cases
def test_rec_5(reverse):
    """dk_t = dS_t v_t."""
    x, do, dST = make_inputs(5)
    p = in_order(reverse)
    _, grads = definition_vjp(x, do, dST, reverse)
    dS = state_cotangents(x, do, dST, reverse)
    assert_close(p(grads["k"]), np.einsum("bthkv,bthv->bthk", dS, p(x["v"])))


@reverse_cases
def test_rec_6(reverse):
    """dv_t = dS_tᵀ k_t."""
    x, do, dST = make_inputs(6)
    p = in_order(reverse)
    _, grads = definition_vjp(x, do, dST, reverse)
    dS = state_cotangents(x, do, dST, reverse)
    assert_close(p(grads["v"]), np.einsum("bthkv,bthk->bthv", dS, p(x["k"])))


@reverse_cases
def test_rec_7(reverse):
    """dS_0 = D_1 ⊙ dS_1."""
    x, do, dST = make_inputs(7)
    p = in_order(reverse)
    _, grads = definition_vjp(x, do, dST, reverse)
    dS = state_cotangents(x, do, dST, reverse)
    D1 = p(np.exp(log_decay(x)))[:, 0]
    assert_close(grads["initial_state"], D1 * dS[:, 0])


def _gate_case(seed, reverse, final_state_only):
    x, do, dST = make_inputs(seed)
    if final_state_only:
        do = np.zeros_like(do)
    (o, ST), grads = definition_vjp(x, do, dST, reverse)
    S = states(x, reverse)
    # the first step of the derivation: ∂L/∂G_t = E_t = dS_t ⊙ D_t ⊙ S_{t-1}
    p = in_order(reverse)
    E = state_cotangents(x, do, dST, reverse) * p(np.exp(log_decay(x))) * previous(S, x["initial_state"])
    return x, do, dST, o, ST, grads, E, p


cotangent_cases = pytest.mark.parametrize("final_state_only", [False, True],
                                          ids=["o-and-final-state", "final-state-only"])


@cotangent_cases
@reverse_cases
def test_rec_8(reverse, final_state_only):
    """dgk_t = Σ_{s≥t}(q_s ⊙ dq_s − k_s ⊙ dk_s) + Σ_j (dS̄ ⊙ S_T)[:, j];  dg_t = Σ_i dgk_t[i]."""
    x, do, dST, o, ST, grads, E, p = _gate_case(8, reverse, final_state_only)
    # with g and g_gamma given, gk's gradient is that of the folded per-key gate (rec.2)
    assert_close(p(grads["gk"]), E.sum(-1))  # row sums of E_t
    dgk = identity_dgk(p(x["q"]), p(x["k"]), p(grads["q"]), p(grads["k"]), dST, ST)
    assert_close(p(grads["gk"]), dgk)
    assert_close(p(grads["g"]), dgk.sum(-1))
    dg, dgk_derived = derived(x, do, dST, reverse)[3:5]  # reference.py computes the same
    assert_close(dgk_derived, grads["gk"])
    assert_close(dg, grads["g"])


@cotangent_cases
@reverse_cases
def test_rec_9(reverse, final_state_only):
    """dgv_t = Σ_{s≥t}(o_s ⊙ do_s − v_s ⊙ dv_s) + Σ_i (dS̄ ⊙ S_T)[i, :]."""
    x, do, dST, o, ST, grads, E, p = _gate_case(9, reverse, final_state_only)
    assert_close(p(grads["gv"]), E.sum(-2))  # column sums of E_t
    dgv = identity_dgv(p(o), p(do), p(x["v"]), p(grads["v"]), dST, ST)
    assert_close(p(grads["gv"]), dgv)
    assert_close(derived(x, do, dST, reverse)[5], grads["gv"])


@pytest.mark.parametrize("drop", ["final-state", "q*dq", "k*dk"])
def test_rec_8_every_term_is_needed(drop):
    """Dropping any term of (rec.8) gives a dgk far from the definition's: none is negligible."""
    x, do, dST = make_inputs(10)
    (o, ST), grads = definition_vjp(x, do, dST, reverse=False)
    q, k, dq, dk = x["q"], x["k"], grads["q"], grads["k"]
    terms = {"final-state": np.broadcast_to((dST * ST).sum(-1)[:, None], q.shape),
             "q*dq": rcumsum(q * dq), "k*dk": -rcumsum(k * dk)}
    assert_close(sum(terms.values()), grads["gk"])
    assert rel_diff(sum(terms.values()) - terms[drop], grads["gk"]) > 0.1


@reverse_cases
def test_rec_8_rec_9_varlen(reverse):
    """Packed sequences: the identities hold per sequence, with each sequence's own S_T and dS̄."""
    cu = np.array([0, 3, 3, 8, 12])  # a zero-length sequence included
    N, TT = len(cu) - 1, int(cu[-1])
    x, do, _ = make_inputs(11, B=1, T=TT, H=2, K=4, V=3)
    rng = np.random.default_rng(12)
    S0, dST = rng.standard_normal((N, 2, 4, 3)), rng.standard_normal((N, 2, 4, 3))
    names = ("q", "k", "v", "g", "gk", "gv")

    @jax.jit
    def packed_vjp(args, S0, do, dST):
        def f(*a):
            y = dict(x, **dict(zip(names, a)))
            return recurrent_ref(y["q"], y["k"], y["v"], y["g"], y["g_gamma"], y["gk"], y["gv"], scale=SCALE,
                                 initial_state=a[-1], reverse=reverse, cu_seqlens=jnp.asarray(cu, jnp.int32))
        out, pullback = jax.vjp(f, *args, S0)
        return out, pullback((do, dST))

    (o, ST), (dq, dk, dv, dg, dgk, dgv, dS0) = jax.tree.map(
        np.asarray, packed_vjp([x[n] for n in names], S0, do, dST))
    p = in_order(reverse)
    for n in range(N):
        if cu[n] == cu[n + 1]:  # zero-length: the final state is the initial state
            assert_close(ST[n], S0[n])
            assert_close(dS0[n], dST[n])
            continue
        seq = lambda a: p(a[:, cu[n]:cu[n + 1]])  # noqa: E731
        dgk_n = identity_dgk(seq(x["q"]), seq(x["k"]), seq(dq), seq(dk), dST[n:n + 1], ST[n:n + 1])
        assert_close(seq(dgk), dgk_n)
        assert_close(seq(dg), dgk_n.sum(-1))
        assert_close(seq(dgv), identity_dgv(seq(o), seq(do), seq(x["v"]), seq(dv), dST[n:n + 1], ST[n:n + 1]))


def test_rec_9_key_blocks():
    """The backward kernel's split over key blocks: dv and dgv are sums of per-block partials."""
    x, do, dST = make_inputs(13)
    (o, ST), grads = definition_vjp(x, do, dST, reverse=False)
    dS, S = state_cotangents(x, do, dST, False), states(x, False)
    K, BK = x["q"].shape[-1], 2  # blocks [0, 2), [2, 4), [4, 5): the last one is not full
    dv, dgv = 0.0, 0.0
    for lo in range(0, K, BK):
        blk = slice(lo, lo + BK)
        dv_part = np.einsum("bthkv,bthk->bthv", dS[..., blk, :], x["k"][..., blk])  # (rec.6)
        o_part = np.einsum("bthkv,bthk->bthv", S[..., blk, :], SCALE * x["q"][..., blk])
        dv = dv + dv_part
        dgv = dgv + identity_dgv(o_part, do, x["v"], dv_part, dST[..., blk, :], ST[..., blk, :])  # (rec.9)
    assert_close(dv, grads["v"])
    assert_close(dgv, grads["gv"])


def test_rec_8_cancellation_with_strong_decay():
    """The caveat: with strong decay, dgk is small while the terms of (rec.8) are not, and in
    float32 the identity loses digits that autodiff of the definition (E_t summed directly) keeps."""
    x, do, dST = make_inputs(14, gates=("gk",))
    x["gk"] = np.full_like(x["gk"], -8.0)  # D = e⁻⁸ ≈ 3·10⁻⁴ at every step
    exact = definition_vjp(x, do, dST, reverse=False)[1]["gk"]
    f32 = {n: None if a is None else a.astype(np.float32) for n, a in x.items()}
    do32, dST32 = do.astype(np.float32), dST.astype(np.float32)
    direct_err = rel_diff(definition_vjp(f32, do32, dST32, reverse=False)[1]["gk"].astype(np.float64), exact)
    identity_err = rel_diff(derived(f32, do32, dST32, reverse=False)[4].astype(np.float64), exact)
    assert direct_err < 1e-5
    assert identity_err > 1000 * direct_err


@cotangent_cases
@reverse_cases
def test_rec_8a(reverse, final_state_only):
    """The direct form the backward kernel uses: dgk_t = Σ_j E_t[:, j], E_t = dS_t ⊙ D_t ⊙ S_{t−1};
    dg_t = Σ_ij E_t — the final-state cotangent enters through dS_t, no separate term."""
    x, do, dST, o, ST, grads, E, p = _gate_case(81, reverse, final_state_only)
    assert_close(p(grads["gk"]), E.sum(-1))
    assert_close(p(grads["g"]), E.sum((-1, -2)))


@cotangent_cases
@reverse_cases
def test_rec_9a(reverse, final_state_only):
    """dgv_t = Σ_i E_t[i, :] (the column sums of the same E_t)."""
    x, do, dST, o, ST, grads, E, p = _gate_case(91, reverse, final_state_only)
    assert_close(p(grads["gv"]), E.sum(-2))


def test_rec_8a_strong_decay_has_no_cancellation():
    """Under log-decays near −50 per step the direct sums stay accurate where the identity fails."""
    x, do, dST = make_inputs(12, strength=25.0)
    (o, ST), grads = definition_vjp(x, do, dST, reverse=False)
    S = states(x, False)
    E = state_cotangents(x, do, dST, False) * np.exp(log_decay(x)) * previous(S, x["initial_state"])
    assert_close(grads["gk"], E.sum(-1))

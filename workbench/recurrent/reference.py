"""Pure-JAX references for fused recurrent linear attention (no Triton; imports anywhere).

A ladder, definition first (NOTES.md tags in brackets):

* `recurrent_step`    — one step of the recurrence (rec.1);
* `recurrent_ref`     — the definition: a `lax.scan` of that step per sequence, batched with
                        `vmap`, or over the packed sequences of `cu_seqlens` with state resets;
* `recurrent_bwd_ref` — the derived backward (rec.3–rec.9): a forward sweep for S_t and dq, a
                        reverse sweep for dS_t, dk, dv, dS_0, and gate gradients by reverse
                        cumulative sums. Tests check it against `jax.vjp(recurrent_ref)` in float64.

Computation is in float32 (float64 if the inputs are float64); `o` has the dtype of `v`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from .._sharding import vary_like
from .._bounds import keep_inside, packed_rows
from .._precision import highest_precision


def _acc_dtype(*xs):
    return jnp.float64 if any(x is not None and x.dtype == jnp.float64 for x in xs) else jnp.float32


def log_decay(K: int, V: int, g=None, g_gamma=None, gk=None, gv=None, dtype=jnp.float32):
    """G_t[i, j] = g_t + g_gamma + gk_t[i] + gv_t[j] for one step (rec.1); zeros for missing gates."""
    G = jnp.zeros((K, V), dtype)
    if g is not None:
        G = G + g.astype(dtype)
    if g_gamma is not None:
        G = G + g_gamma.astype(dtype)
    if gk is not None:
        G = G + gk.astype(dtype)[:, None]
    if gv is not None:
        G = G + gv.astype(dtype)[None, :]
    return G


def recurrent_step(S, q, k, v, G, scale):
    """(rec.1) S ← S ⊙ exp(G) + k vᵀ;  o = Sᵀ (scale · q).  Shapes S [K,V], q k [K], v [V], G [K,V]."""
    S = S * jnp.exp(G) + jnp.outer(k, v)
    return S, S.T @ (scale * q)


def _scan_sequence(q, k, v, g, g_gamma, gk, gv, S0, scale, reverse):
    """One sequence of one head: q, k [T,K], v [T,V], g [T], gk [T,K], gv [T,V], S0 [K,V]."""
    K, V = q.shape[-1], v.shape[-1]
    dtype = S0.dtype

    def step(S, xs):
        q_t, k_t, v_t, g_t, gk_t, gv_t = xs
        G = log_decay(K, V, g_t, g_gamma, gk_t, gv_t, dtype)
        return recurrent_step(S, q_t.astype(dtype), k_t.astype(dtype), v_t.astype(dtype), G, scale)

    S, o = lax.scan(step, S0, (q, k, v, g, gk, gv), reverse=reverse)
    return o, S


def _per_head(x, axis):
    return None if x is None else jnp.moveaxis(x, axis, 0)


@highest_precision
def recurrent_ref(q, k, v, g=None, g_gamma=None, gk=None, gv=None, *, scale=None,
                  initial_state=None, reverse=False, cu_seqlens=None):
    """The definition (rec.1), same signature and semantics as `workbench.recurrent`."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    dtype = _acc_dtype(q, k, v, g, gk, gv, initial_state)
    scale = K ** -0.5 if scale is None else scale
    N = B if cu_seqlens is None else cu_seqlens.shape[0] - 1
    S0 = vary_like(jnp.zeros((N, H, K, V), dtype), q, k, v) if initial_state is None else initial_state.astype(dtype)
    if cu_seqlens is not None:
        return _packed_scan(q[0], k[0], v[0], None if g is None else g[0], g_gamma,
                            None if gk is None else gk[0], None if gv is None else gv[0],
                            S0, scale, reverse, cu_seqlens, out_dtype=v.dtype)

    def one(q, k, v, g, gk, gv, S0, g_gamma):
        return _scan_sequence(q, k, v, g, g_gamma, gk, gv, S0, scale, reverse)

    # vmap over batch, then heads; time stays the leading axis of each scanned array.
    head_axes = (1, 1, 1, None if g is None else 1, None if gk is None else 1,
                 None if gv is None else 1, 0, None if g_gamma is None else 0)
    over_heads = jax.vmap(one, in_axes=head_axes, out_axes=(1, 0))
    batch_axes = (0, 0, 0, None if g is None else 0, None if gk is None else 0,
                  None if gv is None else 0, 0, None)
    o, S = jax.vmap(over_heads, in_axes=batch_axes)(q, k, v, g, gk, gv, S0, g_gamma)
    return o.astype(v.dtype), S


def _packed_scan(q, k, v, g, g_gamma, gk, gv, S0, scale, reverse, cu_seqlens, out_dtype):
    """Packed sequences [TT, H, ·]: one scan over all rows, resetting S at each sequence start.

    Works with a traced `cu_seqlens` of any values: the bounds rule (API.md) makes them valid, the
    sequence of each row is found with `searchsorted`, rows outside every sequence give zeros.
    Zero-length sequences keep their initial state as their final state.
    """
    TT, H, K = q.shape
    V = v.shape[-1]
    dtype = S0.dtype
    seq, first, last, inside = packed_rows(cu_seqlens, TT)
    if reverse:
        first, last = last, first
    # rows outside every sequence (the bounds rule, API.md) read zeros and are never written
    q, k, v, g, gk, gv = (None if x is None else keep_inside(x[None], inside)[0] for x in (q, k, v, g, gk, gv))
    zeros_k, zeros_v, zeros_1 = jnp.zeros((TT, H, K)), jnp.zeros((TT, H, V)), jnp.zeros((TT, H))
    gamma = jnp.zeros((H,), dtype) if g_gamma is None else g_gamma.astype(dtype)

    def step(carry, xs):
        S, finals = carry
        q_t, k_t, v_t, g_t, gk_t, gv_t, n, is_first, is_last = xs
        S = jnp.where(is_first, S0[n], S)
        G = (g_t.astype(dtype) + gamma)[:, None, None] + gk_t.astype(dtype)[:, :, None] \
            + gv_t.astype(dtype)[:, None, :]
        S, o_t = jax.vmap(recurrent_step, in_axes=(0, 0, 0, 0, 0, None))(
            S, q_t.astype(dtype), k_t.astype(dtype), v_t.astype(dtype), G, scale)
        finals = jnp.where(is_last, finals.at[n].set(S), finals)
        return (S, finals), o_t

    xs = (q, k, v, zeros_1 if g is None else g, zeros_k if gk is None else gk,
          zeros_v if gv is None else gv, seq, first, last)
    carry = vary_like(jnp.zeros((H, K, V), dtype), q, k, v, S0), vary_like(S0, q, k, v)
    (_, finals), o = lax.scan(step, carry, xs, reverse=reverse)
    return keep_inside(o[None], inside).astype(out_dtype), finals


# ----------------------------------------------------------------------------- derived backward


@highest_precision
def recurrent_bwd_ref(q, k, v, g, g_gamma, gk, gv, S0, do, dST, *, scale, reverse=False):
    """The derived backward (rec.3–rec.9) for one fixed-length batch, in the dtype of the inputs.

    Returns (dq, dk, dv, dg, dgk, dgv, dS0) as float arrays (None for missing gates).
    Kept beside the definition so each formula of NOTES.md has a JAX form that tests can check
    against `jax.vjp(recurrent_ref)`; the Triton backward computes the same sums.
    """
    B, T, H, K = q.shape
    V = v.shape[-1]
    dtype = _acc_dtype(q, k, v, g, gk, gv, S0)
    f = lambda x: None if x is None else x.astype(dtype)  # noqa: E731
    q, k, v, do, S0, dST = f(q), f(k), f(v), f(do), f(S0), f(dST)
    # (rec.2) every gate folds into one log-decay G_t[b, h, i, j]
    G = jnp.zeros((B, T, H, K, V), dtype)
    for gate, expand in ((g, (..., None, None)), (gk, (..., None)), (gv, (..., None, slice(None)))):
        if gate is not None:
            G = G + f(gate)[expand]
    if g_gamma is not None:
        G = G + f(g_gamma)[:, None, None]
    if reverse:  # reverse = forward on time-flipped inputs
        flip = lambda x: jnp.flip(x, 1)  # noqa: E731
        q, k, v, G, do = flip(q), flip(k), flip(v), flip(G), flip(do)
    D = jnp.exp(G)

    def fwd_step(S, xs):
        k_t, v_t, D_t, do_t = xs
        S = S * D_t + k_t[..., :, None] * v_t[..., None, :]
        dq_t = scale * jnp.einsum("bhkv,bhv->bhk", S, do_t)  # (rec.4)
        return S, (S, dq_t)

    t_first = lambda x: jnp.moveaxis(x, 1, 0)  # noqa: E731
    ST, (S, dq) = lax.scan(fwd_step, S0, (t_first(k), t_first(v), t_first(D), t_first(do)))
    D_next = jnp.concatenate([t_first(D)[1:], jnp.ones_like(t_first(D)[:1])], 0)

    def bwd_step(dS_next, xs):
        q_t, k_t, v_t, do_t, D_n = xs
        dS = scale * q_t[..., :, None] * do_t[..., None, :] + D_n * dS_next  # (rec.3)
        dk_t = jnp.einsum("bhkv,bhv->bhk", dS, v_t)  # (rec.5)
        dv_t = jnp.einsum("bhkv,bhk->bhv", dS, k_t)  # (rec.6)
        return dS, (dS, dk_t, dv_t)

    # The scan starts from dS_{T+1} := dS_T / D_{T+1} with D_{T+1} := 1, i.e. the cotangent dST.
    _, (dS, dk, dv) = lax.scan(bwd_step, dST,
                               (t_first(q), t_first(k), t_first(v), t_first(do), D_next),
                               reverse=True)
    dS0 = t_first(D)[0] * dS[0]  # (rec.7)
    dq, dk, dv = jnp.moveaxis(dq, 0, 1), jnp.moveaxis(dk, 0, 1), jnp.moveaxis(dv, 0, 1)
    o = jnp.einsum("tbhkv,bthk->bthv", S, scale * q)
    # (rec.8), (rec.9): reverse cumulative sums plus the final-state term
    final = dST * ST
    rcumsum = lambda x: jnp.flip(jnp.cumsum(jnp.flip(x, 1), 1), 1)  # noqa: E731
    dgk = rcumsum(q * dq - k * dk) + final.sum(-1)[:, None]
    dgv = rcumsum(o * do - v * dv) + final.sum(-2)[:, None]
    dg_ = dgk.sum(-1)
    if reverse:
        dq, dk, dv, dgk, dgv, dg_ = (jnp.flip(x, 1) for x in (dq, dk, dv, dgk, dgv, dg_))
    return (dq, dk, dv, dg_ if g is not None else None, dgk if gk is not None else None,
            dgv if gv is not None else None, dS0)

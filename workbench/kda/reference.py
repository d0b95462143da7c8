"""Pure-JAX references for Kimi Delta Attention (no Triton; imports anywhere).

A ladder, definition first (NOTES.md tags in brackets):

* `kda_step`, `recurrent_kda_ref` — the definition (kda.1): the gated delta rule one token at a
  time, a `lax.scan` per sequence (batched with `vmap`), or over the packed sequences of
  `cu_seqlens` with a state reset at each sequence start;
* `chunk_kda_ref` — the chunkwise form the kernels compute, built from stages that can each be
  called alone on chunked arrays `[NS, BT, H, ·]` (one row of chunks per slot, rows past a
  chunk's end zero):

    `chunk_cumsum`          chunk-local prefix sums b of the log-decays (kda.2);
    `intra_matrices`        L = strictly-lower(β k kᵀ with decay) and Aqk (kda.3, kda.6);
    `forward_substitution`  A = (I + L)⁻¹ row by row (kda.5); `invert_unit_lower` is the same
                            inverse by XLA's triangular solve, which the chunked reference uses;
    `wy_vectors`            w = A (β ⊙ k ⊙ exp b), u = A (β ⊙ v) (kda.3);
    `state_sweep`           δ = u − w h, h' = exp(b_L) ⊙ h + k̂ᵀ δ chunk after chunk (kda.4);
    `chunk_output`          o = q̄ h + Aqk δ (kda.6);

  and `chunk_stages` returns every intermediate in the kernels' packed layout, so that each
  Triton stage can be checked against its reference stage.

`chunk_kda_ref` rounds the operands of every matrix product, and the intermediates the kernels
store in the inputs' dtype (w, u, δ), to the dtype of the inputs and accumulates in float32, as a
bfloat16 training step on tensor cores does; with float32 or float64 inputs nothing is rounded.
Its gradients are `jax.vjp` of it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from .._sharding import vary_like
from .._bounds import bounds_rule, chunk_slots, from_chunks, keep_inside, packed_rows, to_chunks
from .._precision import highest_precision
from .._precision import round_to as _round  # the kernel's rounding, kept by XLA on GPU

__all__ = ["chunk_cumsum", "chunk_kda_ref", "chunk_output", "chunk_stages", "chunked_packed",
           "forward_substitution", "intra_matrices", "invert_unit_lower", "kda_step", "recurrent_kda_ref",
           "state_sweep", "wy_vectors"]

HIGHEST = lax.Precision.HIGHEST


def _acc_dtype(*xs):
    return jnp.float64 if any(x is not None and x.dtype == jnp.float64 for x in xs) else jnp.float32


# ----------------------------------------------------------------------------- the definition


def kda_step(S, q, k, v, g, beta, scale):
    """(kda.1) One token: S ← diag(exp g) S; S ← S + β k (v − Sᵀ k)ᵀ; o = Sᵀ (scale · q).

    Shapes: S [K, V], q k g [K], v [V], beta scalar. Returns (S, o).
    """
    S = jnp.exp(g)[:, None] * S
    delta = beta * (v - jnp.einsum("kv,k->v", S, k, precision=HIGHEST))
    S = S + jnp.outer(k, delta)
    return S, jnp.einsum("kv,k->v", S, scale * q, precision=HIGHEST)


def _scan_sequence(q, k, v, g, beta, S0, scale):
    """One sequence of one head: q k g [T, K], v [T, V], beta [T], S0 [K, V]."""
    dtype = S0.dtype

    def step(S, xs):
        return kda_step(S, *(x.astype(dtype) for x in xs), scale)

    S, o = lax.scan(step, S0, (q, k, v, g, beta))
    return o, S


@highest_precision
def recurrent_kda_ref(q, k, v, g, beta, *, scale=None, initial_state=None, cu_seqlens=None):
    """The definition (kda.1), same signature and semantics as `workbench.recurrent_kda`."""
    q, k, v, g, beta = (jnp.asarray(x) for x in (q, k, v, g, beta))
    B, T, H, K = q.shape
    V = v.shape[-1]
    dtype = _acc_dtype(q, k, v, g, beta, initial_state)
    scale = K ** -0.5 if scale is None else scale
    N = B if cu_seqlens is None else cu_seqlens.shape[0] - 1
    S0 = (vary_like(jnp.zeros((N, H, K, V), dtype), q, k, v) if initial_state is None
          else jnp.asarray(initial_state).astype(dtype))
    if cu_seqlens is not None:
        return _packed_scan(q[0], k[0], v[0], g[0], beta[0], S0, scale, cu_seqlens, v.dtype)
    one = lambda q, k, v, g, beta, S0: _scan_sequence(q, k, v, g, beta, S0, scale)  # noqa: E731
    over_heads = jax.vmap(one, in_axes=(1, 1, 1, 1, 1, 0), out_axes=(1, 0))
    o, S = jax.vmap(over_heads)(q, k, v, g, beta, S0)
    return o.astype(v.dtype), S


def _packed_scan(q, k, v, g, beta, S0, scale, cu_seqlens, out_dtype):
    """Packed sequences [TT, H, ·]: one scan over all rows, the state reset at each sequence start.

    Works with a traced `cu_seqlens` of any values (the bounds rule, API.md: rows outside every sequence
    give zeros); zero-length sequences keep their initial state as final state.
    """
    TT, H, K = q.shape
    V = v.shape[-1]
    dtype = S0.dtype
    seq, first, last, inside = packed_rows(cu_seqlens, TT)
    # rows outside every sequence (the bounds rule, API.md) read zeros and are never written
    q, k, v, g, beta = (keep_inside(x[None], inside)[0] for x in (q, k, v, g, beta))
    step_heads = jax.vmap(kda_step, in_axes=(0, 0, 0, 0, 0, 0, None))

    def step(carry, xs):
        S, finals = carry
        q_t, k_t, v_t, g_t, beta_t, n, is_first, is_last = xs
        S = jnp.where(is_first, S0[n], S)
        S, o_t = step_heads(S, *(x.astype(dtype) for x in (q_t, k_t, v_t, g_t, beta_t)), scale)
        finals = jnp.where(is_last, finals.at[n].set(S), finals)
        return (S, finals), o_t

    carry = vary_like(jnp.zeros((H, K, V), dtype), q, k, v, S0), vary_like(S0, q, k, v)
    (_, finals), o = lax.scan(step, carry, (q, k, v, g, beta, seq, first, last))
    return keep_inside(o[None], inside).astype(out_dtype), finals


# ----------------------------------------------------------------------------- stages of the chunkwise form


def chunk_cumsum(g):
    """(kda.2) b_r = Σ_{u ≤ r} g_u inside each chunk: g [NS, BT, H, K] → b, same shape."""
    return jnp.cumsum(g, axis=1)


def _pairwise(x, k, b, diagonal: bool):
    """[NS, H, BT, BT] Σ_i x_r[i] k_s[i] exp(b_r[i] − b_s[i]) for s < r (s ≤ r with `diagonal`), else 0.

    Every kept exponent is ≤ 0 (prefix sums of log-decays ≤ 0 never increase), so no factor
    overflows whatever the decay. Small problems form the [NS, BT, BT, H, K] ratios at once; past
    `_PAIRWISE_AT_ONCE` elements, 16 slots at a time with the intermediates recomputed in the
    backward (`lax.map` of a `jax.checkpoint`), so memory stays O(16 BT² H K).
    """
    BT = x.shape[1]
    r, s = jnp.arange(BT)[:, None], jnp.arange(BT)[None, :]
    keep = ((r >= s) if diagonal else (r > s))[:, :, None, None]

    def one(args):
        x, k, b = args  # [BT, H, K]
        ratio = jnp.where(keep, jnp.exp(jnp.where(keep, b[:, None] - b[None, :], 0.0)), 0.0)  # [r, s, H, K]
        return jnp.einsum("rhk,shk,rshk->hrs", x, k, ratio, precision=HIGHEST)

    if x.shape[0] * BT * BT * x.shape[2] * x.shape[3] <= _PAIRWISE_AT_ONCE:
        return jax.vmap(one)((x, k, b))
    return lax.map(jax.checkpoint(one), (x, k, b), batch_size=16)


_PAIRWISE_AT_ONCE = 2 ** 24  # elements of the ratio tensor formed in one piece (64 MB in float32)


def intra_matrices(q, k, b, beta, scale):
    """(kda.3, kda.6) The two intra-chunk matrices of each slot, [NS, H, BT, BT]:

    L[r, s]   = β_r Σ_i k_r[i] k_s[i] exp(b_r[i] − b_s[i])          for s < r (strictly lower);
    Aqk[r, s] = scale Σ_i q_r[i] k_s[i] exp(b_r[i] − b_s[i])        for s ≤ r.
    """
    L = _pairwise(k, k, b, diagonal=False) * jnp.moveaxis(beta, 1, 2)[..., None]
    Aqk = scale * _pairwise(q, k, b, diagonal=True)
    return L, Aqk


def forward_substitution(L):
    """(kda.5) A = (I + L)⁻¹ for strictly lower L [..., n, n], one row at a time:
    A[r, :] = e_r − Σ_{s < r} L[r, s] A[s, :] (the rows s < r are final when row r is formed)."""
    n = L.shape[-1]
    eye = jnp.eye(n, dtype=L.dtype)

    def row(A, r):
        new = eye[r] - jnp.einsum("...s,...sc->...c", L[..., r, :], A, precision=HIGHEST)
        return A.at[..., r, :].set(new), None

    A, _ = lax.scan(row, jnp.broadcast_to(eye, L.shape), jnp.arange(n))
    return A


def invert_unit_lower(L):
    """(kda.5) The same A = (I + L)⁻¹ by XLA's triangular solve (forward substitution on
    unit-lower I + L), whose VJP is the closed form (kda.7); the chunked reference uses this."""
    eye = jnp.broadcast_to(jnp.eye(L.shape[-1], dtype=L.dtype), L.shape)
    return jax.scipy.linalg.solve_triangular(eye + L, eye, lower=True, unit_diagonal=True)


def wy_vectors(A, k, v, b, beta, storage):
    """(kda.3) w = A (β ⊙ k ⊙ exp b) [NS, BT, H, K] and u = A (β ⊙ v) [NS, BT, H, V], both stored
    (rounded) in the inputs' dtype, as the kernel stores them."""
    bk = beta[..., None] * k * jnp.exp(b)
    bv = beta[..., None] * v
    w = jnp.einsum("nhrs,nshk->nrhk", _round(A, storage), _round(bk, storage), precision=HIGHEST)
    u = jnp.einsum("nhrs,nshv->nrhv", _round(A, storage), _round(bv, storage), precision=HIGHEST)
    return _round(w, storage), _round(u, storage)


def state_sweep(w, u, k, b, last_row, S0, seq, first, last, storage):
    """(kda.4) The chunk-to-chunk scan over slots: at each chunk with start state h,

        δ = u − w h,   h' = exp(b_L) ⊙ h + k̂ᵀ δ,   k̂_s = k_s ⊙ exp(b_L − b_s).

    w, k, b [NS, BT, H, K]; u [NS, BT, H, V]; last_row [NS, BT] marks each chunk's last valid row
    and the zero rows past it, from where the exponent b_L − b_s is the constant 0: its value,
    and a gradient without the +x − x that strong decay would turn into cancellation (NOTES.md,
    "Gate gradient"). S0 [N, H, K, V]; seq, first, last [NS] from `chunk_slots`.
    Returns (hs: the state at each chunk's start [NS, H, K, V], δ stored in the inputs' dtype
    [NS, BT, H, V], final states [N, H, K, V]).
    """
    H, K, V = S0.shape[1:]
    bL = b[:, -1]  # [NS, H, K]: rows past a chunk's end have g = 0, so b there stays b_L
    k_hat = k * jnp.exp(jnp.where(last_row[..., None, None], 0.0, bL[:, None] - b))
    decay = jnp.exp(bL)[..., None]  # [NS, H, K, 1]

    def step(carry, xs):
        h, finals = carry
        w_c, u_c, khat_c, decay_c, n, is_first, is_last = xs
        h = jnp.where(is_first, S0[n], h)
        delta = _round(u_c - jnp.einsum("rhk,hkv->rhv", _round(w_c, storage), _round(h, storage),
                                        precision=HIGHEST), storage)
        h_next = decay_c * h + jnp.einsum("rhk,rhv->hkv", _round(khat_c, storage), delta, precision=HIGHEST)
        finals = jnp.where(is_last, finals.at[n].set(h_next), finals)
        return (h_next, finals), (h, delta)

    carry = vary_like(jnp.zeros((H, K, V), S0.dtype), w, u, k_hat, S0), vary_like(S0, w, u, k_hat)
    (_, finals), (hs, delta) = lax.scan(step, carry, (w, u, k_hat, decay, seq, first, last))
    return hs, delta, finals


def chunk_output(q, b, hs, Aqk, delta, scale, storage):
    """(kda.6) o_r = q̄_r h + Σ_{s ≤ r} Aqk[r, s] δ_s, q̄ = scale · q ⊙ exp(b): [NS, BT, H, V]."""
    q_bar = scale * q * jnp.exp(b)
    o = jnp.einsum("nrhk,nhkv->nrhv", _round(q_bar, storage), _round(hs, storage), precision=HIGHEST)
    return o + jnp.einsum("nhrs,nshv->nrhv", _round(Aqk, storage), delta, precision=HIGHEST)


# ----------------------------------------------------------------------------- the chunkwise form


@highest_precision
def chunk_kda_ref(q, k, v, g, beta, *, scale=None, initial_state=None, cu_seqlens=None, chunk_size: int = 64):
    """The chunkwise form (kda.2–kda.6), same signature and semantics as `workbench.chunk_kda`."""
    q, k, v, g, beta, initial_state = (None if x is None else jnp.asarray(x)
                                       for x in (q, k, v, g, beta, initial_state))
    B, T, H, K = q.shape
    V = v.shape[-1]
    acc = _acc_dtype(q, k, v, g, beta, initial_state)
    storage = acc if acc == jnp.float64 else q.dtype
    scale = K ** -0.5 if scale is None else scale
    if cu_seqlens is None:
        cu = jnp.arange(B + 1, dtype=jnp.int32) * T
        pack = lambda x: x.reshape(B * T, *x.shape[2:])  # noqa: E731
    else:
        cu = bounds_rule(cu_seqlens, T)
        pack = lambda x: x[0]  # noqa: E731
    N = cu.shape[0] - 1
    S0 = vary_like(jnp.zeros((N, H, K, V), acc), q, k, v) if initial_state is None else initial_state.astype(acc)
    o, ST = chunked_packed(pack(q), pack(k), pack(v), pack(g), pack(beta), S0, cu, scale=scale,
                           chunk_size=chunk_size, storage=storage)
    return o.reshape(B, T, H, V), ST


def chunk_stages(q, k, v, g, beta, S0, cu, *, scale, chunk_size, storage):
    """Every stage of the chunkwise form on packed rows — q k g [TT, H, K], v [TT, H, V], beta
    [TT, H], initial states S0 [N, H, K, V] (its dtype is the accumulation dtype) — as a dict in
    the kernels' layout: b, w, u, delta [TT, H, ·]; A, Aqk [TT, H, BT] (row r of its chunk's
    matrix, columns by position in the chunk); hs [NS, H, K, V] by chunk slot; o [TT, H, V] in
    v's dtype; final [N, H, K, V]."""
    TT, H, K = q.shape
    BT = chunk_size
    acc = S0.dtype
    start, end, seq, first, last = chunk_slots(cu, TT, BT)
    rows = start[:, None] + jnp.arange(BT, dtype=jnp.int32)  # [NS, BT]
    valid = rows < end[:, None]

    def scatter(x):  # [NS, BT, H, ·] → [TT, H, ·]
        return from_chunks(x, rows, valid, TT)

    q, k, v, g, beta = (to_chunks(x, rows, valid).astype(acc) for x in (q, k, v, g, beta))  # 0 past an end
    b = chunk_cumsum(g)
    L, Aqk = intra_matrices(q, k, b, beta, scale)
    A = invert_unit_lower(L)
    w, u = wy_vectors(A, k, v, b, beta, storage)
    hs, delta, final = state_sweep(w, u, k, b, rows >= end[:, None] - 1, S0, seq, first, last, storage)
    o = chunk_output(q, b, hs, Aqk, delta, scale, storage)
    by_row = lambda M: scatter(jnp.moveaxis(M, 1, 2))  # noqa: E731  [NS, H, r, s] → [TT, H, BT]
    return dict(b=scatter(b), A=by_row(A), Aqk=by_row(Aqk), L=by_row(L), w=scatter(w), u=scatter(u),
                hs=hs, delta=scatter(delta), o=scatter(o), final=final)


def chunked_packed(q, k, v, g, beta, S0, cu, *, scale, chunk_size, storage):
    """The chunkwise form on packed rows → (o [TT, H, V] in v's dtype, final states [N, H, K, V])."""
    stages = chunk_stages(q, k, v, g, beta, S0, cu, scale=scale, chunk_size=chunk_size, storage=storage)
    return stages["o"].astype(v.dtype), stages["final"]

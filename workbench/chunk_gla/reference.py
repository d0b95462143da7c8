"""Pure-JAX references for chunked gated linear attention (no Triton; imports anywhere).

A ladder, definition first (NOTES.md tags in brackets):

* the definition is `workbench.recurrent.reference.recurrent_ref` with gates g and gk (gla.1);
* `parallel_ref`   — the parallel (attention-like) form: every output as a sum over all earlier
                     tokens, weights exp(B_t − B_s) from global prefix sums (gla.2); quadratic in T;
* `chunk_gla_ref`  — the chunkwise form the kernels compute: chunk-local prefix sums (gla.3), the
                     state at each chunk boundary by a scan over chunks (gla.4), and each output as
                     the boundary state read by q plus attention inside its chunk (gla.5).

`chunk_gla_ref` works on packed sequences (a fixed-length batch is packed with
`cu_seqlens = arange(B+1)·T`): `chunk_slots` cuts every sequence into chunks, and the scan resets
the state at each sequence's first chunk. It rounds the operands of every matrix product to the
dtype of the inputs and accumulates in float32, as a bfloat16 training step does (NOTES.md,
"Precision"); with float32 or float64 inputs nothing is rounded. Its gradients are `jax.vjp` of it.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from .._sharding import vary_like
from .._bounds import bounds_rule, chunk_slots, from_chunks, to_chunks
from .._precision import highest_precision
from .._precision import round_to as _round  # the kernel's rounding, kept by XLA on GPU
from ..recurrent.reference import recurrent_ref

__all__ = ["chunk_gla_ref", "chunked_packed", "log_decay", "parallel_ref",
           "recurrent_ref"]

HIGHEST = lax.Precision.HIGHEST


def _acc_dtype(*xs):
    return jnp.float64 if any(x is not None and x.dtype == jnp.float64 for x in xs) else jnp.float32


def log_decay(g, gk, shape, dtype):
    """(gla.1) The per-key log-decay a_t = g_t + gk_t, `shape` [..., K]; zeros when both are None."""
    a = jnp.zeros(shape, dtype)
    if g is not None:
        a = a + g.astype(dtype)[..., None]
    if gk is not None:
        a = a + gk.astype(dtype)
    return a


# ----------------------------------------------------------------------------- the parallel form


@highest_precision
def parallel_ref(q, k, v, g=None, gk=None, *, scale=None, initial_state=None):
    """(gla.2) The parallel form for a fixed-length batch: o and the final state from global prefix
    sums B_t = Σ_{u≤t} a_u, with the weight of token s at step t ≥ s written exp(B_t − B_s).

    It materialises a [B, T, T, H, K] tensor: for small T only (notebook, derivation tests).
    """
    B, T, H, K = q.shape
    V = v.shape[-1]
    acc = _acc_dtype(q, k, v, g, gk, initial_state)
    scale = K ** -0.5 if scale is None else scale
    out_dtype = v.dtype
    q, k, v = (x.astype(acc) for x in (q, k, v))
    S0 = jnp.zeros((B, H, K, V), acc) if initial_state is None else initial_state.astype(acc)
    Bt = jnp.cumsum(log_decay(g, gk, q.shape, acc), axis=1)  # [B, T, H, K]
    causal = jnp.tril(jnp.ones((T, T), bool))[None, :, :, None, None]
    exponent = jnp.where(causal, Bt[:, :, None] - Bt[:, None, :], 0.0)  # [B, t, s, H, K]
    weights = jnp.where(causal, jnp.exp(exponent), 0.0)
    o = jnp.einsum("bthk,bshk,btshk,bshv->bthv", scale * q, k, weights, v, precision=HIGHEST)
    o = o + jnp.einsum("bthk,bhkv->bthv", scale * q * jnp.exp(Bt), S0, precision=HIGHEST)
    last = Bt[:, -1:] if T else jnp.zeros((B, 1, H, K), acc)
    S = jnp.exp(last[:, 0])[..., None] * S0 + jnp.einsum("bshk,bshv->bhkv", k * jnp.exp(last - Bt), v,
                                                         precision=HIGHEST)
    return o.astype(out_dtype), S


# ----------------------------------------------------------------------------- chunks


@highest_precision
def chunk_gla_ref(q, k, v, g=None, gk=None, *, scale=None, initial_state=None, cu_seqlens=None,
                  chunk_size: int = 64, b_dtype=None):
    """The chunkwise form (gla.3–gla.5), same signature and semantics as `workbench.chunk_gla`. b_dtype: round
    the chunk-local prefix sums b to this dtype once (their gradient passed through unchanged): run in float64
    with float32, an exact computation whose only error is b rounded as a correctly rounded float32 sum would
    be, a floor for the kernels' float32 b (`testing.check`'s `variants`; NOTES.md, "Precision")."""
    q, k, v, g, gk, initial_state = (None if x is None else jnp.asarray(x) for x in (q, k, v, g, gk, initial_state))
    B, T, H, K = q.shape
    V = v.shape[-1]
    acc = _acc_dtype(q, k, v, g, gk, initial_state)
    storage = acc if acc == jnp.float64 else q.dtype
    scale = K ** -0.5 if scale is None else scale
    if cu_seqlens is None:
        cu = jnp.arange(B + 1, dtype=jnp.int32) * T
        pack = lambda x: None if x is None else x.reshape(B * T, *x.shape[2:])  # noqa: E731
    else:
        cu = bounds_rule(cu_seqlens, T)  # any values (API.md): rows outside every sequence give zeros
        pack = lambda x: None if x is None else x[0]  # noqa: E731
    N = cu.shape[0] - 1
    S0 = vary_like(jnp.zeros((N, H, K, V), acc), q, k, v) if initial_state is None else initial_state.astype(acc)
    a = log_decay(pack(g), pack(gk), (B * T, H, K), acc)
    o, ST = chunked_packed(pack(q), pack(k), pack(v), a, S0, cu, scale=scale, chunk_size=chunk_size,
                           storage=storage, b_dtype=b_dtype)
    return o.reshape(B, T, H, V), ST


def chunked_packed(q, k, v, a, S0, cu, *, scale, chunk_size, storage, b_dtype=None):
    """The chunkwise form on packed rows: q, k [TT, H, K], v [TT, H, V], per-key log-decay a
    [TT, H, K] (None: no gate), initial states S0 [N, H, K, V] → (o [TT, H, V] in v's dtype,
    final states [N, H, K, V] in the accumulation dtype). Products round their operands to `storage`."""
    TT, H, K = q.shape
    V = v.shape[-1]
    BT = chunk_size
    acc = S0.dtype
    out_dtype = v.dtype
    if a is None:
        a = jnp.zeros(q.shape, acc)
    start, end, seq, first, last = chunk_slots(cu, TT, BT)
    rows = start[:, None] + jnp.arange(BT, dtype=jnp.int32)  # [NS, BT]
    valid = rows < end[:, None]

    q, k, v, a = (to_chunks(x, rows, valid).astype(acc) for x in (q, k, v, a))  # [NS, BT, H, ·], 0 past an end

    b = jnp.cumsum(a, axis=1)  # (gla.3) chunk-local prefix sums
    if b_dtype is not None:  # rounded once, the gradient passed through (chunk_gla_ref's b_dtype)
        b = b + lax.stop_gradient(b.astype(b_dtype).astype(acc) - b)
    bL = b[:, -1]  # [NS, H, K]: b at the last row (zero gates past a chunk's end leave it unchanged)
    # (gla.4) k weighted by the decay from its row to the chunk's end. From the last valid row on the
    # exponent is 0 as a constant: exactly its value, and its gradient has no +x − x to cancel.
    from_last = (rows >= end[:, None] - 1)[..., None, None]
    k_hat = k * jnp.exp(jnp.where(from_last, 0.0, bL[:, None] - b))
    update = jnp.einsum("nshk,nshv->nhkv", _round(k_hat, storage), _round(v, storage), precision=HIGHEST)
    decay = jnp.exp(bL)[..., None]  # [NS, H, K, 1]

    def step(carry, xs):
        h, finals = carry
        decay_c, update_c, n, is_first, is_last = xs
        h = jnp.where(is_first, S0[n], h)
        h_next = decay_c * h + update_c  # (gla.4)
        finals = jnp.where(is_last, finals.at[n].set(h_next), finals)
        return (h_next, finals), h

    carry = vary_like(jnp.zeros((H, K, V), acc), decay, update, S0), vary_like(S0, decay, update)
    (_, ST), h = lax.scan(step, carry, (decay, update, seq, first, last))

    # (gla.5) the boundary state read by q, plus attention inside the chunk
    q_bar = scale * q * jnp.exp(b)
    o = jnp.einsum("nrhk,nhkv->nrhv", _round(q_bar, storage), _round(h, storage), precision=HIGHEST)
    r, s = jnp.arange(BT)[:, None], jnp.arange(BT)[None, :]
    below = (r > s)[None, :, :, None, None]  # strictly below the diagonal
    ratio = jnp.where(below, jnp.exp(jnp.where(below, b[:, :, None] - b[:, None, :], 0.0)), 0.0)
    A = scale * jnp.einsum("nrhk,nshk,nrshk->nhrs", q, k, ratio, precision=HIGHEST)
    A = A + scale * jnp.einsum("nrhk,nrhk,rs->nhrs", q, k, jnp.eye(BT, dtype=acc), precision=HIGHEST)
    o = o + jnp.einsum("nhrs,nshv->nrhv", _round(A, storage), _round(v, storage), precision=HIGHEST)

    return from_chunks(o, rows, valid, TT).astype(out_dtype), ST

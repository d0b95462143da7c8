"""Pure-JAX reference for `workbench.flash_attention` (no Triton; imports anywhere).

* `allowed_mask`  — which (query, key) pairs may attend: causal, sliding window, segment ids and
                    packed sequences (`cu_seqlens_q/k`), all combined (fa.1);
* `attention_ref` — the definition (fa.1): dense logits, softcap, mask, a softmax whose
                    denominator includes the sinks, dropout, and the log-sum-exp.

The numerics follow `jax.nn.dot_product_attention`'s XLA path, so that this function run in the
kernel's dtype is the natural JAX computation the kernels are measured against: logits in the
accumulation dtype (float32; float64 for float64 inputs), softmax in that dtype, probabilities cast
to q's dtype before the product with v, accumulated again in float32.

Rows with nothing to attend to (and no sink) give o = 0, lse = −inf and zero gradients (fa.10):
the softmax never divides by zero and never takes exp of a difference of infinities, so autodiff
sees no NaN on either branch of its `where`s.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from .._bounds import bounds_rule, packed_rows
from .._precision import highest_precision


def acc_dtype(dtype):
    """Accumulation dtype for inputs of `dtype`: float64 stays float64, everything else float32."""
    return jnp.float64 if jnp.dtype(dtype) == jnp.float64 else jnp.float32


def _positions(T: int, cu_seqlens, outside: int):
    """(sequence index, position inside it, its length) of each of T packed rows. Traced bounds of any
    value are allowed: the bounds rule (API.md) applies, and a row outside every sequence gets the
    sequence index `outside` (negative, different for queries and keys, so it meets nothing)."""
    rows = jnp.arange(T, dtype=jnp.int32)
    if cu_seqlens is None:
        zeros = jnp.zeros((T,), jnp.int32)
        return zeros, rows, zeros + T
    cu = bounds_rule(cu_seqlens, T)
    seq, _, _, inside = packed_rows(cu, T)  # empty sequences own no row
    return jnp.where(inside, seq, outside), rows - cu[seq], cu[seq + 1] - cu[seq]


def allowed_mask(B: int, Tq: int, Tk: int, *, causal=False, window=None, segment_ids=None,
                 cu_seqlens_q=None, cu_seqlens_k=None):
    """bool [B, Tq, Tk]: True where query i may attend to key j (fa.1).

    Positions i, j and lengths Lq, Lk are those of the (packed) sequence a row belongs to, and the
    query's diagonal is aligned bottom-right: key j sits at query position j − (Lk − Lq).
      causal:      j − (Lk − Lq) ≤ i
      window:      (left, right) ints ≥ 0:  i − left ≤ j − (Lk − Lq) ≤ i + right;  None: no window
      segment_ids: (q_ids [B, Tq], kv_ids [B, Tk]) integer ids; equal ids attend
      cu_seqlens_q/k: int32 [N+1] bounds of N packed sequences (B == 1); a query sees only keys of
                   its own sequence. May be traced under `jit`.
    """
    if (cu_seqlens_q is None) != (cu_seqlens_k is None):
        raise ValueError("cu_seqlens_q, cu_seqlens_k: give both or neither")
    seq_q, i, Lq = _positions(Tq, cu_seqlens_q, outside=-1)
    seq_k, j, Lk = _positions(Tk, cu_seqlens_k, outside=-2)
    i, Lq, seq_q = i[:, None], Lq[:, None], seq_q[:, None]
    j, seq_k = j[None, :], seq_k[None, :]
    # Lk of the query's own sequence: where the sequences differ the pair is masked anyway.
    if cu_seqlens_k is None:
        Lk = jnp.int32(Tk)
    else:
        cu_k = bounds_rule(cu_seqlens_k, Tk)
        n = jnp.clip(seq_q, 0, cu_k.shape[0] - 2)
        Lk = cu_k[n + 1] - cu_k[n]
    diag = j - (Lk - Lq)  # key position on the query axis
    allowed = seq_q == seq_k
    if causal:
        allowed = allowed & (diag <= i)
    if window is not None:
        left, right = window
        allowed = allowed & (i - left <= diag) & (diag <= i + right)
    allowed = jnp.broadcast_to(allowed, (B, Tq, Tk))
    if segment_ids is not None:
        q_ids, kv_ids = segment_ids
        allowed = allowed & (q_ids[:, :, None] == kv_ids[:, None, :])
    return allowed


@highest_precision
def attention_ref(q, k, v, *, scale, causal=False, window=None, softcap=None, sinks=None, bias=None,
                  segment_ids=None, cu_seqlens_q=None, cu_seqlens_k=None, dropout_rate=0.0,
                  dropout_mask=None):
    """The definition (fa.1). Returns (o [B, Tq, H, D] in q's dtype, lse [B, H, Tq]).

    q [B, Tq, H, D]; k, v [B, Tk, Hkv, D] with H % Hkv == 0: query head h reads kv head
    h // (H // Hkv). scale: a float (already resolved). window: (left, right) or None.
    softcap: c > 0 or None, s ← c·tanh(s/c). sinks [H]: raw logits in the denominator only.
    bias [B|1, H|1, Tq, Tk], added before the softcap. dropout_mask: bool [B, H, Tq, Tk] keep-mask
    (probabilities ← p · mask / (1 − dropout_rate)); ignored when None.

    lse = log(Σ_j exp(s_ij) + exp(sink_h)) is float32 (float64 for float64 inputs), −inf for a
    row with nothing to attend to and no sink.
    """
    B, Tq, H, D = q.shape
    Tk, Hkv = k.shape[1], k.shape[2]
    acc = acc_dtype(q.dtype)
    group = H // Hkv
    k = jnp.repeat(k, group, axis=2)  # (fa.9) query head h reads kv head h // group
    v = jnp.repeat(v, group, axis=2)

    s = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=acc) * jnp.asarray(scale, acc)
    if bias is not None:
        s = s + bias.astype(acc)
    if softcap is not None:
        s = softcap * jnp.tanh(s / softcap)
    allowed = allowed_mask(B, Tq, Tk, causal=causal, window=window, segment_ids=segment_ids,
                           cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k)[:, None]  # [B, 1, Tq, Tk]
    s = jnp.where(allowed, s, -jnp.inf)

    # Softmax with the sinks in the denominator. m is a constant shift (the result does not depend
    # on it), so no gradient flows through it; −inf (an empty row) becomes 0 before any subtraction.
    m = jnp.max(s, axis=-1, initial=-jnp.inf)
    if sinks is not None:
        sink = sinks.astype(acc)[None, :, None]  # [1, H, 1]
        m = jnp.maximum(m, sink)
    m = lax.stop_gradient(jnp.where(jnp.isfinite(m), m, 0.0))
    e = jnp.exp(s - m[..., None])  # exactly 0 where masked
    l = jnp.sum(e, axis=-1)
    if sinks is not None:
        l = l + jnp.exp(sink - m)
    nonempty = l > 0
    l_safe = jnp.where(nonempty, l, 1.0)
    lse = jnp.where(nonempty, m + jnp.log(l_safe), -jnp.inf)
    p = e / l_safe[..., None]

    if dropout_mask is not None:
        p = jnp.where(dropout_mask, p / (1.0 - dropout_rate), 0.0)  # (fa.11)
    o = jnp.einsum("bhqk,bkhd->bqhd", p.astype(q.dtype), v, preferred_element_type=acc)
    return o.astype(q.dtype), lse

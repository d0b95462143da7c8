"""Pure-JAX reference for `workbench.ring_attention` (no Triton; imports anywhere).

A ladder, each rung citing the NOTES.md tags it implements:

* `ring_attention_ref` — the definition: `flash_attention`'s reference on the gathered sequence;
* `merge`              — two partial results over disjoint keys into one (ring.1, ring.2);
* `attend_block`       — one step's partial result on one device (the block kinds of `schedule.py`),
                         padded to every local row (rows the block skips: o = 0, lse = −inf);
* `block_gradients`    — one step's gradients given the merged o and lse (ring.3), padded likewise;
* `simulate_ring`      — the whole ring on one device, forward and backward, looping over devices
                         and steps with the schedule (ring.4–ring.7): what the traced ring computes,
                         written without collectives so it can be checked in float64.

The traced ring (`__init__.py`) uses `attend_block` and `block_gradients` with either the Triton
block entry points of `flash_attention` or the pure-JAX ones below (`reference_blocks`).
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp
import numpy as np

from .._precision import highest_precision
from .._sharding import vary_like
from ..flash_attention.reference import acc_dtype, allowed_mask, attention_ref
from . import schedule
from .schedule import Block


def ring_attention_ref(q, k, v, *, causal=False, scale=None):
    """The definition: attention over the gathered sequence, q `[B, T, H, D]`, k, v `[B, T, Hkv, D]`
    in sequence order. Returns (o in q's dtype, lse `[B, H, T]`)."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return attention_ref(q, k, v, scale=scale, causal=causal)


# ----------------------------------------------------------------------------- merging partial results


def merge(o_a, lse_a, o_b, lse_b):
    """(ring.1, ring.2) Partial results over disjoint key sets → the result over their union.

    o `[B, T, H, D]` float32 (or float64), lse `[B, H, T]`. A row empty in both (lse −inf twice)
    stays o = 0, lse = −inf: every exponent is of a finite number or of −inf, never −inf − (−inf).
    """
    m = jnp.maximum(lse_a, lse_b)
    m = jnp.where(jnp.isfinite(m), m, 0.0)
    lse = m + jnp.log(jnp.exp(lse_a - m) + jnp.exp(lse_b - m))  # log 0 = −inf for an empty row
    finite = jnp.isfinite(lse)
    safe = jnp.where(finite, lse, 0.0)
    weight = lambda part: jnp.swapaxes(jnp.where(finite, jnp.exp(part - safe), 0.0), 1, 2)[..., None]  # noqa: E731
    return weight(lse_a) * o_a + weight(lse_b) * o_b, lse


# ----------------------------------------------------------------------------- one step


Attend = Callable[..., tuple]      # (q, k, v, *, causal, scale) → (o float32, lse)
Gradients = Callable[..., tuple]   # (q, k, v, o, lse, do, *, causal, scale) → (dq, dk, dv) float32


def _fill(zeros, part, axis: int, where: slice):
    """`zeros` (an array of one fill value) with `part` at `where` along `axis`. A part that fills the whole
    axis replaces it, varying over the manual axes `zeros` varies over, rather than being scattered into it:
    inside shard_map, on GPUs, JAX 0.11.2's Shardy partitioner crashes (a segmentation fault while
    compiling) on a scatter that covers a whole axis of an array varying over the manual axis, where a
    partial one compiles (issue 30; `scripts/shardy_probe.py` keeps both)."""
    if where.start == 0 and where.stop == zeros.shape[axis]:
        return vary_like(part.astype(zeros.dtype), zeros)
    index = (slice(None),) * (axis % zeros.ndim) + (where,)
    return zeros.at[index].set(part.astype(zeros.dtype))


def attend_block(blk: Block, q, k, v, *, scale, attend: Attend):
    """One step's partial result over all T local rows: (o float32 `[B, T, H, D]`, lse `[B, H, T]`),
    o = 0 and lse = −inf on the rows the block does not touch (all of them when it is skipped)."""
    B, T, H, D = q.shape
    acc = jnp.promote_types(acc_dtype(q.dtype), jnp.float32)
    # *_like of q: inside shard_map the zeros vary over the ring's axis like q (both branches of the
    # ring's lax.cond must agree on that), though a skipped block's are the same on every device
    o = jnp.zeros_like(q, acc)
    lse = jnp.full_like(q, -jnp.inf, acc, shape=(B, H, T))
    if blk.skipped:
        return o, lse
    rows, keys = blk.row_slice(T), blk.key_slice(T)
    o_b, lse_b = attend(q[:, rows], k[:, keys], v[:, keys], causal=blk.causal, scale=scale)
    return _fill(o, o_b, 1, rows), _fill(lse, lse_b, -1, rows)


def block_gradients(blk: Block, q, k, v, o, lse, do, *, scale, gradients: Gradients):
    """(ring.3) One step's float32 (dq `[B, T, H, D]`, dk, dv `[B, T, Hkv, D]`) from the merged
    o and lse; zero where the block does not reach (everywhere when it is skipped)."""
    acc = jnp.promote_types(acc_dtype(q.dtype), jnp.float32)
    dq, dk, dv = jnp.zeros_like(q, acc), jnp.zeros_like(k, acc), jnp.zeros_like(v, acc)  # varying: attend_block
    if blk.skipped:
        return dq, dk, dv
    T = q.shape[1]
    rows, keys = blk.row_slice(T), blk.key_slice(T)
    dq_b, dk_b, dv_b = gradients(q[:, rows], k[:, keys], v[:, keys], o[:, rows], lse[..., rows], do[:, rows],
                                 causal=blk.causal, scale=scale)
    return _fill(dq, dq_b, 1, rows), _fill(dk, dk_b, 1, keys), _fill(dv, dv_b, 1, keys)


# ----------------------------------------------------------------------------- pure-JAX blocks


def reference_attend(q, k, v, *, causal, scale):
    """`attention_ref` on one block, in float32 (float64 stays float64): (o, lse)."""
    acc = jnp.promote_types(acc_dtype(q.dtype), jnp.float32)
    return attention_ref(q.astype(acc), k.astype(acc), v.astype(acc), scale=scale, causal=causal)


@highest_precision
def reference_gradients(q, k, v, o, lse, do, *, causal, scale):
    """(ring.3) dq, dk, dv of one block from the merged o and lse (fa.5 with the global row statistics):

        P = exp(S − lse),  Delta = rowsum(dO ∘ O),  dS = P ∘ (dO Vᵀ − Delta),
        dQ = scale · dS K,  dK = scale · dSᵀ Q,  dV = Pᵀ dO   (dK, dV summed over each GQA group).
    """
    acc = jnp.promote_types(acc_dtype(q.dtype), jnp.float32)
    B, Tq, H, D = q.shape
    Tk, Hkv = k.shape[1], k.shape[2]
    group = H // Hkv
    q, k, v, o, do = (x.astype(acc) for x in (q, k, v, o, do))
    kr, vr = jnp.repeat(k, group, axis=2), jnp.repeat(v, group, axis=2)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, kr) * scale
    seen = allowed_mask(B, Tq, Tk, causal=causal)[:, None] & jnp.isfinite(lse)[..., None]
    p = jnp.where(seen, jnp.exp(s - jnp.where(jnp.isfinite(lse), lse, 0.0)[..., None]), 0.0)
    delta = jnp.einsum("bqhd,bqhd->bhq", do, o)
    ds = p * (jnp.einsum("bqhd,bkhd->bhqk", do, vr) - delta[..., None])
    dq = scale * jnp.einsum("bhqk,bkhd->bqhd", ds, kr)
    dk = scale * jnp.einsum("bhqk,bqhd->bkhd", ds, q).reshape(B, Tk, Hkv, group, D).sum(3)
    dv = jnp.einsum("bhqk,bqhd->bkhd", p, do).reshape(B, Tk, Hkv, group, D).sum(3)
    return dq, dk, dv


# ----------------------------------------------------------------------------- the ring on one device


@highest_precision
def simulate_ring(q, k, v, do, *, n: int, layout: str, causal: bool, scale=None,
                  attend: Attend = reference_attend, gradients: Gradients = reference_gradients):
    """The ring's forward and backward with n simulated devices, sequentially, on global arrays in
    sequence order: shard, run the schedule, merge (ring.1–ring.7), unshard.

    Returns (o, lse, dq, dk, dv), o and gradients in the accumulation dtype, all in sequence order.
    """
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    T = q.shape[1]
    order = schedule.sequence_order(T, n, layout)
    shard = lambda x: jnp.split(jnp.asarray(x)[:, order], n, axis=1)  # noqa: E731
    qs, ks, vs, dos = shard(q), shard(k), shard(v), shard(do)
    outs = []
    for r in range(n):  # forward: device r meets shard source(r, s) at step s
        o, lse = attend_block(schedule.DIAGONAL if causal else schedule.FULL, qs[r], ks[r], vs[r],
                              scale=scale, attend=attend)
        for s in range(1, n):
            src = schedule.source(r, s, n)
            part = attend_block(schedule.block(layout, causal, n, r, s), qs[r], ks[src], vs[src],
                                scale=scale, attend=attend)
            o, lse = merge(o, lse, *part)
        outs.append((o, lse))
    dqs = [0.0] * n
    dks, dvs = [0.0] * n, [0.0] * n
    for r in range(n):  # backward: each step's dk, dv belong to the shard that travelled to r
        o, lse = outs[r]
        for s in range(n):
            src = schedule.source(r, s, n)
            dq, dk, dv = block_gradients(schedule.block(layout, causal, n, r, s), qs[r], ks[src], vs[src],
                                         o, lse, dos[r], scale=scale, gradients=gradients)
            dqs[r], dks[src], dvs[src] = dqs[r] + dq, dks[src] + dk, dvs[src] + dv
    inverse = np.argsort(order)
    gather = lambda xs, axis=1: jnp.concatenate(xs, axis=axis)[(slice(None),) * axis + (inverse,)]  # noqa: E731
    return (gather([o for o, _ in outs]), gather([lse for _, lse in outs], axis=2),
            gather(dqs), gather(dks), gather(dvs))

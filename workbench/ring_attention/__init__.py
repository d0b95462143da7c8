"""Ring attention across devices: `workbench.ring_attention` and `workbench.sharded_ring_attention`.

    o = softmax(scale · Q Kᵀ (causal mask)) V  over the gathered sequence, with Q, K, V sharded
    along the sequence over a mesh axis of n devices.

Each device keeps its queries; the key/value shards travel the ring with `lax.ppermute`, one hop per
step, and every step's partial result merges into the running one by log-sum-exp (NOTES.md ring.1,
ring.2). The backward runs the ring again with each shard's dk, dv travelling beside it, so they
arrive home after the last hop (ring.3). The schedule (`schedule.py`) decides per device and step
which block is computed, and a `lax.cond` on the device index runs only that one: causal blocks
from later positions are never computed. The block computations are `flash_attention`'s Triton
kernels (`attention_block`, `attention_block_backward`) or their pure-JAX counterparts
(`reference.py`), chosen by `implementation`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Hashable

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from .. import _checks
from ..flash_attention import attention_block, attention_block_backward
from ..flash_attention import validate as validate_attention
from . import schedule
from .reference import attend_block, block_gradients, merge, reference_attend, reference_gradients

__all__ = ["ring_attention", "sharded_ring_attention"]


@dataclasses.dataclass(frozen=True)
class _Static:
    axis_name: Hashable
    n: int
    causal: bool
    scale: float
    layout: str
    implementation: str


def ring_attention(q, k, v, *, axis_name, causal=False, scale=None, layout="contiguous", implementation=None):
    """Attention over a sequence sharded across the devices of mesh axis `axis_name`.

    Call it inside `jax.shard_map` (or use `sharded_ring_attention` on global arrays).

    Args:
      q: `[B, T, H, D]`, this device's queries; k, v: `[B, T, Hkv, D]` with `H % Hkv == 0` (GQA/MQA),
        the same T positions as q. One float dtype.
      axis_name: the mesh axis the sequence is sharded over (n devices, ring order = axis index).
      causal: query position i sees key positions j ≤ i of the gathered sequence.
      scale: multiplies q·k; None means `D ** -0.5`.
      layout: which positions device i holds: "contiguous" (chunk i of n equal chunks) or "zigzag"
        (chunks i and 2n−1−i of 2n equal chunks, in that order; T must be even), which gives every
        device the same causal work.
      implementation: None/"triton" (flash attention's Triton kernels; interpreter on CPU) or
        "reference" (pure JAX blocks).

    Returns:
      o `[B, T, H, D]` in q's dtype: this device's rows of attention over the gathered sequence.
      Gradients flow to q, k and v.

    Example:
      >>> import functools, jax, workbench
      >>> from jax.sharding import AxisType, PartitionSpec as P
      >>> mesh = jax.make_mesh((len(jax.devices()),), ("sp",), axis_types=(AxisType.Auto,))
      >>> q, k, v = (jax.random.normal(jax.random.key(i), (1, 8 * mesh.size, 2, 16)) for i in range(3))
      >>> ring = functools.partial(workbench.ring_attention, axis_name="sp", causal=True)
      >>> o = jax.shard_map(ring, mesh=mesh, in_specs=P(None, "sp"), out_specs=P(None, "sp"))(q, k, v)
      >>> o.shape == q.shape
      True
    """
    impl = _checks.implementation_name(implementation)
    scale = _validate(q, k, v, causal=causal, scale=scale, layout=layout, impl=impl)
    if layout == "zigzag" and q.shape[1] % 2:
        raise ValueError(f"q: layout 'zigzag' needs an even local length (two equal chunks per device), got "
                         f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    try:
        n = lax.axis_size(axis_name)
    except (NameError, KeyError, ValueError) as err:
        raise ValueError(f"axis_name: {axis_name!r} is not a mesh axis bound here (call ring_attention inside "
                         f"jax.shard_map over that axis, or use sharded_ring_attention): {err}") from None
    return _ring(q, k, v, _Static(axis_name, n, bool(causal), scale, layout, impl))


def sharded_ring_attention(q, k, v, *, mesh, axis_name, causal=False, scale=None, layout="contiguous",
                           implementation=None):
    """`ring_attention` on global arrays: shards the sequence over `mesh`'s axis `axis_name`.

    q `[B, T, H, D]`, k, v `[B, T, Hkv, D]` in sequence order; T divisible by the axis size n
    (zigzag: by 2n). For zigzag the sequence is reordered into device order before the ring and
    back after it. Other mesh axes see the arrays replicated. Returns o `[B, T, H, D]` in sequence
    order.

    Example:
      >>> import jax, workbench
      >>> mesh = jax.make_mesh((len(jax.devices()),), ("sp",))
      >>> q, k, v = (jax.random.normal(jax.random.key(i), (1, 8 * mesh.size, 2, 16)) for i in range(3))
      >>> o = workbench.sharded_ring_attention(q, k, v, mesh=mesh, axis_name="sp", causal=True, layout="zigzag")
      >>> o.shape == q.shape
      True
    """
    impl = _checks.implementation_name(implementation)
    _validate(q, k, v, causal=causal, scale=scale, layout=layout, impl=impl)
    if not isinstance(mesh, Mesh):
        raise ValueError(f"mesh: expected a jax.sharding.Mesh, got {type(mesh).__name__}")
    if axis_name not in mesh.axis_names:
        raise ValueError(f"axis_name: {axis_name!r} is not an axis of the mesh (axes {mesh.axis_names}, "
                         f"shape {dict(mesh.shape)})")
    n = mesh.shape[axis_name]
    T = q.shape[1]
    pieces = n if layout == "contiguous" else 2 * n
    if T % pieces:
        raise ValueError(f"q: sequence length T={T} must be divisible by {pieces} ({layout} layout over "
                         f"{n} devices of axis {axis_name!r}), got q {tuple(q.shape)}, k {tuple(k.shape)}")
    ring = functools.partial(ring_attention, axis_name=axis_name, causal=causal, scale=scale, layout=layout,
                             implementation=implementation)
    if layout == "zigzag":
        ring = functools.partial(_zigzag_ring, ring=ring, axis_name=axis_name, n=n)
    spec = PartitionSpec(None, axis_name)
    sharded = jax.shard_map(ring, mesh=mesh, in_specs=(spec, spec, spec), out_specs=spec)
    return sharded(*(_placed(x, mesh, spec) for x in (q, k, v)))


def _zigzag_ring(q, k, v, *, ring, axis_name, n: int):
    """`ring` on the zigzag layout, from and back to contiguous shards (ring.6)."""
    o = ring(*(_to_zigzag(x, axis_name, n) for x in (q, k, v)))
    return _to_zigzag(o, axis_name, n, inverse=True)


def _to_zigzag(x, axis_name, n: int, inverse: bool = False):
    """Contiguous shard → zigzag shard, or back: one collective-permute per chunk parity, no gather
    of the sequence (`schedule.zigzag_moves`, ring.6)."""
    moves = schedule.zigzag_moves(n)
    even_device = lax.axis_index(axis_name) % 2 == 0
    a, b = jnp.split(x, 2, axis=1)
    if inverse:  # zigzag (front, back) → (even chunk, odd chunk), each sent back to its contiguous device
        even, odd = jnp.where(even_device, a, b), jnp.where(even_device, b, a)
        back = lambda piece, move: lax.ppermute(piece, axis_name, [(dst, src) for src, dst in move])  # noqa: E731
        return jnp.concatenate([back(even, moves[0]), back(odd, moves[1])], axis=1)
    even, odd = (lax.ppermute(piece, axis_name, move) for piece, move in zip((a, b), moves))
    return jnp.concatenate([jnp.where(even_device, even, odd), jnp.where(even_device, odd, even)], axis=1)


def _placed(x, mesh: Mesh, spec: PartitionSpec):
    """x sharded as `spec`: an explicit-axes mesh wants its shard_map inputs resharded by the caller;
    with automatic axes shard_map reshards them itself."""
    if any(mesh.axis_types[mesh.axis_names.index(a)] == AxisType.Explicit for a in spec if a is not None):
        return jax.reshard(x, NamedSharding(mesh, spec))
    return x


def _validate(q, k, v, *, causal, scale, layout, impl) -> float:
    """Check the arguments both ops share; return the resolved scale."""
    spec = validate_attention(q, k, v, causal=causal, scale=scale, sliding_window=None, softcap=None, sinks=None,
                              bias=None, segment_ids=None, cu_seqlens_q=None, cu_seqlens_k=None,
                              dropout_rate=0.0, dropout_key=None, return_lse=False, impl=impl)
    shapes = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    if layout not in schedule.LAYOUTS:
        raise ValueError(f"layout: expected one of {', '.join(map(repr, schedule.LAYOUTS))}, got {layout!r}")
    if k.shape[1] != q.shape[1]:
        raise ValueError(f"k: ring attention needs the sequence length of q and k/v equal (each device holds "
                         f"the same positions of both), got {shapes}")
    if q.shape[1] == 0:
        raise ValueError(f"q: sequence length must be ≥ 1, got {shapes}")
    return spec.scale


# ----------------------------------------------------------------------------- the ring


def _blocks(st: _Static):
    if st.implementation == "reference":
        return reference_attend, reference_gradients
    return attention_block, attention_block_backward


def _pass(x, st: _Static):
    """(ring.4) One hop along the ring: device r sends to r + 1."""
    return lax.ppermute(x, st.axis_name, [(r, (r + 1) % st.n) for r in range(st.n)])


def _at_step(s: int, r, st: _Static, run):
    """`run(block)` for the block this device computes at step s (ring.5, ring.7); when it depends
    on the traced device index r, a `lax.cond` runs only the chosen branch."""
    earlier, later = schedule.step_blocks(st.layout, st.causal, s)
    if earlier == later:
        return run(earlier)
    return lax.cond(s <= r, lambda: run(earlier), lambda: run(later))


def _ring_forward(q, k, v, st: _Static):
    """(o, lse) merged over all n steps, o float32."""
    attend, _ = _blocks(st)
    r = lax.axis_index(st.axis_name)
    kv, o, lse = (k, v), None, None
    for s in range(st.n):
        # The next shard is requested before this step's compute and nothing here waits for it, so
        # XLA may run the collective-permute while the kernels run (NOTES.md, "Overlap").
        incoming = _pass(kv, st) if s + 1 < st.n else None
        part = _at_step(s, r, st, lambda blk, kv=kv: attend_block(blk, q, *kv, scale=st.scale, attend=attend))
        o, lse = part if o is None else merge(o, lse, *part)  # (ring.1, ring.2)
        kv = incoming
    return o, lse


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _ring(q, k, v, st: _Static):
    o, _ = _ring_forward(q, k, v, st)
    return o.astype(q.dtype)


def _ring_fwd(q, k, v, st: _Static):
    o, lse = _ring_forward(q, k, v, st)
    return o.astype(q.dtype), (q, k, v, o, lse)


def _ring_bwd(st: _Static, residuals, do):
    """(ring.3) The ring again: each step's dq stays, its dk, dv travel on with the shard they belong
    to; after the n-th hop they are home."""
    q, k, v, o, lse = residuals
    _, gradients = _blocks(st)
    r = lax.axis_index(st.axis_name)
    kv, dq, dkv = (k, v), None, None
    for s in range(st.n):
        incoming = _pass(kv, st) if s + 1 < st.n else None
        dq_s, dk_s, dv_s = _at_step(s, r, st, lambda blk, kv=kv: block_gradients(
            blk, q, *kv, o, lse, do, scale=st.scale, gradients=gradients))
        # The block's gradients do not depend on the dk, dv arriving from r − 1: only this sum waits.
        dq = dq_s if dq is None else dq + dq_s
        dkv = (dk_s, dv_s) if dkv is None else (dkv[0] + dk_s, dkv[1] + dv_s)
        dkv = _pass(dkv, st)
        kv = incoming
    return dq.astype(q.dtype), dkv[0].astype(k.dtype), dkv[1].astype(v.dtype)


_ring.defvjp(_ring_fwd, _ring_bwd)

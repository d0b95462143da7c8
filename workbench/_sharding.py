"""Sharding helpers every layer may use: varying manual axes inside `jax.shard_map`, and ops on sharded inputs.

Inside `jax.shard_map` (with `check_vma`, the default) every value's type says over which manual mesh axes
it varies from device to device. Values an op makes itself — a zero initial state, a scan's zero carry —
vary over none, and JAX then refuses to mix them with the inputs where types must match (a scan's carry,
a custom VJP's cotangents). `vary_like` gives such a value the axes of the inputs it stands beside; outside
`shard_map` it changes nothing. The launcher does the same for kernel outputs (`launch.triton_call`).

`per_device` runs an op once per device when its inputs are sharded: over explicit mesh axes (their types
say how) as a `shard_map` over the batch and head axes, built from the inputs' shardings; over automatic ones
as custom calls the partitioner splits once it knows the layout (`_partitioned`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from . import _backend, _partitioned


def varying_axes(x) -> frozenset:
    """The manual mesh axes `x` varies over inside `jax.shard_map` (empty outside one, or for a constant)."""
    mat = getattr(jax.typeof(x), "mat", None)
    return frozenset(getattr(mat, "varying", ()) or ())


def vary_like(x, *like):
    """`x` varying over every manual axis that some array in `like` varies over (None entries skipped; `x`
    unchanged when none varies, so outside `shard_map` this is the identity)."""
    if x is None:
        return None
    axes = frozenset().union(*(varying_axes(a) for a in like if a is not None and hasattr(a, "dtype")))
    missing = tuple(sorted(axes - varying_axes(x), key=str))
    return jax.lax.pcast(x, missing, to="varying") if missing else x


def summed_like(grad, primal):
    """The gradient of `primal` from one device's `grad`: summed (`psum`) over the manual axes the gradient
    varies over and the primal does not. Such a primal — attention sinks or a bias shared by a batch split
    across devices — was the same on every device, so its gradient is the sum of every device's part (what
    JAX's own transpose of an implicit broadcast gives). None passes; outside `shard_map` the identity."""
    if grad is None or primal is None:
        return grad
    extra = tuple(sorted(varying_axes(grad) - varying_axes(primal), key=str))
    return jax.lax.psum(grad, extra) if extra else grad


def summed_grads(grads, primals) -> tuple:
    """`summed_like` of each gradient and its primal, in order (a custom VJP's backward returns these)."""
    grads = tuple(grads)
    return tuple(summed_like(g, p) for g, p in zip(grads, primals)) + grads[len(primals):]


# ----------------------------------------------------------------------------- ops on sharded inputs


@dataclasses.dataclass(frozen=True)
class Dims:
    """An array's dimensions as an op sees them: `names` labels each (e.g. "B T H K", for messages), `batch`
    and `head` are the indices of its batch and head dimensions (None: it has none). Only those two may be
    sharded; a batch or head dimension of size 1 broadcasts and stays whole."""

    names: str
    batch: int | None = 0
    head: int | None = 2


def _explicit_spec(x) -> tuple | None:
    """The explicit mesh axes over which each dimension of `x` is sharded, per its type; None when its type
    names no explicit axis (a replicated array, an automatic mesh, inside shard_map, outside any mesh)."""
    sharding = getattr(jax.typeof(x), "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    if mesh is None or not getattr(mesh, "axis_names", ()):
        return None
    explicit = {n for n, t in zip(mesh.axis_names, mesh.axis_types) if t == AxisType.Explicit}
    entries = tuple(tuple(n for n in names if n in explicit)
                    for names in _partitioned.spec_entries(sharding.spec, x.ndim))
    return entries if any(entries) else None


def explicitly_sharded(*arrays) -> bool:
    """Whether any of `arrays` (None entries skipped) is sharded over explicit mesh axes, per its type."""
    return any(_explicit_spec(x) is not None for x in arrays if x is not None and hasattr(x, "dtype"))


def per_device(op: str, fn: Callable[..., Any], arrays: Mapping[str, Any], dims: Mapping[str, Dims], out_dims,
               *, hint: str = "", kernels: bool = True) -> Any:
    """`fn(**arrays)`, run once per device over the mesh axes that split the arrays' batch and heads.

    A Triton kernel is a custom call the partitioner cannot see into: left alone, XLA gathers its inputs
    onto one device. So when the arrays live on a mesh of several devices the op runs as `jax.shard_map`,
    each device on its own batch rows and heads, outputs sharded the same way (`out_dims`, a pytree of
    `Dims` shaped like fn's result):

    * explicit mesh axes (`AxisType.Explicit`): the sharding is part of each array's type, and the op takes
      it as it is. The batch and head dimensions may be sharded (the same axes for every array with the
      dimension); any other sharded dimension — a sequence sharded across devices, a head dimension of K —
      is a ValueError naming the argument, its dimension and the axes (`hint` says what to use instead). An
      array whose batch or head dimension is replicated while another's is sharded is resharded to match.
    * automatic mesh axes: the partitioner decides the layout only after the op is traced, so the op cannot
      see it while tracing. The op then runs as custom calls partitioned when the layout is known
      (`_partitioned.automatic`): each device on the batch rows and heads it holds, outputs in the same layout,
      nothing moved (the batch and heads split over the mesh axes that split the first array with such a
      dimension; a sharded sequence is gathered). Where `fn` launches kernels in Triton's interpreter (`kernels`
      on a machine that interprets them: host callbacks, which crash inside such custom calls) the op cannot
      wait for the layout: it splits the batch over the mesh's axes, in order, as long as their sizes divide
      the batch (data parallelism: the layout of a batch sharded over the mesh, which then moves nothing), and
      the heads over the axes left that divide every head count; XLA reshards inputs laid out otherwise.

    Inside `shard_map`, on one device, or without a mesh, this is `fn(**arrays)`.
    """
    present = {n: x for n, x in arrays.items() if x is not None and hasattr(x, "dtype") and n in dims}
    specs = {n: _explicit_spec(x) for n, x in present.items()}
    if any(s is not None for s in specs.values()):
        mesh, batch_axes, head_axes = _explicit_axes(op, present, specs, dims, hint)
    else:
        mesh = _automatic_mesh(present)
        if mesh is None:
            return fn(**arrays)
        if not (kernels and _backend.INTERPRET):
            names = list(present)
            rest = {n: x for n, x in arrays.items() if n not in present}
            return _partitioned.automatic(op, lambda *v: fn(**rest, **dict(zip(names, v))), names,
                                          [present[n] for n in names], dims, out_dims, mesh)
        batch_axes, head_axes = _automatic_axes(mesh, present, dims)
        if not batch_axes and not head_axes:
            return fn(**arrays)

    def spec_of(d: Dims, shape=None) -> P:
        entries = [None] * len(d.names.split())
        for i, axes in ((d.batch, batch_axes), (d.head, head_axes)):
            if i is not None and axes and (shape is None or shape[i] != 1):
                entries[i] = axes if len(axes) > 1 else axes[0]
        return P(*entries)

    names = list(present)
    in_specs = tuple(spec_of(dims[n], present[n].shape) for n in names)
    values = []
    for n, spec in zip(names, in_specs):
        x = present[n]
        explicit = specs[n] is not None or any(t == AxisType.Explicit for t in mesh.axis_types)
        values.append(jax.reshard(x, spec) if explicit and _explicit_spec(x) != _explicit_spec_of(spec, x.ndim)
                      else x)
    rest = {n: x for n, x in arrays.items() if n not in present}
    out_specs = jax.tree.map(spec_of, out_dims, is_leaf=lambda d: isinstance(d, Dims))

    def local(*v):
        return fn(**rest, **dict(zip(names, v)))

    return jax.shard_map(local, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                         axis_names=frozenset(batch_axes) | frozenset(head_axes))(*values)


def _explicit_axes(op, present, specs, dims, hint):
    """(mesh, batch axes, head axes) from the arrays' explicit shardings; a ValueError for any other."""
    roles: dict[str, tuple[tuple, str]] = {}  # "batch" | "head" → (axes, the argument that set them)
    for name, spec in specs.items():
        if spec is None:
            continue
        d = dims[name]
        for i, axes in enumerate(spec):
            if not axes:
                continue
            role = "batch" if i == d.batch else "head" if i == d.head else None
            label = d.names.split()[i]
            if role is None:
                raise ValueError(f"{name}: dimension {i} ({label}) is sharded over {axes}; {op} partitions only the "
                                 f"batch and head dimensions (shape {tuple(present[name].shape)}, dims {d.names})"
                                 + (f"; {hint}" if hint else ""))
            seen = roles.setdefault(role, (axes, name))
            if seen[0] != axes:
                raise ValueError(f"{name}: its {role} dimension ({label}) is sharded over {axes}, {seen[1]}'s over "
                                 f"{seen[0]}; shard every argument's {role} dimension over the same mesh axes")
    mesh = next(jax.typeof(present[n]).sharding.mesh for n, s in specs.items() if s is not None)
    return mesh, roles.get("batch", ((), ""))[0], roles.get("head", ((), ""))[0]


def _automatic_mesh(present):
    """The mesh of several devices, all of its axes automatic, that the arrays live on; else None."""
    for x in present.values():
        mesh = getattr(getattr(jax.typeof(x), "sharding", None), "mesh", None)
        if mesh is not None and getattr(mesh, "axis_names", ()) and mesh.size > 1 \
                and all(t == AxisType.Auto for t in mesh.axis_types):
            return mesh
    return None


def _automatic_axes(mesh, present, dims) -> tuple[tuple, tuple]:
    """The batch over the mesh's axes in order while their sizes divide it, then the heads over the axes left
    while they divide every head count (q's H, k's Hkv, …); dimensions of size 1 broadcast."""
    batch = {x.shape[dims[n].batch] for n, x in present.items() if dims[n].batch is not None} - {1}
    heads = {x.shape[dims[n].head] for n, x in present.items() if dims[n].head is not None} - {1}
    batch_axes, head_axes, b, h = [], [], 1, 1
    for name, size in zip(mesh.axis_names, mesh.axis_sizes):
        if batch and all(n % (b * size) == 0 for n in batch):
            batch_axes.append(name)
            b *= size
        elif heads and all(n % (h * size) == 0 for n in heads):
            head_axes.append(name)
            h *= size
    return tuple(batch_axes), tuple(head_axes)


def _explicit_spec_of(spec: P, ndim: int) -> tuple | None:
    """`_explicit_spec`'s form of a PartitionSpec (every named axis counted)."""
    entries = _partitioned.spec_entries(spec, ndim)
    return entries if any(entries) else None


# ----------------------------------------------------------------------------- the linear-attention ops' arguments

SEQUENCE_HINT = ("the recurrence runs along T, so keep T whole on each device (shard the batch or the heads, or "
                 "pass sequences packed with cu_seqlens and shard the heads)")


def linear_dims(packed: bool) -> dict[str, Dims]:
    """The arguments of recurrent, chunk_gla, chunk_kda and recurrent_kda: batch first, heads third; the state's
    sequences are the batch unless sequences are packed (then B = 1 and only heads may be sharded)."""
    return {"q": Dims("B T H K"), "k": Dims("B T H K"), "v": Dims("B T H V"), "g": Dims("B T H"),
            "gk": Dims("B T H K"), "gv": Dims("B T H V"), "beta": Dims("B T H"), "g_gamma": Dims("H", None, 0),
            "initial_state": Dims("N H K V", None if packed else 0, 1), "cu_seqlens": Dims("N+1", None, None)}


def linear_out_dims(packed: bool) -> tuple[Dims, Dims]:
    """(o [B, T, H, V], final state [N, H, K, V])."""
    return Dims("B T H V"), Dims("N H K V", None if packed else 0, 1)

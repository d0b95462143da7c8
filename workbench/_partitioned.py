"""An op on an automatic mesh that keeps the layout its arrays come with (`jax.experimental.custom_partitioning`).

Under `jit` on a mesh whose axes are `AxisType.Auto`, an array's sharding is chosen by the partitioner after the
op is traced, so the op cannot read it while tracing. A Triton kernel is a custom call XLA cannot see into; left
alone, XLA would gather its operands onto one device. `automatic` wraps the op's per-device function `fn` in
custom calls whose partitioning rule runs when the layout is known: each device runs `fn` on its own rows of the
batch and its own heads, split over the mesh axes that already split them (the first array that has a batch or a
head dimension sharded names the axes, q before k; axes that do not divide every batch or head count stay whole),
and the outputs keep that layout. Nothing moves unless the arrays disagree (then XLA reshards them to the first's
layout) or a dimension other than the batch and heads is sharded (then it is gathered: the recurrences and
attention need each sequence whole on a device; sharded_ring_attention splits a sequence).

Three custom calls, one `jax.custom_vjp`:

* the forward alone (`fn`);
* the forward that a gradient will follow: `jax.vjp(fn)` on each device, returning the outputs and the
  pullback's residual arrays (whatever `fn`'s own custom VJP saves: inputs, o, lse, states...);
* the backward: the pullback rebuilt on each device from those residuals, applied to the cotangents. A
  gradient of an array that is whole on each device while the batch or heads are split (attention sinks, a
  bias shared by the batch) is summed over the axes that split the others (`psum`), as JAX's transpose of a
  broadcast gives.

Where the residuals are split: their global shapes come from tracing `jax.vjp(fn)` abstractly at the global
shapes, with the batch doubled and with the heads doubled (a dimension that changes holds batch rows, heads or
both), and at each device's shapes under every split of the batch and heads the mesh allows. A dimension's
declared size is a multiple of every split, large enough for each device's part (a table of N + 1 sequence
bounds, a kernel's state checkpoints per sequence and block of steps): each device's residual is padded to its
share and cut back in the backward (`_Dim`); the same for a dimension that is whole on every device but sized
differently at some per-device shape (an op that takes another path for a single sequence). Where some split
changes the residuals' number, ranks or dtypes, the forward keeps none and the backward runs the forward again
on each device before its own kernels (one forward more, nothing moved).

Callbacks: a `pure_callback` (the Triton interpreter's launch on a CPU) inside `custom_partitioning` crashes the
process (JAX 0.10.2 and 0.12, CPU, segmentation fault), so on the interpreter path `_sharding.per_device` keeps
its own rule (`jax.shard_map`, the batch first) instead.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

BATCH, HEAD = "b", "h"  # a dimension's roles: batch rows, heads, both (a packed B·H), or none


def automatic(op: str, fn: Callable[..., Any], names: Sequence[str], values: Sequence[Any], dims: Mapping[str, Any],
              out_dims: Any, mesh) -> Any:
    """`fn(*values)` (a pytree of arrays) run per device on the batch rows and heads each already holds.

    `dims[name]` says which dimension of `values[i]` is the batch and which the heads (`_sharding.Dims`);
    `out_dims`, shaped like fn's result, the same for its outputs."""
    values = tuple(values)
    roles = tuple(_input_roles(dims[n], x.shape) for n, x in zip(names, values))
    out_leaves = jax.tree.leaves(out_dims, is_leaf=_is_dims)
    out_struct = jax.eval_shape(fn, *values)
    out_shapes = jax.tree.leaves(out_struct)
    out_tree = jax.tree.structure(out_struct)
    out_roles = tuple(_input_roles(d, s.shape) for d, s in zip(out_leaves, out_shapes))
    found = _residual_dims(fn, values, roles, mesh)
    present = {r for rs in roles for r in rs if r}
    recompute = found is None or any(not found[1][r] for r in present)
    if recompute:  # residuals that cannot be split: the backward runs the forward again on each device
        residuals, splittable = (), {r: r in present for r in (BATCH, HEAD)}
    else:
        residuals, splittable = found
    res_roles = tuple(tuple(d.role for d in r) for r in residuals)
    layout = _Layout(mesh, names, tuple(x.shape for x in values), roles, splittable)
    n_out = len(out_shapes)
    floats = tuple(i for i, x in enumerate(values) if jnp.issubdtype(x.dtype, jnp.inexact))

    def flat(*v, split):
        return tuple(jax.tree.leaves(fn(*v)))

    def forward_and_residuals(*v, split):
        if recompute:
            return flat(*v, split=split)
        out, pull = jax.vjp(fn, *v)
        held = [_held(x, r, split, op) for x, r in zip(_residuals(pull), residuals)]
        return (*jax.tree.leaves(out), *held)

    def backward(*args, split):
        v, res, cts = args[:len(values)], args[len(values):-n_out], args[-n_out:]
        if recompute:
            _, pull = jax.vjp(fn, *v)
        else:
            pull = jax.tree.unflatten(_pullback_tree(fn, v), [_unheld(x, r, split) for x, r in zip(res, residuals)])
        grads = pull(jax.tree.unflatten(out_tree, cts))
        return tuple(grads[i] for i in floats)

    factors = _Factors(tuple(x.shape for x in values), roles)
    ins = factors.rule([x.shape for x in values], roles)
    outs = factors.rule([x.shape for x in out_shapes], out_roles)
    res = factors.rule([tuple(d.declared for d in r) for r in residuals], res_roles)
    primal = _partitioned(flat, layout, lambda ax: [_spec(r, ax) for r in out_roles],
                          rule=factors.text(ins, outs))
    with_residuals = _partitioned(forward_and_residuals, layout,
                                  lambda ax: [_spec(r, ax) for r in out_roles + res_roles],
                                  rule=factors.text(ins, outs + res))
    pullback = _partitioned(backward, layout, lambda ax: [_spec(roles[i], ax) for i in floats],
                            extra_in=lambda ax: [_spec(r, ax) for r in res_roles + out_roles],
                            summed=lambda ax: [_unsplit(roles[i], ax) for i in floats],
                            rule=factors.text(ins + res + outs, [ins[i] for i in floats]))

    @jax.custom_vjp
    def run(*v):
        return primal(*v)

    def run_fwd(*v):
        out = with_residuals(*v)
        return out[:n_out], (v, out[n_out:])

    def run_bwd(saved, cts):
        v, res = saved
        grads = pullback(*v, *res, *cts)
        full = [None] * len(v)
        for i, g in zip(floats, grads):
            full[i] = g
        return tuple(full)

    run.defvjp(run_fwd, run_bwd)
    return jax.tree.unflatten(out_tree, run(*values))


def _is_dims(d) -> bool:
    return hasattr(d, "names") and hasattr(d, "batch") and hasattr(d, "head")


def _input_roles(d, shape) -> tuple:
    """Each dimension's role (BATCH, HEAD or "") from its `Dims`; a dimension of size 1 broadcasts: none."""
    return tuple(BATCH if i == d.batch and n != 1 else HEAD if i == d.head and n != 1 else ""
                 for i, n in enumerate(shape))


def _residuals(pull) -> list:
    leaves = jax.tree.leaves(pull)
    if not all(hasattr(x, "shape") and hasattr(x, "dtype") for x in leaves):
        raise TypeError(f"automatic partitioning: a pullback leaf is not an array: {[type(x) for x in leaves]}")
    return leaves


def _residual_shapes(fn, shapes_dtypes) -> tuple[list, Any] | None:
    """Abstract residuals (and the pullback's structure) of `jax.vjp(fn)` at these argument shapes; None when fn
    refuses them."""
    box = {}

    def trace(*v):
        _, pull = jax.vjp(fn, *v)
        leaves, box["tree"] = jax.tree.flatten(pull)
        return leaves

    try:
        leaves = jax.eval_shape(trace, *shapes_dtypes)
    except ValueError:
        return None
    return leaves, box["tree"]


def _pullback_tree(fn, values):
    """The structure of `jax.vjp(fn)`'s pullback at these (per-device) arrays, traced abstractly: the residuals
    come from the forward custom call, so no forward runs again."""
    found = _residual_shapes(fn, [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in values])
    if found is None:
        raise ValueError("automatic partitioning: the op refused its per-device shapes")
    return found[1]


def _counts(shapes, roles, role: str) -> list[int]:
    """The distinct sizes of the dimensions with this role (the batch size; each head count), ascending."""
    return sorted({n for shape, rs in zip(shapes, roles) for n, r in zip(shape, rs) if r == role})


def _resized(values, roles, scale: Mapping[str, tuple[int, int]]) -> list:
    """Abstract copies of `values` with each dimension of role r scaled by the fraction scale[r] = (times, over):
    (2, 1) a probe, (1, split) a device's share."""
    return [jax.ShapeDtypeStruct(tuple(n * scale[r][0] // scale[r][1] if r else n for n, r in zip(x.shape, rs)),
                                 x.dtype) for x, rs in zip(values, roles)]


@dataclasses.dataclass(frozen=True)
class _Dim:
    """One dimension of a residual: its role ("", BATCH, HEAD or both: the counts it changes with), its size at the
    global shapes, each device's size under each split the mesh allows (`sizes`: ((batch split, head split),
    size) pairs, traced), and `declared`, its size in the custom calls: a multiple of every split, so that each
    device's part (declared ÷ devices splitting it) holds its own entries, padded."""

    role: str
    size: int
    declared: int = 0
    sizes: tuple = ()

    def local(self, split: Mapping[str, int]) -> int:
        return dict(self.sizes)[(split[BATCH], split[HEAD])] if self.sizes else self.size

    def held(self, split: Mapping[str, int]) -> int:
        if not self.sizes:
            return self.size
        return self.declared // math.prod(split[r] for r in self.role)


def _residual_dims(fn, values, roles, mesh) -> tuple[tuple, dict] | None:
    """(each residual's `_Dim`s, {BATCH: whether the batch may be split, HEAD: the heads}), or None when the
    residuals cannot be split (the backward then runs the forward again).

    jax.vjp(fn) is traced abstractly at the global shapes, with the batch and then the heads doubled (a dimension
    that changes has that role), and at each device's shapes under every split the mesh allows (`_splits`): each
    dimension's size there. None when a split changes the residuals' number, ranks or dtypes."""
    base = _residual_shapes(fn, [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in values])
    if base is None:
        raise ValueError("automatic partitioning: the op refused its own shapes")
    leaves = base[0]

    def alike(found):
        return found is not None and len(found[0]) == len(leaves) and all(
            len(a.shape) == len(b.shape) and a.dtype == b.dtype for a, b in zip(leaves, found[0]))

    counts = {role: _counts([x.shape for x in values], roles, role) for role in (BATCH, HEAD)}
    changes = {}
    for role in (BATCH, HEAD):
        doubled = {BATCH: (1, 1), HEAD: (1, 1), role: (2, 1)}
        probe = _residual_shapes(fn, _resized(values, roles, doubled)) if counts[role] else None
        changes[role] = ([[m != n for m, n in zip(a.shape, b.shape)] for a, b in zip(leaves, probe[0])]
                         if alike(probe) else None)
    splittable = {role: changes[role] is not None for role in (BATCH, HEAD)}
    splits = sorted((b, h) for b, h in _splits(mesh, values, roles)
                    if (b == 1 or splittable[BATCH]) and (h == 1 or splittable[HEAD]))
    local = {}
    for b, h in splits:
        found = (base if (b, h) == (1, 1) else
                 _residual_shapes(fn, _resized(values, roles, {BATCH: (1, b), HEAD: (1, h)})))
        if not alike(found):
            return None
        local[(b, h)] = [tuple(x.shape) for x in found[0]]
    units = {BATCH: counts[BATCH][:1], HEAD: counts[HEAD][:1]}
    dims = []
    for j, x in enumerate(leaves):
        row = []
        for d, n in enumerate(x.shape):
            role = "".join(r for r in (BATCH, HEAD) if splittable[r] and changes[r][j][d])
            sizes = tuple(((b, h), local[(b, h)][j][d]) for b, h in splits)
            if not role:  # whole on every device; an op that takes another path at some per-device shape may
                # hold a different size there: declared the largest, each device's own part padded
                row.append(_Dim("", n, max(m for _, m in sizes), sizes) if any(m != n for _, m in sizes)
                           else _Dim("", n))
                continue
            ways = [math.prod({BATCH: b, HEAD: h}[r] for r in role) for b, h in splits]
            step = math.lcm(*ways, *(u for r in role for u in units[r]))
            need = max(m * w for (_, m), w in zip(sizes, ways))
            row.append(_Dim(role, n, step * -(-need // step), sizes))
        dims.append(tuple(row))
    return tuple(dims), splittable


def _splits(mesh, values, roles) -> set[tuple[int, int]]:
    """Every (batch, heads) split the partitioner may choose on this mesh: products of disjoint sets of its axes,
    each dividing the counts it splits."""
    sizes = list(mesh.axis_sizes)
    counts = {role: _counts([x.shape for x in values], roles, role) for role in (BATCH, HEAD)}
    found = set()
    for assign in itertools.product((None, BATCH, HEAD), repeat=len(sizes)):
        split = {role: math.prod(n for n, a in zip(sizes, assign) if a == role) for role in (BATCH, HEAD)}
        if all(c % split[role] == 0 for role in (BATCH, HEAD) for c in counts[role]):
            found.add((split[BATCH], split[HEAD]))
    return found


def _held(x, dims: Sequence[_Dim], split: Mapping[str, int], op: str):
    """A device's residual as the custom calls hold it: each split dimension padded to its share."""
    want = tuple(d.local(split) for d in dims)
    if tuple(x.shape) != want:
        raise ValueError(f"{op}: automatic partitioning expected a per-device residual of shape {want}, got "
                         f"{tuple(x.shape)} (split {dict(split)}); shard the batch and heads over explicit mesh "
                         f"axes instead (jax.sharding.AxisType.Explicit)")
    pad = [(0, d.held(split) - n, 0) for d, n in zip(dims, x.shape)]
    return jax.lax.pad(x, jnp.zeros((), x.dtype), pad) if any(p[1] for p in pad) else x


def _unheld(x, dims: Sequence[_Dim], split: Mapping[str, int]):
    """The inverse of `_held`: each padded dimension cut back to the device's own entries."""
    want = tuple(d.local(split) for d in dims)
    return x[tuple(slice(0, n) for n in want)] if tuple(x.shape) != want else x


def _spec(roles: tuple, axes: Mapping[str, tuple]) -> P:
    """The PartitionSpec of an array whose dimensions have these roles, the batch over axes[BATCH] and the heads
    over axes[HEAD] (a dimension with both roles over both, batch axes first)."""
    entries = []
    for r in roles:
        names = tuple(a for role in (BATCH, HEAD) if role in r for a in axes[role])
        entries.append(None if not names else names[0] if len(names) == 1 else names)
    return P(*entries)


def _unsplit(roles: tuple, axes: Mapping[str, tuple]) -> tuple:
    """The mesh axes that split the batch or heads but not this array: its gradient is a sum over them."""
    own = {a for r in roles for role in (BATCH, HEAD) if role in r for a in axes[role]}
    return tuple(a for role in (BATCH, HEAD) for a in axes[role] if a not in own)


class _Layout:
    """Which mesh axes split the batch and the heads, from the arrays' shardings when the partitioner knows them."""

    def __init__(self, mesh, names, shapes, roles, splittable):
        self.mesh, self.names, self.shapes, self.roles = mesh, names, shapes, roles
        self.splittable = splittable

    def axes(self, shardings) -> dict[str, tuple]:
        """{BATCH: axes, HEAD: axes} from the input shardings (the first array with the dimension sharded)."""
        sizes = dict(zip(self.mesh.axis_names, self.mesh.axis_sizes))
        chosen: dict[str, tuple] = {BATCH: (), HEAD: ()}
        for role in (BATCH, HEAD):
            if not self.splittable.get(role):
                continue
            for sharding, shape, roles in zip(shardings, self.shapes, self.roles):
                entries = _entries(sharding, len(shape))
                found = next((e for e, r in zip(entries, roles) if r == role and e), ())
                if found:
                    taken = set(chosen[BATCH])
                    axes = [a for a in found if a in sizes and a not in taken]
                    counts = _counts(self.shapes, self.roles, role)
                    while axes and any(n % math.prod(sizes[a] for a in axes) for n in counts):
                        axes.pop()
                    chosen[role] = tuple(axes)
                    break
        return chosen

    def in_specs(self, axes) -> list:
        return [_spec(r, axes) for r in self.roles]


def spec_entries(spec, ndim: int) -> tuple[tuple, ...]:
    """The mesh axes of each of `ndim` dimensions in a PartitionSpec, as tuples (() where it names none)."""
    return tuple(() if e is None else (e,) if isinstance(e, str) else tuple(e)
                 for e in tuple(spec) + (None,) * (ndim - len(spec)))


def _entries(sharding, ndim: int) -> tuple:
    """`spec_entries` of a sharding's spec; () for every dimension where the sharding has none."""
    spec = getattr(sharding, "spec", None)
    return ((),) * ndim if spec is None else spec_entries(spec, ndim)


def _partitioned(body: Callable, layout: _Layout, out_specs: Callable[[dict], list], *, rule: tuple[str, dict],
                 extra_in: Callable[[dict], list] | None = None,
                 summed: Callable[[dict], list] | None = None) -> Callable:
    """`body` (arrays → a tuple of arrays) as a custom call partitioned by `layout`: its first len(layout.names)
    arguments are the op's arrays (they decide the layout), the rest have the specs `extra_in` gives; each result
    i is summed over the mesh axes `summed(axes)[i]` on the devices (gradients of arrays whole on each device)."""
    n = len(layout.names)

    def decide(mesh, arg_shapes):
        axes = layout.axes([getattr(s, "sharding", None) for s in arg_shapes[:n]])
        ins = layout.in_specs(axes) + (extra_in(axes) if extra_in else [])
        return axes, [NamedSharding(mesh, s) for s in ins], [NamedSharding(mesh, s) for s in out_specs(axes)]

    def partition(mesh, arg_shapes, result_shape):
        axes, ins, outs = decide(mesh, arg_shapes)
        sums = summed(axes) if summed else [()] * len(outs)

        sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))
        split = {role: math.prod(sizes[a] for a in axes[role]) for role in (BATCH, HEAD)}

        def lower(*args):
            result = body(*args, split=split)
            return tuple(jax.lax.psum(r, s) if s else r for r, s in zip(result, sums))

        return mesh, lower, tuple(outs), tuple(ins)

    def infer(mesh, arg_shapes, result_shape):
        return tuple(decide(mesh, arg_shapes)[2])

    @custom_partitioning
    def call(*args):
        return body(*args, split={BATCH: 1, HEAD: 1})

    text, sizes = rule
    call.def_partition(partition=partition, infer_sharding_from_operands=infer,
                       propagate_user_sharding=None, sharding_rule=text, **sizes)
    return call


class _Factors:
    """Shardy's view of the calls (its sharding rule): the batch is one factor `b` wherever a dimension is the
    batch, the heads one factor per head count (`h0` for q's H, `h1` for k's Hkv, ...), a residual dimension that
    holds several batch rows or heads per index a compound of them and a factor of its own; every other dimension
    a factor of its own. So the partitioner propagates the inputs' batch and head layout to the outputs and the
    residuals, the same layout `partition` then states."""

    def __init__(self, shapes, roles):
        batch = {n for shape, rs in zip(shapes, roles) for n, r in zip(shape, rs) if r == BATCH}
        self.batch = batch.pop() if len(batch) == 1 else None
        heads = []
        for shape, rs in zip(shapes, roles):
            heads += [n for n, r in zip(shape, rs) if r == HEAD and n not in heads]
        self.heads = {n: f"h{i}" for i, n in enumerate(heads)}
        self.sizes: dict[str, int] = {}
        self.count = 0

    def _own(self, size: int | None = None) -> str:
        self.count += 1
        name = f"f{self.count}"
        if size is not None:
            self.sizes[name] = size
        return name

    def _dim(self, n: int, role: str) -> str:
        parts, rest = [], n
        if BATCH in role and self.batch and rest % self.batch == 0:
            parts.append("b")
            rest //= self.batch
        if HEAD in role:
            head = next((h for h in self.heads if rest % h == 0), None)
            if head is not None:
                parts.append(self.heads[head])
                rest //= head
        if not parts:
            return self._own()
        if rest != 1:
            parts.append(self._own(rest))
        return parts[0] if len(parts) == 1 else "(" + " ".join(parts) + ")"

    def rule(self, shapes, roles) -> list[str]:
        return [" ".join(self._dim(n, r) for n, r in zip(shape, rs)) for shape, rs in zip(shapes, roles)]

    def text(self, operands: list[str], results: list[str]) -> tuple[str, dict]:
        used = " ".join(operands + results)
        return ", ".join(operands) + " -> " + ", ".join(results), {
            k: v for k, v in self.sizes.items() if f"{k} " in used + " " or f"{k})" in used}

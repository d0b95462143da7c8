"""The one Triton launcher: compiled through jax-triton on a CUDA GPU, interpreted on a CPU.

`triton_call` has jax-triton's calling convention: arrays positional (in kernel-argument order,
outputs appended after them), Python scalars positional or as keywords, constexprs as keywords,
`out_shape` a `jax.ShapeDtypeStruct` or a sequence of them, `grid` a tuple or a function of the
meta-parameters. Kernels may be wrapped in `@triton.autotune` and `@triton.heuristics`.

On a machine without a CUDA GPU the *same* `@triton.jit` source runs in Triton's interpreter
(NumPy), inside `jax.pure_callback`, with torch CPU tensors as carriers. That path

* works under `jax.jit`, `custom_vjp` and `vmap` (sequentially);
* fills every output with NaN (integers with their minimum) before the kernel runs, so an element
  the kernel forgets to write is loud; outputs listed in `zeroed_outputs` start at zero instead;
* cannot benchmark, so it unwraps `@triton.autotune` and runs one config: the first one that
  survives the kernel's `prune_configs_by`, or the one chosen with `interpreter_config(...)`.
  Configs must not change output shapes (true for jax-triton's autotuning too).

`None` arguments travel as `ABSENT`-shaped placeholders (a zero-length int8 array), and
`given(name)` builds the `triton.heuristics` entry that tells a kernel whether an optional input
was passed: on both paths the heuristic sees the same thing.

Whoever wants to see launches (the sm_90 compile check, launch counters in tests) registers an
observer with `observing(...)`: the launcher calls it with each `Launch` it receives on the
interpreter path and knows nothing of who listens.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from . import _backend  # first: sets TRITON_INTERPRET before triton is imported
from ._sharding import vary_like

import jax
import jax.numpy as jnp
import numpy as np
import triton
from triton.runtime.autotuner import Autotuner, Heuristics


INTERPRET: bool = _backend.INTERPRET
"""True when kernels run in Triton's interpreter (decided in `workbench._backend`)."""


# ----------------------------------------------------------------------------- interpreter casts


def _patch_interpreter_bfloat16_casts() -> None:
    """Make the interpreter's casts to and from bfloat16 round to nearest even, as GPUs do, and its
    `tl.dot` of bfloat16 tiles multiply values rather than their bit patterns.

    Triton 3.6's interpreter stores bfloat16 as uint16 and (interpreter.py, `cast_impl`)
    converts float32 → bfloat16 by truncating the mantissa, and float64 → bfloat16 with a plain
    integer `astype`, which yields garbage. Truncation doubles the rounding error of every bfloat16
    output a kernel writes; the float64 path breaks kernels that accumulate in float64. The
    interpreter's own rounding path (`_convert_float`) also mishandles carries (see
    triton-lang/triton#11897). Here every cast that involves bfloat16 goes through ml_dtypes,
    whose conversions are exact round-to-nearest-even.
    """
    import ml_dtypes
    from triton.runtime import interpreter as interp

    builder_cls = type(interp.interpreter_builder)
    if getattr(builder_cls, "_workbench_bf16_patch", False):
        return
    original_cast = builder_cls.cast_impl
    original_fp_to_fp = builder_cls.create_fp_to_fp
    bf16 = triton.language.bfloat16

    def convert(src, dst_type):
        src_ty, dst_ty = src.dtype.scalar, dst_type.scalar
        data = src.data.view(ml_dtypes.bfloat16) if src_ty == bf16 else src.data
        if dst_ty == bf16:
            out = np.asarray(data).astype(ml_dtypes.bfloat16).view(np.uint16)
        else:
            out = np.asarray(data).astype(interp._get_np_dtype(dst_type))
        return interp.TensorHandle(out, dst_ty)

    def cast_impl(self, src, dst_type):
        if bf16 in (src.dtype.scalar, dst_type.scalar) and dst_type.scalar.is_floating() \
                and src.dtype.scalar.is_floating():
            return convert(src, dst_type)
        return original_cast(self, src, dst_type)

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        if bf16 in (src.dtype.scalar, dst_type.scalar):
            return convert(src, dst_type)
        return original_fp_to_fp(self, src, dst_type, rounding_mode)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        # The interpreter multiplies bfloat16's uint16 storage as integers; a GPU multiplies the
        # values exactly and accumulates in float32, which float32 matmul of the widened values does.
        if bf16 in (a.dtype.scalar, b.dtype.scalar):
            widen = lambda x: np.asarray(x.data.view(ml_dtypes.bfloat16) if x.dtype.scalar == bf16  # noqa: E731
                                         else x.data).astype(np.float32)
            return interp.TensorHandle(np.matmul(widen(a), widen(b), dtype=d.data.dtype) + d.data, d.dtype.scalar)
        return original_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    original_dot = builder_cls.create_dot
    builder_cls.cast_impl = cast_impl
    builder_cls.create_fp_to_fp = create_fp_to_fp
    builder_cls.create_dot = create_dot
    for name in ("create_fp_ext", "create_fp_trunc"):
        setattr(builder_cls, name, lambda self, src, dst_type: self.cast_impl(src, dst_type))
    builder_cls._workbench_bf16_patch = True


def _patch_interpreter_nested_calls() -> None:
    """Stop the interpreter from re-patching `triton.language` on every call of a `@triton.jit`
    helper made from inside a running kernel.

    Triton 3.6's interpreter patches the language's builtins (`tl.load`, `tl.dot`, tensor methods, …)
    when a kernel launches (`GridExecutor.__call__`, restored when it ends) and again on *every* call
    of a jitted helper (`InterpretedFunction.__call__`), whose patch is never restored. The launch's
    patch already covers the same modules, so the helper's changes nothing but costs an
    `inspect.getmembers` sweep of `tl`, `tl.core`, `tl.math` and `tl.tensor` per call: more than half
    the interpreter's time in kernels that call helpers per tile. Here a helper call inside a launch
    whose patch covers every language module the helper's globals see skips it; anything else (a
    helper that sees a module the kernel's globals do not, a call outside a launch) patches as before.
    """
    from triton.runtime import interpreter as interp

    if getattr(interp, "_workbench_nested_patch", False):
        return
    original = interp._patch_lang
    active: list[set[int]] = []  # ids of the language modules patched by the running launch

    def languages(fn) -> set[int]:  # the modules interpreter._patch_lang patches for fn
        return {id(v) for v in fn.__globals__.values() if v is interp.tl or v is interp.tl.core}

    class _Nothing:
        def restore(self) -> None:
            pass

    def patch_lang(fn):
        if active:  # a kernel is running: this is a helper's call
            needed = languages(fn)
            if needed <= active[-1]:
                return _Nothing()
            active[-1] |= needed
            return original(fn)
        scope = original(fn)  # a launch (GridExecutor restores the scope when the kernel ends)
        active.append(languages(fn))
        restore = scope.restore

        def restore_and_close() -> None:
            active.pop()
            restore()

        scope.restore = restore_and_close
        return scope

    interp._patch_lang = patch_lang
    interp._workbench_nested_patch = True


# ----------------------------------------------------------------------------- address checks (interpreter)

CHECK_BOUNDS_VARIABLE = "WORKBENCH_CHECK_BOUNDS"


class OutOfBoundsError(IndexError):
    """A kernel running in the interpreter touched memory outside every buffer it was given."""


def check_bounds_enabled() -> bool:
    """Whether the interpreter checks every address a kernel loads or stores (`WORKBENCH_CHECK_BOUNDS=1`)."""
    value = os.environ.get(CHECK_BOUNDS_VARIABLE, "0")
    if value not in ("0", "1", ""):
        raise ValueError(f"{CHECK_BOUNDS_VARIABLE}: expected 0 or 1, got {value!r}")
    return value == "1"


class _Buffers:
    """The byte ranges of one launch's arguments and outputs, for checking addresses against them."""

    def __init__(self, kernel: str, tensors: dict[str, Any]):
        spans = sorted((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size(), name)
                       for name, t in tensors.items() if t.numel() > 0)
        self.kernel = kernel
        self.starts = np.array([a for a, _, _ in spans], np.uint64)
        self.ends = np.array([b for _, b, _ in spans], np.uint64)
        self.names = [n for _, _, n in spans]
        self.empty = sorted(name for name, t in tensors.items() if t.numel() == 0)

    def check(self, what: str, ptrs, mask) -> None:
        """Raise OutOfBoundsError if an element at `ptrs` (interpreter TensorHandle) where `mask` holds
        does not lie wholly inside one buffer."""
        element = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
        addresses = np.asarray(ptrs.data, np.uint64)
        where = None if mask is None else np.broadcast_to(np.asarray(mask.data, bool), addresses.shape)
        if where is not None and not where.any():
            return
        # fast path: the lowest and highest address lie in one buffer (so does everything between)
        low = np.min(addresses, where=where, initial=np.iinfo(np.uint64).max) if where is not None else addresses.min()
        high = np.max(addresses, where=where, initial=0) if where is not None else addresses.max()
        i = int(np.searchsorted(self.starts, low, side="right")) - 1
        if i >= 0 and high + np.uint64(element) <= self.ends[i]:
            return
        addresses = (addresses if where is None else addresses[where]).ravel()
        i = np.searchsorted(self.starts, addresses, side="right").astype(np.int64) - 1
        inside = (i >= 0) & (addresses + np.uint64(element) <= self.ends[np.maximum(i, 0)]) if len(self.starts) \
            else np.zeros(addresses.shape, bool)
        if inside.all():
            return
        bad = addresses[~inside]
        raise OutOfBoundsError(f"{self.kernel}: {what} of {bad.size} element(s) of {element} byte(s) outside every "
                               f"buffer, e.g. {'; '.join(self._describe(int(a), element) for a in bad[:3])}"
                               + (f" (zero-size arguments: {', '.join(self.empty)})" if self.empty else ""))

    def _describe(self, address: int, element: int) -> str:
        """The address as an element offset from the start of the nearest buffer."""
        if not self.names:
            return f"address {address:#x} (no buffer has any bytes)"
        distance = [max(int(a) - address, address - int(b) + 1, 0) for a, b in zip(self.starts, self.ends)]
        i = int(np.argmin(distance))
        start, end = int(self.starts[i]), int(self.ends[i])
        return (f"element offset {(address - start) // element:+d} of '{self.names[i]}' "
                f"({(end - start) // element} elements)")


_CHECKED: _Buffers | None = None  # the running launch's buffers while addresses are checked


def _patch_interpreter_address_checks() -> None:
    """Check, while `_CHECKED` is set, every address the interpreter loads from or stores to.

    A GPU given an address outside its buffers reads another buffer of the process, or faults; the
    interpreter reads or writes this process's memory there (a crash, or silent heap corruption). With
    the check on, the first such access fails with the kernel's name and the offending offsets.
    """
    from triton.runtime import interpreter as interp

    builder_cls = type(interp.interpreter_builder)
    if getattr(builder_cls, "_workbench_address_patch", False):
        return
    load, store = builder_cls.create_masked_load, builder_cls.create_masked_store
    rmw, cas = builder_cls.create_atomic_rmw, builder_cls.create_atomic_cas

    def create_masked_load(self, ptrs, mask, other, cache_modifier, eviction_policy, is_volatile):
        if _CHECKED is not None:
            _CHECKED.check("load", ptrs, mask)
        return load(self, ptrs, mask, other, cache_modifier, eviction_policy, is_volatile)

    def create_masked_store(self, ptrs, value, mask, cache_modifier, eviction_policy):
        if _CHECKED is not None:
            _CHECKED.check("store", ptrs, mask)
        return store(self, ptrs, value, mask, cache_modifier, eviction_policy)

    def create_atomic_rmw(self, rmwOp, ptr, val, mask, sem, scope):
        if _CHECKED is not None:
            _CHECKED.check("atomic", ptr, mask)
        return rmw(self, rmwOp, ptr, val, mask, sem, scope)

    def create_atomic_cas(self, ptr, cmp, val, sem, scope):
        if _CHECKED is not None:
            _CHECKED.check("atomic", ptr, None)
        return cas(self, ptr, cmp, val, sem, scope)

    builder_cls.create_masked_load = create_masked_load
    builder_cls.create_masked_store = create_masked_store
    builder_cls.create_atomic_rmw = create_atomic_rmw
    builder_cls.create_atomic_cas = create_atomic_cas
    builder_cls._workbench_address_patch = True


if INTERPRET:
    _patch_interpreter_bfloat16_casts()
    _patch_interpreter_nested_calls()
    _patch_interpreter_address_checks()


def sm_count() -> int:
    """Multiprocessors of the first device (its `core_count` on a GPU); 132 (an H100 or H200) elsewhere, so the
    interpreter chooses work splits as the GPU we tune for would."""
    return int(getattr(jax.devices()[0], "core_count", 0) or 132)


# ----------------------------------------------------------------------------- optional inputs

ABSENT_SHAPE = (0,)


def absent() -> jax.Array:
    """The placeholder that stands for a `None` argument."""
    return jnp.zeros(ABSENT_SHAPE, jnp.int8)


def is_given(x: Any) -> bool:
    """Whether a kernel argument (jax aval, torch tensor or None) is a real input."""
    return x is not None and tuple(getattr(x, "shape", ())) != ABSENT_SHAPE


def given(name: str) -> Callable[[dict[str, Any]], bool]:
    """A `triton.heuristics` entry: True when argument `name` was passed (not None)."""
    return lambda args: is_given(args[name])


# ----------------------------------------------------------------------------- config choice (CPU)

_CONFIG_CHOICE: dict[int, int] = {}
_CONFIG_LOCK = threading.Lock()


def autotune_configs(kernel: Any) -> list[triton.Config]:
    """The configs of an `@triton.autotune` kernel ([] for a plain one)."""
    return list(kernel.configs) if isinstance(kernel, Autotuner) else []


@contextlib.contextmanager
def interpreter_config(kernel: Autotuner, index: int):
    """Run `kernel` with `kernel.configs[index]` on the interpreter path while the block is open.

    The choice is read when the kernel *runs*, so results must be awaited inside the block
    (`jax.block_until_ready`); it does not change what jit traced. Ignored on a GPU, where
    jax-triton autotunes.
    """
    configs = autotune_configs(kernel)
    if not 0 <= index < len(configs):
        raise ValueError(f"index: kernel has {len(configs)} configs, got index {index}")
    with _CONFIG_LOCK:
        previous = _CONFIG_CHOICE.get(id(kernel))
        _CONFIG_CHOICE[id(kernel)] = index
    try:
        yield configs[index]
    finally:
        with _CONFIG_LOCK:
            if previous is None:
                _CONFIG_CHOICE.pop(id(kernel), None)
            else:
                _CONFIG_CHOICE[id(kernel)] = previous


# ----------------------------------------------------------------------------- observers


@dataclasses.dataclass(frozen=True)
class Launch:
    """One `triton_call` as the launcher receives it: the kernel (autotuner and heuristics included), its
    arguments (arrays possibly traced; `None` already replaced by `absent()`), output shapes, meta-parameters,
    the warps and stages the caller asked for (None: the config's or Triton's default), and the grid."""

    kernel: Any
    args: tuple
    out_shapes: tuple
    metaparams: dict
    num_warps: int | None
    num_stages: int | None
    grid: Any = None


_OBSERVERS: list[Callable[[Launch], None]] = []


@contextlib.contextmanager
def observing(observer: Callable[[Launch], None]):
    """Call `observer(launch)` for every `triton_call` made on the interpreter path while the block is open,
    when the call is traced and before its kernel runs. Observers nest; an exception from one propagates."""
    _OBSERVERS.append(observer)
    try:
        yield observer
    finally:
        _OBSERVERS.remove(observer)


# ----------------------------------------------------------------------------- public entry point


def triton_call(
    *args: Any,
    kernel: Any,
    out_shape: Any,
    grid: Any,
    name: str = "",
    zeroed_outputs: Sequence[int] | Callable[[dict[str, Any]], Sequence[int]] = (),
    input_output_aliases: dict[int, int] | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    tune_inputs: dict[str, Any] | None = None,
    **metaparams: Any,
) -> Any:
    """Launch `kernel` on `args` and return its outputs (jax-triton's `triton_call` convention).

    `None` in `args` becomes the `absent()` placeholder; test it in the kernel with a
    `triton.heuristics({"USE_X": given("x")})` flag.

    On a GPU an `@triton.autotune` kernel's config is chosen by `workbench.autotune` and remembered on
    disk; `tune_inputs` maps integer array arguments (sequence bounds, slot tables) to concrete
    stand-ins of the same shape and dtype (or functions returning one, called only when a config is
    timed) that it may time the configs on when they are traced. The interpreter ignores it.
    """
    args = tuple(absent() if a is None else a for a in args)
    single = not isinstance(out_shape, (list, tuple))
    out_shapes = [out_shape] if single else list(out_shape)
    out_shapes = [jax.ShapeDtypeStruct(tuple(s.shape), s.dtype) for s in out_shapes]
    if INTERPRET:
        if _OBSERVERS:
            seen = Launch(kernel, args, tuple(out_shapes), dict(metaparams), num_warps, num_stages, grid)
            for observer in list(_OBSERVERS):
                observer(seen)
        outs = _interpreted_call(
            args, kernel, out_shapes, grid, zeroed_outputs, input_output_aliases or {}, metaparams
        )
    else:
        from . import autotune  # jax-triton, with configs chosen and remembered (docs/autotune.md)

        outs = autotune.call(
            args,
            kernel=kernel,
            out_shapes=out_shapes,
            grid=grid,
            name=name,
            zeroed_outputs=zeroed_outputs,
            input_output_aliases=input_output_aliases,
            num_warps=num_warps,
            num_stages=num_stages,
            metaparams=metaparams,
            tune_inputs=tune_inputs,
        )
    outs = _varying_like(outs, args)
    return outs[0] if single else list(outs)


def _varying_like(outs, args):
    """Outputs that vary over every manual axis some array argument varies over.

    A custom call's (and a host callback's) outputs come back with no varying manual axes, even inside
    `jax.shard_map` over inputs that vary across the devices; a custom VJP then refuses gradients whose
    type lacks the axes of its primal inputs. The kernel computed each device's own outputs, so they vary
    as its inputs do (`_sharding.vary_like`: a type change, no data moves)."""
    arrays = [a for a in args if is_array(a)]
    return [vary_like(o, *arrays) for o in outs]


# ----------------------------------------------------------------------------- interpreter path


def is_array(a: Any) -> bool:
    """Whether a kernel argument is an array (concrete or traced) rather than a scalar."""
    return isinstance(a, (jax.Array, np.ndarray)) or hasattr(a, "aval")


def _interpreted_call(args, kernel, out_shapes, grid, zeroed_outputs, aliases, metaparams):
    array_pos = [i for i, a in enumerate(args) if is_array(a)]
    arrays = [jnp.asarray(args[i]) for i in array_pos]
    run = functools.partial(
        _run_interpreted,
        kernel=kernel,
        n_args=len(args),
        array_pos=tuple(array_pos),
        scalars={i: a for i, a in enumerate(args) if i not in array_pos},
        out_shapes=out_shapes,
        grid=grid,
        zeroed_outputs=zeroed_outputs,
        aliases=aliases,
        metaparams=metaparams,
    )
    return jax.pure_callback(run, out_shapes, *arrays, vmap_method="sequential")


def unwrap(kernel):
    """Split an autotune/heuristics stack into (autotuner or None, heuristics list, jit function)."""
    tuner = kernel if isinstance(kernel, Autotuner) else None
    fn = kernel.fn if tuner is not None else kernel
    heuristics = []
    while isinstance(fn, Heuristics):
        heuristics.append(fn.values)
        fn = fn.fn
    if isinstance(fn, Autotuner):
        raise ValueError("kernel: put @triton.autotune outermost, above @triton.heuristics")
    return tuner, heuristics, fn


def _choose_config(tuner, named_args) -> triton.Config | None:
    if tuner is None:
        return None
    index = _CONFIG_CHOICE.get(id(tuner))
    if index is not None:
        return tuner.configs[index]
    configs = list(tuner.configs)
    if tuner.early_config_prune is not None:
        configs = tuner.early_config_prune(configs, named_args) or configs
    return configs[0]


_INTERPRETER_LOCK = threading.Lock()

_TORCH_VIEW = {"bfloat16": ("uint16", "bfloat16")}


def _to_torch(x: np.ndarray):
    import torch

    x = np.ascontiguousarray(x)
    if x.dtype.name in _TORCH_VIEW:
        raw, torch_name = _TORCH_VIEW[x.dtype.name]
        return torch.from_numpy(x.view(raw).copy()).view(getattr(torch, torch_name))
    return torch.from_numpy(x.copy())


def _to_numpy(t, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype.name in _TORCH_VIEW:
        import torch

        raw, _ = _TORCH_VIEW[dtype.name]
        return t.view(getattr(torch, raw)).numpy().view(dtype)
    return t.numpy()


def _fresh_output(shape, dtype, zero: bool):
    import torch

    dtype = np.dtype(dtype)
    out = _to_torch(np.zeros(shape, dtype))
    if not zero:
        if np.issubdtype(dtype, np.floating) or dtype.name in _TORCH_VIEW:
            out.fill_(float("nan"))
        elif np.issubdtype(dtype, np.integer):
            out.fill_(torch.iinfo(out.dtype).min)
    return out


def _run_interpreted(*arrays, kernel, n_args, array_pos, scalars, out_shapes, grid, zeroed_outputs,
                     aliases, metaparams):
    global _CHECKED
    tuner, heuristics, fn = unwrap(kernel)
    call_args = [None] * n_args
    for pos, arr in zip(array_pos, arrays):
        call_args[pos] = _to_torch(np.asarray(arr))
    for pos, value in scalars.items():
        call_args[pos] = value
    out_names = fn.arg_names[n_args:n_args + len(out_shapes)]
    named = dict(zip(fn.arg_names, call_args))

    config = _choose_config(tuner, named)
    meta = {**metaparams, **(config.kwargs if config is not None else {})}
    zeroed = zeroed_outputs(meta) if callable(zeroed_outputs) else zeroed_outputs
    outs = [_fresh_output(s.shape, s.dtype, i in zeroed) for i, s in enumerate(out_shapes)]
    for in_idx, out_idx in aliases.items():
        outs[out_idx].copy_(call_args[in_idx])
    named.update(zip(out_names, outs))
    for values in heuristics:
        for key, rule in values.items():
            meta[key] = rule({**named, **meta})

    launch_grid = grid(meta) if callable(grid) else grid
    launch_grid = (launch_grid,) if isinstance(launch_grid, int) else tuple(launch_grid)
    if all(g > 0 for g in launch_grid):
        # One kernel at a time: the interpreter keeps global state (the builder's grid index, its AST
        # cache), and XLA runs the callbacks of several host devices (shard_map) on parallel threads.
        tensors = {n: t for n, t in zip(fn.arg_names, [*call_args, *outs]) if hasattr(t, "data_ptr")}
        checked = _Buffers(fn.__name__, tensors) if check_bounds_enabled() else None
        with _INTERPRETER_LOCK, np.errstate(over="ignore"):  # integer arithmetic wraps on a GPU (hashes rely on it)
            _CHECKED = checked
            try:
                fn[launch_grid](*call_args, *outs, **meta)
            finally:
                _CHECKED = None
    return tuple(_to_numpy(o, s.dtype) for o, s in zip(outs, out_shapes))

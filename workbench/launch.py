"""The one Triton launcher: compiled on a CUDA GPU (`workbench.gpu_call`), interpreted on a CPU.

`triton_call` has jax-triton's calling convention: arrays positional (in kernel-argument order,
outputs appended after them), Python scalars positional or as keywords, constexprs as keywords,
`out_shape` a `jax.ShapeDtypeStruct` or a sequence of them, `grid` a tuple or a function of the
meta-parameters. Kernels may be wrapped in `@triton.autotune` and `@triton.heuristics`. Scalars are typed
the same way on both paths (`workbench.signature`), and an array may be passed as a host-made TMA
descriptor (`TensorDescriptor`, Triton ≥ 3.8).

On a machine without a CUDA GPU the *same* `@triton.jit` source runs in Triton's interpreter
(NumPy), inside `jax.pure_callback`, with NumPy arrays as carriers (`workbench.interpreter`). That path

* works under `jax.jit`, `custom_vjp` and `vmap` (sequentially);
* fills every output with NaN (integers with their minimum) before the kernel runs, so an element
  the kernel forgets to write is loud; outputs listed in `zeroed_outputs` start at zero instead;
* cannot benchmark, so it unwraps `@triton.autotune` and runs one config: the first one that
  survives the kernel's `prune_configs_by`, or the one chosen with `interpreter_config(...)`.
  Configs must not change output shapes (true of every launcher that autotunes inside a program).

`None` arguments travel as `ABSENT`-shaped placeholders (a zero-length int8 array), and
`given(name)` builds the `triton.heuristics` entry that tells a kernel whether an optional input
was passed: on both paths the heuristic sees the same thing.

Whoever wants to see launches (the sm_90 compile check, launch counters in tests) registers an
observer with `observing(...)`: the launcher calls it with each `Launch` it receives, on either
path, and knows nothing of who listens.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any

from . import _backend  # first: sets TRITON_INTERPRET before triton is imported
from . import compiler, interpreter, signature
from ._sharding import vary_like

import jax
import jax.numpy as jnp
import numpy as np
import triton
from triton.runtime.autotuner import Autotuner


INTERPRET: bool = _backend.INTERPRET
"""True when kernels run in Triton's interpreter (decided in `workbench._backend`)."""

TensorDescriptor = signature.TensorDescriptor  # re-exported: the public name is workbench.TensorDescriptor


if INTERPRET:
    interpreter.install()

# re-exported: the address checks' switch and error are part of the launcher's contract (docs/API.md)
CHECK_BOUNDS_VARIABLE = interpreter.CHECK_BOUNDS_VARIABLE
OutOfBoundsError = interpreter.OutOfBoundsError
check_bounds_enabled = interpreter.check_bounds_enabled


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
    """Whether a kernel argument (jax aval, host array or None) is a real input."""
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
    `workbench.autotune` chooses.
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
    the warps, stages and register cap the caller asked for (None: the config's or Triton's default), and the
    grid."""

    kernel: Any
    args: tuple
    out_shapes: tuple
    metaparams: dict
    num_warps: int | None
    num_stages: int | None
    grid: Any = None
    maxnreg: int | None = None


_OBSERVERS: list[Callable[[Launch], None]] = []


@contextlib.contextmanager
def observing(observer: Callable[[Launch], None]):
    """Call `observer(launch)` for every `triton_call` made while the block is open (interpreter or GPU), when
    the call is traced and before its kernel runs or is compiled. Observers nest; an exception from one
    propagates."""
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
    maxnreg: int | None = None,
    **metaparams: Any,
) -> Any:
    """Launch `kernel` on `args` and return its outputs (jax-triton's `triton_call` convention).

    `None` in `args` becomes the `absent()` placeholder; test it in the kernel with a
    `triton.heuristics({"USE_X": given("x")})` flag.

    On a GPU an `@triton.autotune` kernel's config is chosen by `workbench.autotune` and remembered on
    disk; `tune_inputs` maps integer array arguments (sequence bounds, slot tables) to concrete
    stand-ins of the same shape and dtype (or functions returning one, called only when a config is
    timed) that it may time the configs on when they are traced. The interpreter ignores it, as it ignores
    `num_warps`, `num_stages` and `maxnreg` (registers per thread, PTX `.maxnreg`).

    A Gluon kernel (`triton.experimental.gluon.jit`, Triton 3.9 or later) launches the same way on a GPU; the
    interpreter does not run Gluon, so on a machine without one it is a `ValueError`.
    """
    args = tuple(absent() if a is None else a for a in args)
    single = not isinstance(out_shape, (list, tuple))
    out_shapes = [out_shape] if single else list(out_shape)
    out_shapes = [jax.ShapeDtypeStruct(tuple(s.shape), s.dtype) for s in out_shapes]
    if _OBSERVERS:
        seen = Launch(kernel, args, tuple(out_shapes), dict(metaparams), num_warps, num_stages, grid, maxnreg)
        for observer in list(_OBSERVERS):
            observer(seen)
    if INTERPRET:
        jitted = signature.unwrap(kernel)[2]
        if compiler.is_gluon(jitted):
            raise ValueError(f"kernel: {jitted.__name__} is a Gluon kernel, which runs only compiled, on a GPU "
                             "(Triton's interpreter does not run Gluon); give the call a Triton kernel where no "
                             "GPU is present")
        outs = _interpreted_call(
            args, kernel, out_shapes, grid, zeroed_outputs, input_output_aliases or {}, metaparams
        )
    else:
        from . import autotune  # gpu_call, with configs chosen and remembered (docs/autotune.md)

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
            maxnreg=maxnreg,
        )
    outs = _varying_like(outs, args)
    return outs[0] if single else list(outs)


def _varying_like(outs, args):
    """Outputs that vary over every manual axis some array argument varies over.

    A custom call's (and a host callback's) outputs come back with no varying manual axes, even inside
    `jax.shard_map` over inputs that vary across the devices; a custom VJP then refuses gradients whose
    type lacks the axes of its primal inputs. The kernel computed each device's own outputs, so they vary
    as its inputs do (`_sharding.vary_like`: a type change, no data moves)."""
    arrays = [a.base if isinstance(a, TensorDescriptor) else a for a in args]
    return [vary_like(o, *[a for a in arrays if is_array(a)]) for o in outs]


# ----------------------------------------------------------------------------- interpreter path


is_array = signature.is_array  # re-exported: an array argument (concrete, traced or abstract), not a scalar


def _interpreted_call(args, kernel, out_shapes, grid, zeroed_outputs, aliases, metaparams):
    descriptors = {i: a for i, a in enumerate(args) if isinstance(a, TensorDescriptor)}
    array_pos = [i for i, a in enumerate(args) if is_array(a) or i in descriptors]
    fn = unwrap(kernel)[2]
    constexprs = signature.constexpr_names(fn)
    scalar_names = {}  # position → parameter name of each run-time scalar (typed as on a GPU when the kernel runs)
    for i, a in enumerate(args):
        name = fn.arg_names[i] if i < len(fn.arg_names) else f"argument {i}"
        if i not in array_pos and a is not None and name not in constexprs:
            signature.scalar_type(a, name)  # what the GPU path could not pass fails here, not inside the callback
            scalar_names[i] = name
    arrays = [jnp.asarray(args[i].base if i in descriptors else args[i]) for i in array_pos]
    run = functools.partial(
        _run_interpreted,
        kernel=kernel,
        n_args=len(args),
        array_pos=tuple(array_pos),
        descriptors={i: (d.block_shape, d.padding) for i, d in descriptors.items()},
        scalars={i: a for i, a in enumerate(args) if i not in array_pos},
        scalar_names=scalar_names,
        out_shapes=out_shapes,
        grid=grid,
        zeroed_outputs=zeroed_outputs,
        aliases=aliases,
        metaparams=metaparams,
    )
    return jax.pure_callback(run, out_shapes, *arrays, vmap_method="sequential")


unwrap = signature.unwrap  # re-exported: (autotuner or None, heuristics rules, jitted function)


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


def _fresh_output(shape, dtype, zero: bool) -> interpreter.HostTensor:
    """An output buffer: zeros, or `signature.unwritten` (NaN, an integer's minimum) so that an element the kernel
    forgets to write is loud."""
    return interpreter.HostTensor.copy_of(np.full(shape, 0 if zero else signature.unwritten(dtype), np.dtype(dtype)))


def _run_interpreted(*arrays, kernel, n_args, array_pos, descriptors, scalars, scalar_names, out_shapes, grid,
                     zeroed_outputs, aliases, metaparams):
    tuner, heuristics, fn = unwrap(kernel)
    call_args = [None] * n_args
    for pos, arr in zip(array_pos, arrays):
        host = interpreter.HostTensor.copy_of(arr)
        call_args[pos] = interpreter.tensor_descriptor(host, *descriptors[pos]) if pos in descriptors else host
    for pos, value in scalars.items():  # a constexpr or None as it is, a run-time scalar typed
        call_args[pos] = interpreter.scalar_argument(value, scalar_names[pos]) if pos in scalar_names else value
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
        interpreter.run(fn, launch_grid, [*call_args, *outs], meta, check=check_bounds_enabled())
    return tuple(o.array for o in outs)

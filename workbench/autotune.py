"""Autotuning that is remembered: on a GPU the launcher chooses an `@triton.autotune` kernel's config
itself, once per key, and keeps the choice on disk (docs/autotune.md).

Left to Triton's or jaxlib's autotuning, every config of an autotuned kernel is compiled and benchmarked
at the first execution of each new shape in each new process, and the winner is forgotten. Here, for each
call of an autotuned kernel (`launch.triton_call`, GPU branch):

1. candidates: the kernel's configs that agree with the call's meta-parameters, then its
   `prune_configs_by` (`early_config_prune`, `perf_model`/`top_k`), given the named arguments as the
   launcher binds them (abstract arrays, scalars, outputs);
2. key: the kernel's source hash (`source_hash`: its source, the `@triton.jit` helpers it reaches and
   their constexpr globals; independent of what was hashed before, unlike Triton's `cache_key`), the
   candidates, the values of the kernel's autotune `key=` arguments (arrays as shape and
   dtype; flags computed by its `@triton.heuristics` included) and `programs` (the launch's grid size
   with the first candidate's blocks, rounded to a power of two: how much of the GPU the launch fills,
   which neither batch nor sequence length enters otherwise), every array argument's dtype and whether it
   is given, the device kind, and the Triton version;
3. choice: remembered in this process, else read from `$WORKBENCH_CACHE_DIR/autotune/<sha256>.json`,
   else (the default mode) the shipped tuning table's entry for the key, or the nearest one of the same
   kernel on the same GPU kind (`tuning_table`: nothing is timed), else *tuned ahead*: while the
   caller's function is traced, every candidate runs, compiled, on synthesized inputs of the same shapes
   and dtypes (floats uniform in [-0.1, 0]: log-decay gates stay ≤ 0 and nothing overflows) and is timed
   (`workbench.device_time`: calls of a jitted program back to back, never eager launches, which time the
   host; a call shorter than 2 ms as a chain of copies in one program); the fastest is stored. Integer
   arrays (sequence bounds, chunk-slot tables, seeds) cannot be made up: a kernel would read out of
   bounds. They are used when
   concrete, or taken from the caller's stand-ins (`triton_call(..., tune_inputs={name: array})`);
   a traced one without a stand-in makes that call fall back to jaxlib's autotuning at its first run
   (`gpu_call.launch_autotuned`), uncached, with one warning per kernel naming the argument. A single
   candidate needs no timing at all.
4. launch: `gpu_call.launch` with the kernel under the autotuner (its heuristics evaluated there), the
   chosen config's kwargs as meta-parameters and its warps, stages and CTAs: one kernel is compiled, not
   one per config, and `gpu_call` keeps it on disk (`<cache>/kernels/`).

WORKBENCH_AUTOTUNE=table (default) reads and writes both caches, then asks the tuning table, and tunes
ahead only where neither has a choice; `on` skips the table (the cache, else tuning); `refresh` tunes
again (once per key and process) and overwrites; `off` uses neither cache nor the table and times nothing:
each autotuned kernel runs its first candidate (step 1's list), compiled anew in each process.
Cache files are written to a temporary file in the same folder and renamed, so two processes writing
one key leave one whole file; a file that cannot be read or parsed is ignored with a warning and
replaced, an unwritable folder is a warning: the cache never makes a call fail (`workbench.cache`).

None of this runs in Triton's interpreter (CPU), which keeps choosing configs as `launch` says. The
pieces that need no GPU (keys, store, choice) take their collaborators as arguments so that
tests/test_autotune.py can drive them on a CPU with stub timers and launchers.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import math
import os
import statistics
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import signature
# re-exported where the autotuner's users find them: the cache folder's names and the kernels' source hash
from .cache import (CACHE_VAR, FORMAT, MODE_VAR, MODES, REFRESH_VAR, CacheWarning, Store, cache_dir,  # noqa: F401
                    canonical, digest, mode, refreshes)
from .kernel_hash import source_hash

TABLE_VAR = "WORKBENCH_TUNING_TABLE"  # a folder of table files to read instead of the package's (tests, a new table)
CONFIRM_MARGIN, CONFIRM_ROUNDS, CONFIRM_MAX = 0.10, 2, 6  # `Choices.tune`: the contenders, timed again
TIMER = "jitted"  # how a stored choice was timed; a cached choice without it was timed by eager launches (the host)

STATS: collections.Counter = collections.Counter()
"""What this process did: configs `chosen_only` (one candidate), `chosen_memory`, `chosen_disk`,
`chosen_table`, `chosen_table_nearest`, `chosen_table_sibling`, `chosen_table_sibling_nearest` (the sibling GPU
kind's table: `tuning_table.SIBLINGS`), `tuned`, `chosen_first` (WORKBENCH_AUTOTUNE=off), `fallback`
(jaxlib's autotuning). Compiled kernels are counted in `gpu_call.STATS`."""
CHOSEN: dict[str, dict[str, Any]] = {}  # this process's choices by key (first seen): kernel, key values, config, source

_LOCK = threading.Lock()
_PRECOMPILERS: list[Callable[..., Any]] = []


@contextlib.contextmanager
def precompiling(precompiler: Callable[..., Any]):
    """Call `precompiler(kernel, args, out_shapes, configs, metaparams)` before the candidates of a call are timed
    (`kernel` the launched autotuner, `args` the made-up inputs they are timed on, `configs` the candidates; two
    or more): a harness compiles them there all at once (`workbench tune --compile-workers`:
    `compile_check.precompile`, child processes), so that each timing loads its kernel from disk instead of
    compiling it in turn. The launcher does not know who compiles. Precompilers nest; one that raises is a
    warning, and the candidates are compiled as they are timed."""
    _PRECOMPILERS.append(precompiler)
    try:
        yield precompiler
    finally:
        _PRECOMPILERS.remove(precompiler)


# ----------------------------------------------------------------------------- environment


def table_folder() -> Path:
    """The tuning table's folder: $WORKBENCH_TUNING_TABLE, else the package's `workbench/tuning/`."""
    from . import tuning_table  # here: tests load this file alone, without the package

    return Path(os.environ.get(TABLE_VAR) or tuning_table.FOLDER)


# ----------------------------------------------------------------------------- keys


def config_fields(config) -> dict[str, Any]:
    """What a `triton.Config` launches with, as JSON."""
    return canonical({"kwargs": dict(config.kwargs), "num_warps": config.num_warps, "num_stages": config.num_stages,
                      "num_ctas": config.num_ctas, "maxnreg": getattr(config, "maxnreg", None)})


def config_text(fields: Mapping[str, Any]) -> str:
    """A config's fields (`config_fields`) as one short label: `BK=64,BV=32 w8 s2`."""
    blocks = ",".join(f"{k}={v}" for k, v in fields.get("kwargs", {}).items())
    return f"{blocks} w{fields.get('num_warps')} s{fields.get('num_stages')}".strip()


def function_name(fn) -> str:
    """A `@triton.jit` function's name (compiled or interpreted)."""
    return getattr(fn, "__name__", None) or fn.fn.__name__


def versions() -> dict[str, str]:
    """The versions a choice depends on: Triton's (the compiler)."""
    import triton

    return {"triton": triton.__version__}


def describe(value: Any) -> Any:
    """An argument as a key sees it: arrays by shape and dtype, scalars and constexprs by value."""
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return {"shape": list(value.shape), "dtype": str(value.dtype)}
    value = getattr(value, "value", value)  # tl.constexpr
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def tuning_key(*, kernel: str, source: str, candidates: Sequence[Any], key_values: Mapping[str, Any],
               arrays: Sequence[Any], device: str, versions: Mapping[str, str]) -> dict[str, Any]:
    """The key of one choice (see the module docstring): all JSON."""
    return canonical({"kind": "config", "kernel": kernel, "source": source,
                      "configs": [config_fields(c) for c in candidates], "key": dict(key_values),
                      "arrays": list(arrays), "device": device, "versions": dict(versions)})


# ----------------------------------------------------------------------------- choice


@dataclasses.dataclass
class Choice:
    config: Any
    source: str  # "only" | "memory" | "disk" | "table" | "table_nearest" | "table_sibling[_nearest]" | "tuned"


class Choices:
    """Chosen configs by key: this process's memory, then `store`, else timed with `timer`."""

    def __init__(self, store: Store):
        self.store = store
        self.memory: dict[str, tuple[int, str]] = {}  # digest → (candidate index, how it was found)

    def lookup(self, key: Mapping[str, Any], candidates: Sequence[Any], *, refresh: bool = False) -> Choice | None:
        """The remembered choice, or None. `refresh` ignores the disk and what this process read from it."""
        if len(candidates) == 1:
            return Choice(candidates[0], "only")
        name = digest(key)
        with _LOCK:
            found = self.memory.get(name)
        if found is not None and (found[1] == "tuned" or not refresh):
            return Choice(candidates[found[0]], "memory")
        if refresh:
            return None
        entry = self.store.read(key)
        if entry is None:
            return None
        fields = [config_fields(c) for c in candidates]
        if entry.get("config") not in fields:
            warnings.warn(f"workbench cache: ignoring {self.store.path(key)}: its config is not a candidate",
                          CacheWarning, stacklevel=2)
            return None
        if entry.get("timer") != TIMER:  # chosen by the eager timer (before 2026-11-29): by the host's time
            _warn_once("host-timed", "workbench cache: choices timed by eager launches (the host's time, before "
                       "2026-11-29) are timed again")
            return None
        index = fields.index(entry["config"])
        with _LOCK:
            self.memory[name] = (index, "disk")
        return Choice(candidates[index], "disk")

    def from_table(self, key: Mapping[str, Any], candidates: Sequence[Any], folder: Path | None = None
                   ) -> Choice | None:
        """The shipped tuning table's choice for `key` (`tuning_table.Table.choose`: an exact entry, else the
        nearest of the same kernel on the same device, else the sibling GPU kind's), remembered in this process;
        None when it has none."""
        from . import tuning_table  # here: tests load this file alone, without the package

        folder = Path(folder or table_folder())
        found = tuning_table.table_for(key["device"], folder).choose(key, [config_fields(c) for c in candidates])
        if found is None:
            return None
        index, source = found
        with _LOCK:
            self.memory[digest(key)] = (index, source)
        return Choice(candidates[index], source)

    def tune(self, key: Mapping[str, Any], candidates: Sequence[Any], timer: Callable[[Any], float]) -> Choice:
        """Time every candidate (`timer(config)` → ms; an exception counts as never finishing); then time
        the contenders, every candidate within CONFIRM_MARGIN of the fastest (at most CONFIRM_MAX, the
        fastest first), CONFIRM_ROUNDS more times, round by round, and rank them by the median of their
        timings: one lucky or unlucky sample does not decide between configs the timer cannot tell apart.
        Keep the fastest (the first of equals) in memory and on disk. Raises if no candidate ran."""
        times: list[float] = []
        errors: list[str | None] = []
        first_error: BaseException | None = None

        def timed(config) -> tuple[float, str | None]:
            nonlocal first_error
            try:
                ms = float(timer(config))
                return ms, (None if math.isfinite(ms) else "did not finish")
            except Exception as exc:  # a config that does not compile or launch (shared memory) loses
                first_error = first_error or exc
                return math.inf, f"{type(exc).__name__}: {exc}"[:500]

        for config in candidates:
            ms, error = timed(config)
            times.append(ms)
            errors.append(error)
        best = min(range(len(candidates)), key=lambda i: times[i])
        if not math.isfinite(times[best]):
            raise RuntimeError(f"autotune: no config of {key.get('kernel')} ran: {errors[0]}") from first_error
        contenders = sorted((i for i in range(len(candidates)) if times[i] <= times[best] * (1 + CONFIRM_MARGIN)),
                            key=lambda i: (times[i], i))[:CONFIRM_MAX]
        again: dict[int, list[float]] = {}
        if len(contenders) > 1:
            for _ in range(CONFIRM_ROUNDS):
                for i in contenders:
                    again.setdefault(i, []).append(timed(candidates[i])[0])
            best = min(contenders, key=lambda i: (statistics.median([times[i], *again[i]]), i))
        self.store.write(key, {
            "config": config_fields(candidates[best]),
            "timings_ms": [{"config": config_fields(c), "ms": t if math.isfinite(t) else None, "error": e,
                            **({"again": [a if math.isfinite(a) else None for a in again[i]]} if i in again else {})}
                           for i, (c, t, e) in enumerate(zip(candidates, times, errors))],
            "written": datetime.now(timezone.utc).isoformat(timespec="seconds"), "timer": TIMER,
        })
        with _LOCK:
            self.memory[digest(key)] = (best, "tuned")
        return Choice(candidates[best], "tuned")


_CHOICES: dict[Path, Choices] = {}


def choices_for(folder: Path) -> Choices:
    """The process-wide `Choices` of a cache folder."""
    with _LOCK:
        if folder not in _CHOICES:
            _CHOICES[folder] = Choices(Store(folder / "autotune"))
        return _CHOICES[folder]


# ----------------------------------------------------------------------------- the call (GPU)


def _original_prune(tuner):
    """The kernel's own `early_config_prune`, kept aside the first time the kernel is seen (jax-triton, when a
    caller also uses it on the same kernel, replaces it with a wrapper bound to one call's meta-parameters)."""
    if "_workbench_early_config_prune" not in vars(tuner):
        tuner._workbench_early_config_prune = tuner.early_config_prune
    return tuner._workbench_early_config_prune


is_array = signature.is_array  # re-exported


def candidates(tuner, named: Mapping[str, Any], metaparams: Mapping[str, Any]) -> list[Any]:
    """The configs Triton's launcher would autotune for this call: those whose kwargs agree with the call's
    meta-parameters, then the kernel's `prune_configs_by`."""
    configs = [c for c in tuner.configs if all(c.kwargs.get(k, v) == v for k, v in metaparams.items())]
    if any(c.pre_hook is not None for c in configs):
        raise NotImplementedError("autotune: configs with a pre_hook are not supported (a launch from JAX runs no "
                                  "Python before the kernel)")
    prune = _original_prune(tuner)
    if prune is not None:
        configs = prune(configs, dict(named))
    if tuner.perf_model is not None:
        top_k = tuner.configs_top_k
        top_k = int(len(configs) * top_k) if isinstance(top_k, float) and top_k <= 1.0 else top_k
        if len(configs) > top_k:
            configs = sorted(configs, key=lambda c: tuner.perf_model(**named, **metaparams, **c.all_kwargs()))[:top_k]
    if not configs:
        raise ValueError("autotune: no config left after pruning (early_config_prune must keep at least one)")
    return list(configs)


def key_values(tuner, rules: Sequence[Mapping[str, Callable]], named: Mapping[str, Any],
               metaparams: Mapping[str, Any]) -> dict[str, Any]:
    """The kernel's `key=` arguments, by value; a key that names a heuristic's flag gets the flag's value
    (evaluated as the launcher does, on the named arguments and meta-parameters)."""
    scope = {**named, **metaparams}
    for values in rules:
        for flag, rule in values.items():
            try:
                scope.setdefault(flag, rule(scope))
            except Exception:  # a heuristic of the config's own kwargs: not part of the call
                pass
    return {name: describe(scope[name]) if name in scope else "<missing>" for name in tuner.keys}


def programs(grid: Any, meta: Mapping[str, Any]) -> int:
    """A launch's program count (`grid`: a tuple of ints, an int, or a function of the meta-parameters
    `meta`), rounded to the nearest power of two (≥ 1): the tuning key's measure of the launch's size."""
    dims = grid(dict(meta)) if callable(grid) else grid
    n = math.prod(int(d) for d in (dims if isinstance(dims, (tuple, list)) else (dims,)))
    return 1 << max(0, round(math.log2(n))) if n > 0 else 1


@dataclasses.dataclass
class Plan:
    """What the launcher knows of one autotuned call before choosing."""

    tuner: Any
    inner: Any  # the kernel under the autotuner: heuristics and jitted function
    arg_names: list[str]
    candidates: list[Any]
    key: dict[str, Any]


def plan(kernel, args: Sequence[Any], out_shapes: Sequence[Any], metaparams: Mapping[str, Any], *,
         device: str, versions: Mapping[str, str], grid: Any = None) -> Plan:
    """Candidates and key of an autotuned call; `args` may be tracers (only shapes and dtypes are read).
    With `grid`, the key's values hold `programs` (the grid's size with the first candidate's blocks)."""
    import jax

    tuner, rules, fn = signature.unwrap(kernel)
    values = [jax.ShapeDtypeStruct(tuple(a.shape), a.dtype) if is_array(a) else a for a in args]
    named = dict(zip(fn.arg_names, [*values, *out_shapes]))
    configs = candidates(tuner, named, metaparams)
    arrays = [[name, str(v.dtype), "given" if math.prod(v.shape) else "empty"]
              for name, v in zip(fn.arg_names, values) if is_array(v)]
    values = key_values(tuner, rules, named, metaparams)
    if grid is not None:
        values["programs"] = programs(grid, {**metaparams, **configs[0].kwargs})
    key = tuning_key(kernel=function_name(fn), source=source_hash(fn), candidates=configs,
                     key_values=values, arrays=arrays, device=device, versions=versions)
    return Plan(tuner, kernel.fn, list(fn.arg_names), configs, key)


HOST_ELEMENTS = 1 << 20  # made-up arrays up to this size come from the host (no compile); larger from the device


@functools.cache
def _device_uniform():
    import jax
    import jax.numpy as jnp

    @functools.partial(jax.jit, static_argnums=(1, 2))
    def uniform(key, shape, dtype):
        return jax.random.uniform(key, shape, jnp.float32, -0.1, 0.0).astype(dtype)

    return uniform


def _uniform(seed: int, shape: tuple[int, ...], dtype) -> Any:
    """An array uniform in [-0.1, 0]: small ones drawn on the host, large ones on the device."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    if math.prod(shape) <= HOST_ELEMENTS:
        values = np.random.default_rng(seed).uniform(-0.1, 0.0, shape).astype(np.float32)
        return jnp.asarray(values.astype(jnp.dtype(dtype)))
    return _device_uniform()(jax.random.key(seed), shape, jnp.dtype(dtype))


def tuning_inputs(args: Sequence[Any], arg_names: Sequence[str], tune_inputs: Mapping[str, Any] | None
                  ) -> tuple[list[Any] | None, list[str]]:
    """Concrete stand-ins for a call's arguments, or (None, names of traced integer arrays without one).

    Floating arrays: uniform in [-0.1, 0] of the same shape and dtype; empty arrays: empty; integer
    arrays: the caller's stand-in (an array, or a function of no arguments returning one, called only
    here, i.e. only when a config is tuned), else the value itself when it is concrete; scalars as they
    are. Call under `jax.ensure_compile_time_eval()`.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np

    given = dict(tune_inputs or {})
    out, missing = [], []
    for i, (name, a) in enumerate(zip(arg_names, args)):
        if not is_array(a):
            out.append(a)
        elif name in given:
            value = np.asarray(given[name]() if callable(given[name]) else given[name])
            if value.shape != tuple(a.shape) or value.dtype != np.dtype(a.dtype):
                raise ValueError(f"tune_inputs[{name!r}]: expected shape {tuple(a.shape)} and dtype {a.dtype} "
                                 f"like the argument, got {value.shape} {value.dtype}")
            out.append(jnp.asarray(value))
        elif math.prod(a.shape) == 0:
            out.append(jnp.asarray(np.zeros(a.shape, jnp.dtype(a.dtype))))
        elif jnp.issubdtype(a.dtype, jnp.floating):
            out.append(_uniform(i, tuple(a.shape), a.dtype))
        elif not isinstance(a, jax.core.Tracer):
            out.append(jnp.asarray(a))
        else:
            missing.append(name)
    return (None if missing else out), missing


_WARNED: set[str] = set()


def _warn_once(topic: str, message: str) -> None:
    """One `CacheWarning` per topic and process."""
    with _LOCK:
        first = topic not in _WARNED
        _WARNED.add(topic)
    if first:
        warnings.warn(message, CacheWarning, stacklevel=3)


def call(args: Sequence[Any], *, kernel, out_shapes, grid, name, zeroed_outputs, input_output_aliases,
         num_warps, num_stages, metaparams: Mapping[str, Any], tune_inputs: Mapping[str, Any] | None = None,
         maxnreg: int | None = None, launch: Callable[..., Any] | None = None, launch_autotuned: Callable[..., Any] | None = None,
         timer: Callable[[Any, Callable[[], Any]], float] | None = None, device: str | None = None) -> Any:
    """`launch.triton_call`'s GPU branch: `workbench.gpu_call`, with configs chosen here (module docstring).

    launch, launch_autotuned: `gpu_call.launch` and `gpu_call.launch_autotuned` (the defaults); timer:
    `timer(config, run)` → ms (`run()` launches the config once), default `device_time.time_on_device`;
    device: the device kind in the key. Tests pass stubs for all four.
    """
    from triton.runtime.autotuner import Autotuner

    from . import gpu_call
    from ._bounds import StandIns

    launch = launch or gpu_call.launch
    launch_autotuned = launch_autotuned or gpu_call.launch_autotuned
    common = dict(out_shapes=out_shapes, grid=grid, name=name, zeroed_outputs=zeroed_outputs,
                  input_output_aliases=input_output_aliases)
    current = mode()
    if not isinstance(kernel, Autotuner):
        return launch(args, kernel=kernel, num_warps=num_warps, num_stages=num_stages, maxnreg=maxnreg,
                      metaparams=metaparams, **common)

    import jax

    if device is None:
        device = jax.devices()[0].device_kind
    p = plan(kernel, args, out_shapes, metaparams, device=device, versions=versions(), grid=grid)
    if current == "refresh" and not refreshes(p.key["kernel"]):
        current = "table"  # a refresh limited to other kernels (WORKBENCH_AUTOTUNE_REFRESH)
    if isinstance(tune_inputs, StandIns):  # offered to any kernel: keep the ones it takes
        tune_inputs = {name: value for name, value in tune_inputs.items() if name in p.arg_names[:len(args)]}
    elif tune_inputs:
        unknown = set(tune_inputs) - set(p.arg_names[:len(args)])
        if unknown:
            raise ValueError(f"tune_inputs: {sorted(unknown)} are not arguments of {p.key['kernel']} "
                             f"(arguments: {', '.join(p.arg_names[:len(args)])})")

    def launch_with(config, xs):
        return launch(xs, kernel=p.inner, num_warps=config.num_warps, num_stages=config.num_stages,
                      num_ctas=config.num_ctas, maxnreg=config.maxnreg, metaparams={**metaparams, **config.kwargs},
                      **common)

    if current == "off":  # the first candidate: nothing read, timed or written
        STATS["chosen_first"] += 1
        return launch_with(p.candidates[0], args)
    book = choices_for(cache_dir())
    choice = book.lookup(p.key, p.candidates, refresh=current == "refresh")
    if choice is None and current == "table":
        choice = book.from_table(p.key, p.candidates)
    if choice is None:
        with jax.ensure_compile_time_eval():
            inputs, missing = tuning_inputs(args, p.arg_names, tune_inputs)
            if inputs is not None:
                def time_config(config):
                    if timer is not None:
                        return timer(config, lambda: launch_with(config, inputs))
                    from .device_time import time_on_device

                    return time_on_device(lambda xs: launch_with(config, xs), inputs)

                if len(p.candidates) > 1:
                    for precompiler in list(_PRECOMPILERS):
                        try:
                            precompiler(kernel, inputs, out_shapes, p.candidates, metaparams)
                        except Exception as exc:  # noqa: BLE001  compiling one by one is the fallback
                            warnings.warn(f"autotune: precompiling {p.key['kernel']}'s candidates failed "
                                          f"({type(exc).__name__}: {str(exc)[:300]}); each compiles as it is timed",
                                          stacklevel=3)
                choice = book.tune(p.key, p.candidates, time_config)
        if choice is None:
            with _LOCK:
                first = p.key["kernel"] not in _WARNED
                _WARNED.add(p.key["kernel"])
            if first:
                warnings.warn(
                    f"autotune: {p.key['kernel']} is autotuned at its first run, uncached: its integer argument(s) "
                    f"{', '.join(missing)} are traced and the caller passed no tune_inputs stand-in",
                    stacklevel=3)
            STATS["fallback"] += 1
            return launch_autotuned(args, configs=p.candidates, kernel=p.inner, metaparams=metaparams, **common)
    STATS[f"chosen_{choice.source}"] += 1
    CHOSEN.setdefault(digest(p.key), {"kernel": p.key["kernel"], "key": p.key["key"],
                                      "config": config_fields(choice.config), "source": choice.source})
    return launch_with(choice.config, args)

"""`workbench tune --write-table`: tune every autotuned kernel of the ops at their bench shapes on this GPU and
merge the choices into the package's tuning table (`workbench/tuning/<device>.json`, `tuning_table`).
A shape that cannot run (a dtype or head dimension no candidate fits) is reported and skipped: the others'
choices are merged, then `ShapesFailed` names it.

Each op's Triton forward and forward+backward run once per shape under `WORKBENCH_AUTOTUNE=refresh` with a
fresh temporary autotune cache, so every kernel they launch is timed over its candidates (`autotune.call`);
the compiled kernels stay shared with the user's cache (`choices_only_cache`: a compile does not depend on
timing, so tuning processes run side by side beforehand, or an earlier run, leave nothing to compile again).
The temporary cache's entries become table entries, merged into the device's file after each shape (an entry of
the same kernel, source, Triton version, key values and arrays is replaced): a run stopped by a time limit keeps
the shapes it finished, so one process can take every dtype and head dimension. Shapes: the op's shape sets
named, each at the dtypes and head dimensions asked for (a head dimension replaces K and V, or D). The table is
reviewed like code: commit the file.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp

from .. import autotune, compile_check, launch, signature, testing, tuning_table
from .records import Refused
from .specs import OPS
from .timing import jax_calls, say
from .traffic import PASSES


def shapes_of(op_name: str, shape_sets: Sequence[str], head_dims: Sequence[int] = (),
              tokens: Sequence[int] | None = None) -> list[dict[str, int]]:
    """The shapes of the named sets (only those with a sequence length T in `tokens`, when given), each at
    every head dimension in `head_dims` (K = V, or D) instead of its own (its own when `head_dims` is empty);
    each shape once. A `tokens` that leaves no shape is a ValueError."""
    op = OPS[op_name]
    out: list[dict[str, int]] = []
    for name in shape_sets:
        if name not in op.shape_sets:
            raise ValueError(f"--shapes: {op_name} has no shape set {name!r}; known: {', '.join(op.shape_sets)}")
        for shape in op.shape_sets[name]:
            if tokens is not None and shape.get("T") not in tokens:
                continue
            variants = ([{**shape, **({"D": d} if "D" in shape else {"K": d, "V": d})} for d in head_dims]
                        or [dict(shape)])
            out += [s for i, s in enumerate(variants) if s not in out and s not in variants[:i]]
    if not out:
        known = sorted({sh.get("T") for n in shape_sets for sh in op.shape_sets[n]})
        raise ValueError(f"--T: {op_name}'s sets {', '.join(shape_sets)} have no shape with T in {list(tokens)}; "
                         f"their T: {known}")
    return out


def choices_only_cache(fresh: Path, shared: Path) -> Path:
    """Make `fresh` an autotune cache folder with no choices whose compiled kernels are `shared`/kernels
    (a link; created if missing). Where no link can be made, `fresh` keeps kernels of its own."""
    kernels = shared / "kernels"
    try:
        kernels.mkdir(parents=True, exist_ok=True)
        (fresh / "kernels").symlink_to(kernels.resolve(), target_is_directory=True)
    except OSError as exc:
        say(f"tune: compiled kernels not shared with {kernels} ({exc}); every candidate compiles anew")
    return fresh


def write_table(ops: Sequence[str], shape_sets: Sequence[str], *, dtypes: Sequence[str] = (),
                head_dims: Sequence[int] = (), kernels: Sequence[str] = (), tokens: Sequence[int] | None = None,
                passes: Sequence[str] = PASSES, compile_workers: int = 0,
                folder: Path = tuning_table.FOLDER) -> Path:
    """Tune, then merge into this device's table file; returns its path. `kernels`: only these are timed again
    (`WORKBENCH_AUTOTUNE_REFRESH`); the others take the table's choices (timed only where it has none). `tokens`:
    only the shapes with these sequence lengths (`--T`; checked before anything runs). `passes`: which of the op's
    forward and forward+backward run at each shape (`--passes`; both by default: the forward alone suffices to
    time kernels that only the forward launches, and skips compiling the backward). `compile_workers`: when
    above 0, each kernel's candidates are compiled at once in that many child processes before they are timed
    (`--compile-workers`; `compile_check.precompile`), instead of one after another as each is timed. A name
    that none of the runs launched is a ValueError after the run (the choices made are merged, shape by shape)."""
    unknown_passes = [p for p in passes if p not in PASSES]
    if unknown_passes or not passes:
        raise ValueError(f"--passes: expected a non-empty list of {', '.join(PASSES)}, got {list(passes)}")
    if isinstance(compile_workers, bool) or not isinstance(compile_workers, int) or compile_workers < 0:
        raise ValueError(f"--compile-workers: expected a count ≥ 0, got {compile_workers!r}")
    if launch.INTERPRET:
        raise Refused("no CUDA GPU: the interpreter times nothing, and a table is a GPU's choices")
    unknown = sorted(set(ops) - set(OPS))
    if unknown:
        raise ValueError(f"--op: unknown op(s) {', '.join(unknown)}; known: {', '.join(OPS)}")
    plan = {op_name: shapes_of(op_name, shape_sets, head_dims, tokens) for op_name in ops}  # bad sets fail here
    device = jax.devices()[0].device_kind
    before = tuning_table.Table.load(device, folder)
    start = time.perf_counter()
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="workbench-tune-") as cache:
        choices_only_cache(Path(cache), autotune.cache_dir())
        saved = {v: os.environ.get(v) for v in (autotune.CACHE_VAR, autotune.MODE_VAR, autotune.REFRESH_VAR)}
        os.environ[autotune.CACHE_VAR], os.environ[autotune.MODE_VAR] = cache, "refresh"
        os.environ[autotune.REFRESH_VAR] = ",".join(kernels)
        precompiling = contextlib.ExitStack()
        if compile_workers:
            precompiling.enter_context(autotune.precompiling(_precompiler(compile_workers)))
        try:
            for op_name in ops:
                op = OPS[op_name]
                for dtype in dtypes or (op.dtype,):
                    for i, shape in enumerate(plan[op_name]):
                        where = f"{op_name} {dtype} {' '.join(f'{k}={v}' for k, v in shape.items())}"
                        try:
                            _run_once(op, shape, dtype, i, passes)
                        except Exception as exc:  # noqa: BLE001  one shape that cannot run costs only its entries
                            failed.append(f"{where}: {type(exc).__name__}: {str(exc)[:300]}")
                            say(f"[{time.perf_counter() - start:7.1f} s] {where}: FAILED ({failed[-1]})")
                            continue
                        say(f"[{time.perf_counter() - start:7.1f} s] {where}: tuned")
                        # merged now: a process stopped later (a time limit) keeps the shapes it finished
                        path, table = _merge(device, folder, Path(cache) / "autotune")
        finally:
            precompiling.close()
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        entries = tuning_table.entries_from_store(Path(cache) / "autotune")
        unseen = sorted(set(kernels) - {e["kernel"] for e in entries})
        if unseen:
            raise ValueError(f"--kernels: {', '.join(unseen)} not timed by any run of {', '.join(ops)} "
                             f"(timed: {', '.join(sorted({e['kernel'] for e in entries})) or 'none'}; their choices "
                             f"are merged into the table as each shape finished)")
        for line in [*losers(Path(cache) / "autotune"), *choices(Path(cache) / "autotune", before)]:
            say(f"tune: {line}")
        path, table = _merge(device, folder, Path(cache) / "autotune")
    say(f"{len(entries)} choices of {device} merged into {path} ({len(table.entries)} entries)")
    if failed:
        raise ShapesFailed(path, failed)
    return path


def _merge(device: str, folder: Path, store: Path) -> tuple[Path, tuning_table.Table]:
    """The choices in the autotune `store` so far merged into the device's table file in `folder`."""
    table = tuning_table.Table.load(device, folder).merged(tuning_table.entries_from_store(store))
    return table.write(folder), table


def _stored(folder: Path):
    """(key, timings, chosen config) of each choice in an autotune store (as `autotune.Choices.tune` writes
    them), unreadable files skipped."""
    for path in sorted(Path(folder).glob("*.json")):
        try:
            stored = json.loads(path.read_text())
            yield stored["key"], list(stored["timings_ms"]), stored["config"]
        except (OSError, ValueError, KeyError, TypeError):
            continue


def _key_text(key) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(key.get("key", {}).items()))


def losers(folder: Path) -> list[str]:
    """One line per candidate that did not run where it was timed (`timings_ms` errors in an autotune
    store): kernel, its key values, the config and the error. A key still has a choice if any ran."""
    return [f"{key.get('kernel')} [{_key_text(key)}] {timing['config']} did not run: {timing['error'][:200]}"
            for key, timings, _ in _stored(folder) for timing in timings if timing.get("error")]


def choices(folder: Path, before: tuning_table.Table) -> list[str]:
    """One line per choice in an autotune store: the kernel, its key values, the config chosen and its time
    (the median of its timings, as the tuner ranked it), the best other config's time and how much slower, and
    what `before` (the table as it was) chose for that key: the same, another config (with its time here), or
    none. A choice's time far from the kernel's time inside the op (`scripts/op_profile.py`) is the sign of a
    timer measuring something else (docs/autotune.md, "Timing")."""
    out = []
    for key, timings, chosen in _stored(folder):
        times = {json.dumps(t["config"], sort_keys=True): _median_ms(t) for t in timings}
        mine = times.get(json.dumps(chosen, sort_keys=True), math.inf)
        line = f"{key.get('kernel')} [{_key_text(key)}] chose {autotune.config_text(chosen)}: {mine:.3f} ms"
        others = sorted((ms, c) for c, ms in times.items()
                        if c != json.dumps(chosen, sort_keys=True) and math.isfinite(ms))
        if others:
            ms, config = others[0]
            line += f"; next {autotune.config_text(json.loads(config))}: {ms:.3f} ms (+{100 * (ms / mine - 1):.0f} %)"
        found = before.choose(key, key.get("configs", []))
        if found is None:
            line += "; the table had none"
        elif key["configs"][found[0]] == chosen:
            line += f"; the table's ({found[1]}) too"
        else:
            old = key["configs"][found[0]]
            line += (f"; the table ({found[1]}) had {autotune.config_text(old)}: "
                     f"{times.get(json.dumps(old, sort_keys=True), math.inf):.3f} ms here")
        out.append(line)
    return out


def _median_ms(timing) -> float:
    """A candidate's time as `Choices.tune` ranked it: the median of its timings (inf when none ran)."""
    values = [v for v in [timing.get("ms"), *timing.get("again", [])] if v is not None]
    return statistics.median(values) if values else math.inf


class ShapesFailed(RuntimeError):
    """Some shapes could not be tuned (the others' choices were merged into `path`)."""

    def __init__(self, path: Path, failed: Sequence[str]):
        super().__init__(f"{len(failed)} shape(s) not tuned (the others merged into {path}):\n  " + "\n  ".join(failed))
        self.path, self.failed = path, list(failed)


def _precompiler(workers: int):
    """`autotune.precompiling`'s hook for `write_table`: a kernel's candidates compiled in `workers` child
    processes (`compile_check.precompile`), with one line said per kernel and key."""
    def precompile(kernel, args, out_shapes, configs, metaparams):
        result = compile_check.precompile(kernel, args, out_shapes, configs, metaparams, workers=workers)
        failed = "; ".join(compile_check.describe(f).splitlines()[0] for f in result["failed"][:3])
        say(f"tune: {autotune.function_name(signature.unwrap(kernel)[2])}: precompiled {result['compiled']} of "
            f"{len(configs)} candidates ({result['skipped']} on disk "
            f"already) in {result['seconds']} s with {workers} workers" + (f"; failed: {failed}" if failed else ""))
        return result

    return precompile


def _run_once(op, shape, dtype: str, seed: int, passes: Sequence[str] = PASSES) -> None:
    """The op's Triton forward and (or) forward+backward once at `shape`: every kernel they launch is tuned."""
    inputs = op.inputs(shape, jnp.dtype(dtype), seed)
    forward = jax_calls(op, "reference", inputs, []).forward
    cotangents = testing.random_cotangents(1000 + seed, jax.eval_shape(forward))
    calls = jax_calls(op, "triton", inputs, cotangents)
    for pass_ in PASSES:
        if pass_ in passes:
            calls.block(getattr(calls, pass_)())

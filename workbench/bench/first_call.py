"""`workbench bench --first-call`: the wall seconds from a fresh process's start to its first forward+backward
result at a shape set, once with empty caches and once with what the first process left in them
(`workbench.autotune`'s chosen configs and compiled kernels, JAX's persistent compilation cache), each in a
new `python -m workbench.bench --first-call-child` process. Its records go to `<out>/first_call/` (they hold
no `results` rows).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from .. import launch, testing
from .machine import device_info, git_state, versions
from .records import DEFAULT_OUT, Refused
from .specs import OPS
from .timing import jax_calls, say


FIRST_CALL_OUT = DEFAULT_OUT / "first_call"
FIRST_CALL_GOAL = 0.25  # cached_s ≤ this × cold_s (issue 18)
_MARK = "workbench-first-call "  # the child's protocol lines on stdout start with this


def first_call(op_name: str, shape_set: str = "target", *, command: str = "",
               child: Sequence[str] | None = None, timeout: float | None = None) -> dict[str, Any]:
    """Seconds from a fresh process's start to its first forward+backward result, cold then cached.

    Two processes run one after the other (`child`, default `python -m workbench.bench
    --first-call-child OP SET`), with `WORKBENCH_CACHE_DIR` a fresh temporary folder shared by both,
    the caller's `WORKBENCH_AUTOTUNE` (default `table`: the cold process takes the shipped tuning
    table's configs where it has them; `on` times every config, as a machine without a table does), and
    JAX's persistent compilation cache in `<that folder>/jax` (every compile kept) and Triton's own cache
    in `<that folder>/triton` (no kernel compiled earlier on this machine is found). Each computes, for
    every shape of the set in turn, the op's Triton path under
    `jax.jit` (forward, then forward+backward with random cotangents, as `run` does) and reports on
    stdout as each result is ready. `cold_s` and `cached_s` are wall seconds from just before the
    process is started to its last shape's first forward+backward result; `ratio` = cached_s / cold_s.
    The record keeps, per process, the seconds to its imports (`startup_s`) and to each shape's
    result, what `workbench.autotune` did (`stats`), and the number of files the first process left in
    each cache, and the table folder read with its number of entries for this device. The folder is
    removed afterwards.
    """
    if op_name not in OPS:
        raise ValueError(f"--op: unknown op {op_name!r} for --first-call; known: {', '.join(OPS)}")
    op = OPS[op_name]
    if shape_set not in op.shape_sets:
        raise ValueError(f"--shapes: {op_name} has no shape set {shape_set!r}; known: {', '.join(op.shape_sets)}")
    if launch.INTERPRET and shape_set not in op.cpu_shape_sets:
        raise Refused(f"no CUDA GPU: shape set {shape_set!r} of {op_name} would take hours in the interpreter; "
                      f"use --shapes {' or '.join(op.cpu_shape_sets)} for a smoke test, or run on a GPU")
    if launch.INTERPRET:
        say("warning: Triton is interpreted on this CPU: no cache applies, the figures are meaningless")
    from .. import autotune, tuning_table

    mode = autotune.mode()  # the caller's WORKBENCH_AUTOTUNE (default `table`), checked here, passed on
    table_folder = autotune.table_folder()
    table_entries = len(tuning_table.Table.load(device_info()["kind"], table_folder).entries)
    root = Path(__file__).resolve().parents[2]
    argv = list(child or [sys.executable, "-m", "workbench.bench", "--first-call-child", op_name, shape_set])
    t_start = time.perf_counter()
    cache = Path(tempfile.mkdtemp(prefix="workbench-first-call-"))
    settings = {"WORKBENCH_CACHE_DIR": "<a fresh temporary folder>", "WORKBENCH_AUTOTUNE": mode,
                "JAX_COMPILATION_CACHE_DIR": "<that folder>/jax", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1", "TRITON_CACHE_DIR": "<that folder>/triton"}
    env = {**os.environ, **settings, "WORKBENCH_CACHE_DIR": str(cache), "JAX_COMPILATION_CACHE_DIR": str(cache / "jax"),
           "TRITON_CACHE_DIR": str(cache / "triton"),
           "PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)}
    try:
        runs = {}
        for run_name in ("cold", "cached"):
            say(f"[{time.perf_counter() - t_start:7.1f} s] {op_name} {shape_set} first call, {run_name} cache")
            runs[run_name] = _first_call_process(argv, env, len(op.shape_sets[shape_set]), timeout)
            say(f"[{time.perf_counter() - t_start:7.1f} s] {op_name} {shape_set} first call, {run_name}: "
                 f"{runs[run_name]['first_result_s']:.2f} s")
            if run_name == "cold":
                left = {name: _count_files(cache / folder)
                        for name, folder in (("autotune_files", "autotune"), ("kernel_files", "kernels"),
                                             ("jax_files", "jax"), ("triton_files", "triton"))}
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    cold, cached = runs["cold"]["first_result_s"], runs["cached"]["first_result_s"]
    return {
        "op": op_name, "harness": "workbench.bench --first-call", "command": command,
        "interpreted": launch.INTERPRET, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": device_info(), "versions": versions(), "git": git_state(), "shape_set": shape_set,
        "shapes": [dict(s) for s in op.shape_sets[shape_set]], "dtype": op.dtype,
        "first_call": {"cold_s": cold, "cached_s": cached, "ratio": cached / cold, "goal_ratio": FIRST_CALL_GOAL,
                       "met": cached <= FIRST_CALL_GOAL * cold, "cache_left": left, "environment": settings,
                       "table": {"folder": str(table_folder), "device_entries": table_entries},
                       "child": argv[1:] if child is None else argv, "runs": runs},
        "seconds": time.perf_counter() - t_start, "complete": True,
    }


def _count_files(folder: Path) -> int:
    return sum(1 for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


def _first_call_process(argv, env, n_shapes: int, timeout: float | None) -> dict[str, Any]:
    """Run one child; seconds from just before its start to each protocol line it prints."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)  # stderr: the child's warnings, shown
    marks: list[tuple[float, dict[str, Any]]] = []
    other: list[str] = []
    try:
        for line in proc.stdout:
            if line.startswith(_MARK):
                marks.append((time.perf_counter() - t0, json.loads(line[len(_MARK):])))
            else:
                other.append(line.rstrip())
        code = proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    results = [t for t, m in marks if "shape" in m]
    done = next((m for _, m in marks if m.get("done")), None)
    if code != 0 or len(results) != n_shapes or done is None:
        raise RuntimeError(f"first-call child {' '.join(argv)} exited with {code} after {len(results)} of "
                           f"{n_shapes} results; its stdout ended: {' | '.join(other[-5:])}")
    return {"startup_s": next((t for t, m in marks if m.get("ready")), None), "result_s": results,
            "first_result_s": results[-1], "exit_s": time.perf_counter() - t0, "stats": done.get("stats", {})}


def first_call_child(op_name: str, shape_set: str) -> None:
    """The measured process of `first_call`: prints a protocol line once imported, one per shape's first
    forward+backward result (awaited), and one with `workbench.autotune.STATS` at the end."""
    from .. import autotune

    print(_MARK + json.dumps({"ready": True}), flush=True)
    op = OPS[op_name]
    for i, shape in enumerate(op.shape_sets[shape_set]):
        inputs = op.inputs(shape, jnp.dtype(op.dtype), i)
        # the cotangents' shapes from the reference, as `run` does: tracing the Triton forward alone would
        # compile (and tune) its forward-only kernels, which a forward+backward never runs
        outputs = jax.eval_shape(jax_calls(op, "reference", inputs, []).forward)
        cotangents = testing.random_cotangents(1000 + i, outputs)
        jax.block_until_ready(jax_calls(op, "triton", inputs, cotangents).forward_backward())
        print(_MARK + json.dumps({"shape": i}), flush=True)
    print(_MARK + json.dumps({"done": True, "stats": dict(autotune.STATS)}), flush=True)

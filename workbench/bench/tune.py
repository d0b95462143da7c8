"""`workbench tune --write-table`: tune every autotuned kernel of the ops at their bench shapes on this GPU and
merge the choices into the package's tuning table (`workbench/tuning/<device>.json`, `tuning_table`).

Each op's Triton forward and forward+backward run once per shape under `WORKBENCH_AUTOTUNE=refresh` with a
fresh temporary autotune cache, so every kernel they launch is timed over its candidates (`autotune.call`);
the cache's entries then become table entries, merged into the device's file (an entry of the same kernel,
source, Triton version, key values and arrays is replaced). Shapes: the op's shape sets named, each at the
dtypes and head dimensions asked for (a head dimension replaces K and V, or D). The table is reviewed like
code: commit the file.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp

from .. import autotune, launch, testing, tuning_table
from .records import Refused
from .specs import OPS
from .timing import jax_calls, say


def shapes_of(op_name: str, shape_sets: Sequence[str], head_dims: Sequence[int] = ()) -> list[dict[str, int]]:
    """The shapes of the named sets, each also at every head dimension in `head_dims` (K = V, or D)."""
    op = OPS[op_name]
    out = []
    for name in shape_sets:
        if name not in op.shape_sets:
            raise ValueError(f"--shapes: {op_name} has no shape set {name!r}; known: {', '.join(op.shape_sets)}")
        for shape in op.shape_sets[name]:
            variants = [dict(shape)] + [{**shape, **({"D": d} if "D" in shape else {"K": d, "V": d})}
                                        for d in head_dims]
            out += [s for s in variants if s not in out]
    return out


def write_table(ops: Sequence[str], shape_sets: Sequence[str], *, dtypes: Sequence[str] = (),
                head_dims: Sequence[int] = (), folder: Path = tuning_table.FOLDER) -> Path:
    """Tune, then merge into this device's table file; returns its path."""
    if launch.INTERPRET:
        raise Refused("no CUDA GPU: the interpreter times nothing, and a table is a GPU's choices")
    unknown = sorted(set(ops) - set(OPS))
    if unknown:
        raise ValueError(f"--op: unknown op(s) {', '.join(unknown)}; known: {', '.join(OPS)}")
    device = jax.devices()[0].device_kind
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="workbench-tune-") as cache:
        saved = {v: os.environ.get(v) for v in (autotune.CACHE_VAR, autotune.MODE_VAR)}
        os.environ[autotune.CACHE_VAR], os.environ[autotune.MODE_VAR] = cache, "refresh"
        try:
            for op_name in ops:
                op = OPS[op_name]
                for dtype in dtypes or (op.dtype,):
                    for i, shape in enumerate(shapes_of(op_name, shape_sets, head_dims)):
                        inputs = op.inputs(shape, jnp.dtype(dtype), i)
                        forward = jax_calls(op, "reference", inputs, []).forward
                        cotangents = testing.random_cotangents(1000 + i, jax.eval_shape(forward))
                        calls = jax_calls(op, "triton", inputs, cotangents)
                        calls.block(calls.forward())
                        calls.block(calls.forward_backward())
                        say(f"[{time.perf_counter() - start:7.1f} s] {op_name} {dtype} "
                            f"{' '.join(f'{k}={v}' for k, v in shape.items())}: tuned")
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        entries = tuning_table.entries_from_store(Path(cache) / "autotune")
    table = tuning_table.Table.load(device, folder).merged(entries)
    path = table.write(folder)
    say(f"{len(entries)} choices of {device} merged into {path} ({len(table.entries)} entries)")
    return path

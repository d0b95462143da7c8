"""`workbench bench --data-parallel`: an op's forward and forward+backward with its batch split over every visible
device, against one device running its share of the batch.

For each shape of the set (B divisible by the n devices), on the same inputs and cotangents:

    sharded  the op under `jax.jit` on a mesh of the n devices (`AxisType.Explicit`, axis "data"), every
             input and cotangent batch-sharded over it: the op runs per device (`_sharding.per_device`);
    share    the op under `jax.jit` on device 0 with the first B / n batch rows (what each device has).

`ratio = sharded / share` is 1 for perfect data parallelism (the target is ≤ 1.1): what the sharded run adds
is the partitioning of the program (and any collective it needs: none for these ops, which the record checks
by counting the collectives in the compiled forward+backward). The errors of the sharded outputs and
gradients against the same computation on one device with the whole batch are recorded too.

The record goes to `<out>/data_parallel/<op>-<stamp>.json` (`records.write`): `op, harness, command,
interpreted, date, device, device_count, mesh, versions, git, shape_set, dtype, iters, reps, warmup, target,
results`; each result has `shape, pass, sharded_ms, share_ms, ratio, collectives, errors`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from .. import launch, testing
from .harness import output_errors
from .machine import device_info, git_state, versions
from .records import DEFAULT_OUT, Refused
from .specs import OPS
from .timing import WARMUP, jax_calls, jitted_passes, say, time_ms

TARGET_RATIO = 1.1
OUT = DEFAULT_OUT / "data_parallel"
COLLECTIVES = ("all-gather", "all-to-all", "all-reduce", "collective-permute", "reduce-scatter")


def run(op_name: str, shape_set: str = "target", *, iters: int = 10, reps: int = 1, command: str = "",
        devices: int | None = None, shapes=None) -> dict[str, Any]:
    """Time `op_name` data-parallel over `devices` (default every visible one) and return the record.
    shapes: explicit shapes instead of the set's (a smoke test's small batch)."""
    if op_name not in OPS:
        raise ValueError(f"--op: unknown op {op_name!r} for --data-parallel; known: {', '.join(OPS)}")
    op = OPS[op_name]
    if shapes is None and shape_set not in op.shape_sets:
        raise ValueError(f"--shapes: {op_name} has no shape set {shape_set!r}; known: {', '.join(op.shape_sets)}")
    shapes = op.shape_sets[shape_set] if shapes is None else shapes
    n = devices or jax.device_count()
    if n < 2:
        raise Refused(f"--data-parallel needs two or more devices, this process sees {jax.device_count()}")
    if launch.INTERPRET and shape_set not in op.cpu_shape_sets and all(s["T"] > 64 for s in shapes):
        raise Refused(f"no CUDA GPU: shape set {shape_set!r} of {op_name} would take hours in the interpreter; use "
                      f"--shapes {' or '.join(op.cpu_shape_sets)} for a smoke test (XLA_FLAGS="
                      "--xla_force_host_platform_device_count=2), or run on GPUs")
    warmup = 1 if launch.INTERPRET else WARMUP
    mesh = jax.make_mesh((n,), ("data",), axis_types=(AxisType.Explicit,), devices=jax.devices()[:n])
    t_start = time.perf_counter()
    results = []
    for i, shape in enumerate(shapes):
        if shape["B"] % n:
            raise ValueError(f"--shapes: {op_name} {shape_set} has B = {shape['B']}, not divisible by {n} devices")
        inputs = op.inputs(shape, jnp.dtype(op.dtype), i)
        cotangents = testing.random_cotangents(1000 + i, jax.eval_shape(jax_calls(op, "reference", inputs, []).forward))
        share_inputs = {k: _rows(x, shape["B"] // n) for k, x in inputs.items()}
        share = jax_calls(op, "triton", share_inputs, [_rows(c, shape["B"] // n) for c in cotangents])
        whole = jax_calls(op, "triton", inputs, cotangents)
        with jax.set_mesh(mesh):
            sharded_inputs = {k: _batch_sharded(x, mesh) for k, x in inputs.items()}
            sharded = jax_calls(op, "triton", sharded_inputs, [_batch_sharded(c, mesh) for c in cotangents])
            label = " ".join(f"{k}={v}" for k, v in shape.items())
            rows = {}
            for pass_ in ("forward", "forward_backward"):
                call = getattr(sharded, pass_)
                rows[pass_] = time_ms(call, sharded.block, iters, warmup, reps)
            got = sharded.to_numpy(rows["forward_backward"][1])
            hlo = _compiled_text(op, sharded_inputs, [_batch_sharded(c, mesh) for c in cotangents])
        want = whole.to_numpy(whole.forward_backward())
        errors = output_errors(op.names, got, want)
        collectives = {c: len(re.findall(rf"\b{c}(-start)?\(", hlo)) for c in COLLECTIVES}
        for pass_ in ("forward", "forward_backward"):
            share_ms, _ = time_ms(getattr(share, pass_), share.block, iters, warmup, reps)
            sharded_ms = rows[pass_][0]
            ratio = sharded_ms["median"] / share_ms["median"]
            results.append({"shape": dict(shape), "pass": pass_, "sharded_ms": sharded_ms, "share_ms": share_ms,
                            "ratio": ratio, "meets_target": ratio <= TARGET_RATIO, "collectives": collectives,
                            "errors": errors if pass_ == "forward_backward" else
                            {k: v for k, v in errors.items() if k in op.outputs}})
            say(f"[{time.perf_counter() - t_start:7.1f} s] {op_name} {label} {pass_}: {n} devices "
                f"{sharded_ms['median']:.3f} ms, one device with B/{n} {share_ms['median']:.3f} ms, ratio {ratio:.3f}")
    return {
        "op": op_name, "harness": "workbench.bench.data_parallel", "command": command,
        "interpreted": launch.INTERPRET, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": device_info(), "device_count": n, "mesh": {"data": n, "axis_types": "explicit"},
        "versions": versions(), "git": git_state(), "shape_set": shape_set, "shapes": [dict(s) for s in shapes],
        "dtype": op.dtype, "iters": iters,
        "reps": reps, "warmup": warmup, "target": TARGET_RATIO, "results": results,
        "seconds": time.perf_counter() - t_start,
    }


def _rows(x, b: int):
    """The first b batch rows of an array (scalars and flags pass)."""
    return x[:b] if hasattr(x, "shape") and getattr(x, "ndim", 0) else x


def _batch_sharded(x, mesh):
    """An array with its batch (first) dimension sharded over the mesh's "data" axis (others pass)."""
    if not hasattr(x, "shape") or not getattr(x, "ndim", 0):
        return x
    return jax.device_put(x, NamedSharding(mesh, P("data", *([None] * (x.ndim - 1)))))


def _compiled_text(op, inputs: Mapping[str, Any], cotangents) -> str:
    """The compiled forward+backward program that `jax_calls` times, as text, to count its collectives."""
    (_, forward_backward), args = jitted_passes(op, "triton", inputs, cotangents)
    return forward_backward.lower(*args).compile().as_text()


def table(record: Mapping[str, Any]) -> str:
    lines = [f"{record['op']} data-parallel on {record['device_count']} × {record['device']['kind']} "
             f"({record['dtype']}), "
             f"ratio = sharded / one device with its share (target ≤ {record['target']})"]
    for r in record["results"]:
        moved = {c: k for c, k in r["collectives"].items() if k}
        worst = max((e["rms_rel"] for e in r["errors"].values()), default=0.0)
        lines.append(f"  {' '.join(f'{k}={v}' for k, v in r['shape'].items())} {r['pass']:16s} sharded "
                     f"{r['sharded_ms']['median']:8.3f} ms  share {r['share_ms']['median']:8.3f} ms  ratio "
                     f"{r['ratio']:.3f}  collectives {moved or 'none'}  rms-rel {worst:.1e}")
    if record["interpreted"]:
        lines.append("  INTERPRETED: timings meaningless")
    return "\n".join(lines)

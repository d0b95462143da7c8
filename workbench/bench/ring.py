"""`workbench bench --op ring_attention`: weak scaling of ring attention over the visible devices.

L tokens per device (target: L = 32768, causal, bfloat16, B = 1, H = 16, D = 128). For each ring
size m = 1, 2, 4, … up to the number of visible devices n (and n itself), and each layout:

    ring    `ring_attention` inside `shard_map` over the first m devices, on inputs already
            sharded in the layout's order (the zigzag reordering is the caller's, not timed),
            forward and forward+backward (`jax.vjp`, a random cotangent), Triton kernels;
    single  `flash_attention` (Triton) on the gathered sequence T = m·L on one device.

The per-device share of the work is 1/m of the causal attention over T (NOTES.md ring.8: T(T+1)/2
query-key pairs over m devices); its single-GPU time is taken as single / m, and

    efficiency = (single / m) / ring,     target ≥ 0.8.

A perfectly balanced ring with free communication reaches 1; the contiguous causal layout is
bounded by m / (2m − 1) (its busiest device computes almost m blocks, the average m/2).

Each record also carries the errors of the ring against the single-device run on the same inputs
(max |Δ| and RMS relative, o and each gradient, in float32 on device), and `overlap`: for every
asynchronous collective-permute of the compiled forward+backward ring, the kernels (conditionals,
custom calls) XLA scheduled between its start and done. On a CPU, collective-permutes are
synchronous and only the `tiny` shape set runs (interpreted Triton, timings meaningless).

The record is one new JSON file `<out>/ring_attention-<UTC timestamp>.json` (`records.write`):
`op, harness, command, interpreted, date, device, device_count, versions, git, shape_set, shape,
dtype, iters, reps, warmup, xla_flags, target_efficiency, definitions, results`; each result has
`devices, layout, pass, shape, ring_ms, single_ms, share_ms, efficiency, meets_target, errors,
overlap`.
"""

from __future__ import annotations

import functools
import os
import re
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import workbench

from .. import launch, testing
from ..ring_attention import schedule
from .machine import device_info, git_state, versions
from .records import Refused
from .timing import WARMUP, say, time_ms

TARGET_EFFICIENCY = 0.8
SHAPE_SETS = {
    "target": dict(B=1, L=32768, H=16, D=128, causal=True),   # the ring issue's weak-scaling target
    "tiny": dict(B=1, L=16, H=2, D=16, causal=True),          # CPU smoke test (interpreter)
}
CPU_SHAPE_SETS = ("tiny",)
LAYOUTS = schedule.LAYOUTS
DEFINITIONS = {
    "ring_ms": "ring_attention inside shard_map over `devices` devices, inputs pre-sharded in the layout's order",
    "single_ms": "flash_attention (Triton) on the gathered sequence T = devices·L on one device",
    "share_ms": "single_ms / devices: the single-device time of one device's share (1/devices of the causal "
                "work over T, NOTES.md ring.8)",
    "efficiency": "share_ms / ring_ms (target ≥ 0.8)",
}


def ring_sizes(n: int) -> list[int]:
    """1, 2, 4, … below n, and n."""
    sizes = [1 << e for e in range(n.bit_length()) if 1 << e < n]
    return sizes + [n]


def run(shape_set: str = "target", *, iters: int = 10, reps: int = 1, layouts: Sequence[str] = LAYOUTS,
        sizes: Sequence[int] | None = None, command: str = "") -> dict[str, Any]:
    """Time the ring and the single-device flash for each ring size and layout; return the record."""
    if shape_set not in SHAPE_SETS:
        raise ValueError(f"--shapes: ring_attention has no shape set {shape_set!r}; known: {', '.join(SHAPE_SETS)}")
    if iters < 1:
        raise ValueError(f"--iters: must be ≥ 1, got {iters}")
    if reps < 1:
        raise ValueError(f"--reps: must be ≥ 1, got {reps}")
    if launch.INTERPRET and shape_set not in CPU_SHAPE_SETS:
        raise Refused(f"no CUDA GPU: Triton runs in its interpreter here, where shape set {shape_set!r} of "
                            f"ring_attention would take hours and time nothing; use --shapes tiny for a smoke test")
    if launch.INTERPRET:
        say("warning: Triton is interpreted on this CPU: the timings are meaningless (smoke test only)")
    shape = SHAPE_SETS[shape_set]
    n = jax.device_count()
    sizes = ring_sizes(n) if sizes is None else list(sizes)
    warmup = 1 if launch.INTERPRET else WARMUP
    t_start = time.perf_counter()
    results = []
    for m in sizes:
        mesh = Mesh(np.array(jax.devices()[:m]), ("sp",))
        single = _single(shape, m, iters, warmup, reps)
        for layout in layouts:
            for row in _ring_rows(shape, mesh, layout, single, iters, warmup, reps):
                results.append(row)
                say(f"[{time.perf_counter() - t_start:7.1f} s] ring_attention {m} device(s) {layout} "
                           f"{row['pass']}: ring {row['ring_ms']['median']:.3f} ms, share "
                           f"{row['share_ms']:.3f} ms, efficiency {row['efficiency']:.2f}")
    return {
        "op": "ring_attention", "harness": "workbench.bench.ring", "command": command,
        "interpreted": launch.INTERPRET, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": device_info(), "device_count": n, "versions": versions(), "git": git_state(),
        "shape_set": shape_set, "shape": dict(shape), "dtype": "bfloat16", "iters": iters, "reps": reps,
        "warmup": warmup, "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "partitioner": "shardy" if jax.config.jax_use_shardy_partitioner else "gspmd",
        "target_efficiency": TARGET_EFFICIENCY,
        "definitions": DEFINITIONS, "results": results, "seconds": time.perf_counter() - t_start,
    }


def _inputs(shape, T: int, seed: int = 0):
    """q, k, v and a cotangent for the gathered sequence, bfloat16, on device 0."""
    ks = jax.random.split(jax.random.key(seed), 4)
    dims = (shape["B"], T, shape["H"], shape["D"])
    return [jax.random.normal(k, dims, jnp.float32).astype(jnp.bfloat16) for k in ks]


def _single(shape, m: int, iters: int, warmup: int, reps: int) -> dict[str, Any]:
    """flash_attention on the gathered sequence on device 0: times and outputs of both passes."""
    T = m * shape["L"]
    q, k, v, do = jax.device_put(_inputs(shape, T), jax.devices()[0])
    attend = functools.partial(workbench.flash_attention, causal=shape["causal"])
    fwd = jax.jit(attend)
    fwd_bwd = jax.jit(lambda q, k, v, do: testing.vjp_all(attend, (q, k, v), do))
    fwd_ms, o = time_ms(lambda: fwd(q, k, v), jax.block_until_ready, iters, warmup, reps)
    fb_ms, (_, grads) = time_ms(lambda: fwd_bwd(q, k, v, do), jax.block_until_ready, iters, warmup, reps)
    return {"inputs": (q, k, v, do), "forward": (fwd_ms, (o,)), "forward_backward": (fb_ms, (o, *grads))}


def _ring_rows(shape, mesh: Mesh, layout: str, single, iters: int, warmup: int, reps: int):
    m = mesh.size
    T = m * shape["L"]
    order = schedule.sequence_order(T, m, layout)
    spec = PartitionSpec(None, "sp")
    sharding = NamedSharding(mesh, spec)
    q, k, v, do = (jax.device_put(x[:, order], sharding) for x in single["inputs"])
    ring = jax.shard_map(functools.partial(workbench.ring_attention, axis_name="sp", causal=shape["causal"],
                                           layout=layout), mesh=mesh, in_specs=(spec,) * 3, out_specs=spec)
    fwd = jax.jit(ring)
    fwd_bwd = jax.jit(lambda q, k, v, do: testing.vjp_all(ring, (q, k, v), do))
    overlap = overlap_report(fwd_bwd.lower(q, k, v, do).compile().as_text())
    fwd_ms, o = time_ms(lambda: fwd(q, k, v), jax.block_until_ready, iters, warmup, reps)
    fb_ms, (o_fb, grads) = time_ms(lambda: fwd_bwd(q, k, v, do), jax.block_until_ready, iters, warmup, reps)
    device0 = jax.devices()[0]
    for pass_, ring_ms, got in (("forward", fwd_ms, (o,)), ("forward_backward", fb_ms, (o_fb, *grads))):
        single_ms, want = single[pass_]
        names = ("o", "dq", "dk", "dv")[:len(got)]
        errors = {name: _error(jax.device_put(g, device0), w[:, order]) for name, g, w in zip(names, got, want)}
        share = single_ms["median"] / m
        efficiency = share / ring_ms["median"]
        yield {"devices": m, "layout": layout, "pass": pass_, "shape": dict(shape, T=T), "ring_ms": ring_ms,
               "single_ms": single_ms, "share_ms": share, "efficiency": efficiency,
               "meets_target": efficiency >= TARGET_EFFICIENCY, "errors": errors, "overlap": overlap}


@jax.jit
def _error_terms(got, want):
    got, want = got.astype(jnp.float32), want.astype(jnp.float32)
    diff = got - want
    return jnp.max(jnp.abs(diff)), jnp.sqrt(jnp.mean(diff ** 2)), jnp.sqrt(jnp.mean(want ** 2))


def _error(got, want) -> dict[str, float]:
    """max |Δ| and RMS-relative error, in float32 on the device (the arrays are large)."""
    worst, rms, scale = (float(x) for x in _error_terms(got, want))
    return {"max_abs": worst, "rms_rel": rms / scale if scale > 0 else rms}


_START = re.compile(r"^\s*(?:ROOT\s+)?(%?[\w.\-]+)\s*=.*\bcollective-permute-start\(")
_DONE = re.compile(r"\bcollective-permute-done\(\s*(?:[^%)]*\s)?(%?[\w.\-]+)\s*\)")
_COMPUTE = re.compile(r"=\s*.*?\b(conditional|custom-call)\(")


def overlap_report(hlo: str) -> dict[str, Any]:
    """Which kernels the compiled program runs while each collective-permute is in flight.

    hlo: `compiled.as_text()`, scheduled (instructions in execution order). In its ENTRY
    computation, for every `collective-permute-start` … `collective-permute-done` pair, counts the
    `conditional` and `custom-call` instructions (a ring step's branches, Triton kernels) between
    the two. Returns {async_permutes, overlapped (pairs with ≥ 1 kernel between), kernels_between
    (per pair, in program order)}.
    """
    entry = _entry_computation(hlo)
    open_starts: dict[str, int] = {}
    between: list[int] = []
    for line in entry:
        if (start := _START.search(line)) is not None:
            open_starts[start.group(1).lstrip("%")] = 0
            continue
        if (done := _DONE.search(line)) is not None:
            name = done.group(1).lstrip("%")
            if name in open_starts:
                between.append(open_starts.pop(name))
            continue
        if _COMPUTE.search(line) is not None:
            for name in open_starts:
                open_starts[name] += 1
    return {"async_permutes": len(between), "overlapped": sum(1 for b in between if b > 0),
            "kernels_between": between}


def _entry_computation(hlo: str) -> list[str]:
    lines = hlo.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("ENTRY")), None)
    if start is None:
        return []
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("}")), len(lines))
    return lines[start + 1:end]


def table(record: dict[str, Any]) -> str:
    """One line per (devices, layout, pass)."""
    head = ("devices", "layout", "pass", "ring ms", "single ms", "share ms", "efficiency", "target", "overlap",
            "max rms-rel")
    rows = []
    for r in record["results"]:
        ov = r["overlap"]
        rows.append((str(r["devices"]), r["layout"], "fwd" if r["pass"] == "forward" else "fwd+bwd",
                     f"{r['ring_ms']['median']:.3f}", f"{r['single_ms']['median']:.3f}", f"{r['share_ms']:.3f}",
                     f"{r['efficiency']:.2f}", "ok" if r["meets_target"] else "MISSED",
                     f"{ov['overlapped']}/{ov['async_permutes']}",
                     f"{max(e['rms_rel'] for e in r['errors'].values()):.2e}"))
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(head)]
    line = lambda cells: "  ".join(c.ljust(w) if i < 3 else c.rjust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    dev = record["device"]
    shape = record["shape"]
    out = [line(head), line(["-" * w for w in widths]), *map(line, rows),
           f"ring_attention {record['shape_set']} L={shape['L']} per device, B={shape['B']} H={shape['H']} "
           f"D={shape['D']} causal={shape['causal']} bfloat16 on {record['device_count']} × {dev['kind']}; "
           f"{record['iters']} samples of {record['reps']} call(s); overlap = async collective-permutes with "
           f"kernels between start and done" + (" — INTERPRETED: timings meaningless" if record["interpreted"]
                                               else "")]
    return "\n".join(out)

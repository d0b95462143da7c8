"""Timing one call on the device: warm-up, samples of back-to-back calls, median/min/p90, or of n copies of
it in one program (`--timer copies`), or the device's own span of that program's kernels in a profiler trace
(`--timer device`); the op's calls as bench times them."""

from __future__ import annotations

import dataclasses
import glob
import gzip
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import device_time
from .spec import OpBench, PeerCalls


WARMUP = 2
TIMERS = ("calls", "copies", "device")
ESTIMATE_ITERS = 3  # samples of the plain call that size `--timer copies`
COPIES_BYTES = 4 << 30  # at most this much input and output for all copies of a pass in one program


def settle(fn: Callable[[], Any], block: Callable[[Any], Any], seconds: float) -> int:
    """Run `fn` back to back (each call waited for) until `seconds` have passed; the calls made. A GPU at its power
    limit lowers its clocks within a second or two of sustained work: samples taken after this see the clocks the
    work holds, not the ones an idle GPU starts it at (NOTES of flash_attention, "The Hopper forward")."""
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        block(fn())
        calls += 1
    return calls


def time_ms(fn: Callable[[], Any], block: Callable[[Any], Any], iters: int,
            warmup: int = WARMUP, reps: int = 1, settle_s: float = 0.0) -> tuple[dict[str, float], Any]:
    """Median, min and p90 over `iters` samples after `warmup` calls (and then `settle_s` seconds of calls,
    `settle`); and the last result.

    A sample is `reps` calls issued back to back and one wait for the device, divided by `reps`.
    With reps = 1 every call pays the host's launch and synchronisation latency (on the H200 we
    use, about 0.8 ms per call, as much as a 4k-token attention forward); larger reps amortise it,
    so the figure approaches the device time of one call.
    """
    for _ in range(warmup):
        block(fn())
    settle(fn, block, settle_s)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        for _ in range(reps):
            out = fn()
        block(out)
        times.append((time.perf_counter() - t0) * 1e3 / reps)
    times.sort()
    p90 = times[min(len(times) - 1, math.ceil(0.9 * len(times)) - 1)]
    return {"median": statistics.median(times), "min": times[0], "p90": p90}, out


def time_copies_ms(copies: Callable[[int], tuple[Callable[[], Any], int]], plain: Callable[[], Any],
                   block: Callable[[Any], Any], iters: int, warmup: int = WARMUP,
                   reps: int = 1, settle_s: float = 0.0) -> tuple[dict[str, float], Any, int]:
    """(median/min/p90 ms per copy, the plain call's last result, n): `time_ms` of one program that runs the
    call n times (`copies(n)` → (that call, the n it could hold)), divided by n.

    A jitted program of a few tenths of a millisecond, called back to back, can be paced by the host (its
    dispatch, argument handling and synchronisation) rather than the device; `--reps` hides that only
    when one call outlasts the dispatch of the next. n copies in one program are one dispatch: n =
    `device_time.copies_for` the plain call's best time (⌈CHAIN_MS / it⌉, at most MAX_CHAIN; 1 for a call
    of CHAIN_MS or more) over ESTIMATE_ITERS samples after its warm-up, and fewer
    where their inputs and outputs would pass COPIES_BYTES. That estimate is the host's pace where the
    host is the slower: the copies then hold less than CHAIN_MS of the device's work, so n is sized again
    from the best time per copy of those samples, and the program of the larger n timed instead. `settle_s`:
    seconds of the timed program's calls before its samples (`settle`).
    """
    estimate, out = time_ms(plain, block, ESTIMATE_ITERS, warmup, reps)
    call, n = copies(device_time.copies_for(estimate["min"]))
    ms, _ = time_ms(call, block, iters, 1, reps, settle_s)
    wanted = device_time.copies_for(ms["min"] / n)
    if wanted > n:
        more, m = copies(wanted)
        if m > n:
            call, n = more, m
            ms, _ = time_ms(call, block, iters, 1, reps, settle_s)
    return {k: v / n for k, v in ms.items()}, out, n


def time_device_ms(copies: Callable[[int], tuple[Callable[[], Any], int]], plain: Callable[[], Any],
                   block: Callable[[Any], Any], iters: int, warmup: int = WARMUP,
                   settle_s: float = 0.0) -> tuple[dict[str, float], Any, int]:
    """(median/min/p90 ms per copy, the plain call's last result, n): the program of n copies that
    `time_copies_ms` times (n sized the same way from the plain call), each of `iters` calls timed by the
    device itself — the span from its first kernel's start to its last kernel's end in a profiler trace
    (`device_spans`) — divided by n.

    A wall-clock sample of one call also holds what the host does before the device starts and after it ends
    (dispatching the program, handling each copy's argument and output buffers, waiting for the device), a cost
    that grows with n and that a training step, whose arrays are its own program's, does not pay per
    operation. On an H200 (2026-11-30, `scripts/op_profile.py --copies`, `scripts/copies_latency.py`):
    chunk_gla's forward+backward at its target, 6 copies, 1.333 ms per copy by the wall clock where the span
    of the device's events was 1.185 with no gap between them; t(n) ≈ 0.3 ms + n · 1.32 by the wall clock.
    The span keeps every gap between the calls' kernels (a host too slow to keep the device fed shows there)
    and leaves out the rest.
    """
    estimate, out = time_ms(plain, block, ESTIMATE_ITERS, warmup)
    call, n = copies(device_time.copies_for(estimate["min"]))
    block(call())
    settle(call, block, settle_s)
    spans = sorted(ms / n for ms in device_spans([call], [0] * iters, block))
    p90 = spans[min(len(spans) - 1, math.ceil(0.9 * len(spans)) - 1)]
    return {"median": statistics.median(spans), "min": spans[0], "p90": p90}, out, n


def device_timer_available() -> bool:
    """Whether `--timer device` can time here: a GPU's kernels leave events in JAX's profiler trace; a CPU's
    computations leave none."""
    return any(d.platform == "gpu" for d in jax.devices())


def device_events(trace_dir: str) -> list[tuple[float, float, str]]:
    """(start ms, duration ms, name) of the GPU events of the perfetto trace under `trace_dir`, by start."""
    paths = glob.glob(f"{trace_dir}/**/perfetto_trace.json.gz", recursive=True)
    if len(paths) != 1:
        raise RuntimeError(f"{trace_dir}: expected one perfetto_trace.json.gz from the profiler, found {len(paths)}")
    with gzip.open(paths[0]) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    gpu_pids = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
                and "/device:GPU" in str(e.get("args", {}).get("name", ""))}
    return sorted((e["ts"] / 1e3, e["dur"] / 1e3, e["name"]) for e in events
                  if e.get("ph") == "X" and e.get("pid") in gpu_pids and "dur" in e)


def traced_events(calls: Sequence[Callable[[], Any]], block: Callable[[Any], Any]) -> list[tuple[float, float, str]]:
    """`device_events` of the calls made one after the other, each waited for, under one profiler trace."""
    with tempfile.TemporaryDirectory() as tmp:
        jax.profiler.start_trace(tmp, create_perfetto_trace=True)
        try:
            for call in calls:
                block(call())
        finally:
            jax.profiler.stop_trace()
        return device_events(tmp)


def split_calls(events: Sequence[tuple[float, float, str]], order: Sequence[int],
                names: Sequence[Sequence[str]]) -> list[float]:
    """ms from the first event's start to the last event's end of each call in a trace of calls made one after
    the other: call j is of program order[j], whose one call gives the events named names[order[j]], in that
    order. RuntimeError where the events are not those calls' (a kernel missing, added or out of order)."""
    spans, at = [], 0
    for j, i in enumerate(order):
        group = events[at:at + len(names[i])]
        if not names[i] or [name for _, _, name in group] != list(names[i]):
            raise RuntimeError(f"timer 'device': call {j} of program {i} did not leave the events its single "
                               f"call leaves ({len(names[i])} GPU events expected, the trace's {at}-{at + len(group)}"
                               f" differ); the trace cannot be split into calls")
        spans.append(max(t + d for t, d, _ in group) - group[0][0])
        at += len(group)
    if at != len(events):
        raise RuntimeError(f"timer 'device': the trace holds {len(events) - at} GPU events beyond its calls' "
                           f"{at}; the trace cannot be split into calls")
    return spans


def device_spans(programs: Sequence[Callable[[], Any]], order: Sequence[int],
                 block: Callable[[Any], Any]) -> list[float]:
    """The device's ms of each call programs[i], i in `order`, made one after the other under one trace: each
    program's single traced call first names its events (`split_calls`). RuntimeError without GPU events (a
    CPU has none: the timer needs a GPU)."""
    names = [[name for _, _, name in traced_events([program], block)] for program in programs]
    if not all(names):
        raise RuntimeError("timer 'device': a call left no GPU events in the profiler trace (it times kernels "
                           "on a GPU; use --timer calls or copies elsewhere)")
    return split_calls(traced_events([programs[i] for i in order], block), order, names)


def paired_device_samples(programs: Sequence[tuple[Callable[[], Any], int]], block: Callable[[Any], Any],
                          rounds: int, settle_s: float = 0.0) -> list[list[float]]:
    """`paired_samples` timed by the device (`device_spans`): the same rounds and order, one trace for all."""
    for call, _ in programs:
        block(call())
    for call, _ in programs:
        settle(call, block, settle_s / len(programs))
    order = [i for r in range(rounds)
             for i in (range(len(programs)) if r % 2 == 0 else reversed(range(len(programs))))]
    spans = device_spans([call for call, _ in programs], order, block)
    samples: list[list[float]] = [[] for _ in programs]
    for i, ms in zip(order, spans):
        samples[i].append(ms / programs[i][1])
    return samples


def paired_samples(programs: Sequence[tuple[Callable[[], Any], int]], block: Callable[[Any], Any],
                   rounds: int, settle_s: float = 0.0) -> list[list[float]]:
    """ms per copy of each (program, copies it runs) over `rounds` rounds: a round takes one sample of every
    program, back to back, in an order that reverses every other round, so that a drift of the device's clocks
    (a warm GPU slows) weighs on each program alike. Each program runs once first (compiled, warm), then each for
    settle_s / len(programs) seconds (`settle`)."""
    for call, _ in programs:
        block(call())
    for call, _ in programs:
        settle(call, block, settle_s / len(programs))
    samples: list[list[float]] = [[] for _ in programs]
    for r in range(rounds):
        for i in (range(len(programs)) if r % 2 == 0 else reversed(range(len(programs)))):
            call, n = programs[i]
            t0 = time.perf_counter()
            block(call())
            samples[i].append((time.perf_counter() - t0) * 1e3 / n)
    return samples


def jax_calls(op: OpBench, implementation: str, inputs: Mapping[str, jax.Array],
              cotangents: Sequence[jax.Array], **options) -> PeerCalls:
    """The op's forward and forward+backward (`jax.vjp`, the given cotangents) under `jax.jit`;
    `options` go to the op's call (e.g. `tuning=`)."""
    (fwd, fwd_bwd), (primals, cts) = jitted_passes(op, implementation, inputs, cotangents, **options)
    return dataclasses.replace(pair_calls(fwd, fwd_bwd, primals, cts), kept=lambda: kept_bytes(fwd, primals))


def kept_bytes(forward: Callable[[dict[str, jax.Array]], Any], primals: Mapping[str, jax.Array]) -> tuple[int, int]:
    """(bytes of the arrays `jax.vjp(forward)` keeps for the backward — its pullback's residuals, the inputs it
    saves among them —, bytes of the inputs and the outputs), traced abstractly: nothing runs."""
    def trace(p):
        out, pullback = jax.vjp(forward, p)
        return out, jax.tree.leaves(pullback)

    out, residuals = jax.eval_shape(trace, dict(primals))
    return nbytes(residuals), nbytes(dict(primals)) + nbytes(out)


def nbytes(tree) -> int:
    """Bytes of every array (or abstract array) in a pytree."""
    return sum(x.size * jnp.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


def pair_calls(fwd: Callable, fwd_bwd: Callable, primals: Mapping[str, jax.Array],
               cts: Sequence[jax.Array]) -> PeerCalls:
    """`PeerCalls` of a `jitted_pair` (the op's own calls and JAX peers alike), with `copies` for
    `--timer copies`."""
    return PeerCalls(forward=lambda: fwd(primals), forward_backward=lambda: fwd_bwd(primals, cts),
                     block=jax.block_until_ready, to_numpy=lambda out: [np.asarray(x) for x in out],
                     copies=pass_copies(fwd, fwd_bwd, primals, cts))


def pass_copies(fwd: Callable, fwd_bwd: Callable, primals: Mapping[str, jax.Array],
                cts: Sequence[jax.Array]) -> Callable[[str, int], tuple[Callable[[], Any], int]]:
    """`PeerCalls.copies` of a `jitted_pair`: (pass, n) → (a call of one jitted program that runs that pass
    n times, the n it runs).

    XLA sees a Triton launch as a pure function of its operands: copies of a pass on the same arguments
    would be merged into one, and a copy whose outputs go unused removed. So each copy gets its own
    copy of the arguments (separate buffers, made once, outside the timed program: distinct parameters
    XLA cannot merge) and the program returns every copy's outputs (none can be dropped). Nothing is
    added between the copies. (Linking copies through one input, as `device_time.chained` does for a
    single launch, is not enough here: a pass has kernels that do not read that input, and outputs the
    link does not read.) n is lowered so that the copies' arguments and outputs stay under COPIES_BYTES.
    The Triton launches stay one per copy; XLA may still fuse small XLA operations of different copies side
    by side (horizontal fusion), so the glue around the launches can cost a little less per copy than alone.
    """
    passes = {"forward": (fwd, (dict(primals),)), "forward_backward": (fwd_bwd, (dict(primals), tuple(cts)))}

    def copies(pass_: str, n: int) -> tuple[Callable[[], Any], int]:
        f, args = passes[pass_]
        out = jax.eval_shape(f, *args)
        per_copy = nbytes((args, out))
        n = max(1, min(n, COPIES_BYTES // max(per_copy, 1)))
        separate = [jax.tree.map(jnp.copy, args) for _ in range(n)]
        program = jax.jit(lambda separate: [f(*a) for a in separate])
        return (lambda: program(separate)), n

    return copies


def jitted_passes(op: OpBench, implementation: str, inputs: Mapping[str, jax.Array],
                  cotangents: Sequence[jax.Array], **options):
    """`jitted_pair` of the op's call: what `jax_calls` runs, for a caller that lowers the programs
    (`data_parallel` reads their collectives)."""
    rest = {n: x for n, x in inputs.items() if n not in op.differentiable}

    def forward(primals):
        return tuple(op.call(implementation, **primals, **rest, **options))

    return jitted_pair(forward, {n: inputs[n] for n in op.differentiable}, cotangents)


def jitted_pair(forward: Callable[[dict[str, jax.Array]], tuple], primals: Mapping[str, jax.Array],
                cotangents: Sequence[jax.Array]):
    """((forward(primals), forward_backward(primals, cotangents)) under `jax.jit`, (primals, cotangents)):
    forward_backward is `jax.vjp` of `forward` pulled back by the cotangents, returning the outputs and
    the gradients in the order of `primals`."""
    order = tuple(primals)

    def forward_backward(p, cts):
        outputs, pullback = jax.vjp(forward, p)
        (grads,) = pullback(cts)
        return (*outputs, *(grads[n] for n in order))

    # the cotangents are arguments, as a training step's are: closed over, they would be constants of the
    # program, folded and embedded by XLA at compile time (seconds at the targets' sizes)
    return (jax.jit(forward), jax.jit(forward_backward)), (dict(primals), tuple(cotangents))


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)

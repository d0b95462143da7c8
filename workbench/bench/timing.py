"""Timing one call on the device: warm-up, samples of back-to-back calls, median/min/p90; the op's calls as bench times them."""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from .spec import OpBench, PeerCalls


WARMUP = 2


def time_ms(fn: Callable[[], Any], block: Callable[[Any], Any], iters: int,
            warmup: int = WARMUP, reps: int = 1) -> tuple[dict[str, float], Any]:
    """Median, min and p90 over `iters` samples after `warmup` calls; and the last result.

    A sample is `reps` calls issued back to back and one wait for the device, divided by `reps`.
    With reps = 1 every call pays the host's launch and synchronisation latency (on the H200 we
    use, about 0.8 ms per call, as much as a 4k-token attention forward); larger reps amortise it,
    so the figure approaches the device time of one call.
    """
    for _ in range(warmup):
        block(fn())
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


def jax_calls(op: OpBench, implementation: str, inputs: Mapping[str, jax.Array],
              cotangents: Sequence[jax.Array], **options) -> PeerCalls:
    """The op's forward and forward+backward (`jax.vjp`, the given cotangents) under `jax.jit`;
    `options` go to the op's call (e.g. `tuning=`)."""
    (fwd, fwd_bwd), (primals, cts) = jitted_passes(op, implementation, inputs, cotangents, **options)
    return PeerCalls(forward=lambda: fwd(primals), forward_backward=lambda: fwd_bwd(primals, cts),
                     block=jax.block_until_ready, to_numpy=lambda out: [np.asarray(x) for x in out])


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

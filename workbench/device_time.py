"""A launch's time on the device, for the autotuner (`workbench.autotune`): calls of the launch compiled
into one program, back to back, and calls too short for that as a chain of copies in one program
(docs/autotune.md, "Timing")."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

SAMPLES, REPS = 3, 5  # a config's time: the best of SAMPLES means of REPS calls issued back to back
CHAIN_MS, MAX_CHAIN = 2.0, 64  # shorter calls are timed chained in one program


def time_on_device(run: Callable[[Sequence[Any]], Any], inputs: Sequence[Any]) -> float:
    """ms of the device's work per call of `run(inputs)`, always timed as a compiled program.

    `run` is jitted once (`chained(run, inputs, 1)`); its first call compiles (and raises for a config that cannot
    launch). Then the best of SAMPLES means of REPS calls of the program issued back to back before one
    wait: the device's time when a call outlasts the dispatch of the next one. Eager calls are not
    timed: an eager launch builds its call on the host every time (8-15 ms for chunk_kda's backward
    kernels on an H200, longer than their 4-9 ms on the device), so back-to-back eager calls timed the
    host, and its choices made an op 1.41x slower (docs/autotune.md, "Timing"). A call
    shorter than CHAIN_MS may still not outlast a dispatch (at B = 1 and short sequences a kernel takes
    tens of µs): such a call is *chained*, `chained(run, inputs, n)`, n copies of it in one program with
    n = ⌈CHAIN_MS / its ms⌉ (at most MAX_CHAIN); its time is the best of SAMPLES runs over n.
    """
    import jax

    program, arrays = chained(run, inputs, 1)
    jax.block_until_ready(program(arrays))
    one = math.inf
    for _ in range(SAMPLES):
        t0 = time.perf_counter()
        for _ in range(REPS):
            out = program(arrays)
        jax.block_until_ready(out)
        one = min(one, (time.perf_counter() - t0) * 1e3 / REPS)
    if one >= CHAIN_MS:
        return one
    n = copies_for(one)
    made = chained(run, inputs, n) if n > 1 else None
    if made is None:
        return one
    program, arrays = made
    jax.block_until_ready(program(arrays))
    best = math.inf
    for _ in range(SAMPLES):
        t0 = time.perf_counter()
        jax.block_until_ready(program(arrays))
        best = min(best, (time.perf_counter() - t0) * 1e3 / n)
    return best


def copies_for(ms: float) -> int:
    """How many copies of a call of `ms` make CHAIN_MS of work: ⌈CHAIN_MS / ms⌉, between 1 and MAX_CHAIN."""
    return min(MAX_CHAIN, max(1, math.ceil(CHAIN_MS / max(ms, 1e-3))))


def chained(run: Callable[[Sequence[Any]], Any], inputs: Sequence[Any], n: int):
    """(jitted program, its arguments): `run(inputs)` n times in a row in one program, or, for n > 1, None
    when no input is a non-empty floating array (n = 1 needs no link).

    XLA sees a launch as a pure function of its operands: n copies of one call on the same inputs would
    be merged into one (an optimization barrier does not stop it; it is expanded away first), and a
    copy whose outputs go unused removed. So before each copy after the first, one element of the first
    floating input is rewritten in place (`dynamic_update_slice`) with itself plus 0 × one element of
    the previous copy's first output: every copy has its own operand and needs the one before, at the
    cost of a one-element update between launches. The program returns the last copy's outputs. Inputs
    that are not arrays (scalars) stay Python values, as `run` was given them.

    For one launch only: every kernel of `run` must read that input and produce that output. A program
    of several kernels (a kernel that does not read it would be merged across copies; one whose outputs
    the link does not read, dropped) is timed by `workbench.bench.timing.pass_copies` instead."""
    import jax
    import jax.numpy as jnp

    where = [i for i, x in enumerate(inputs) if isinstance(x, jax.Array)]
    carrier = next((j for j, i in enumerate(where)
                    if jnp.issubdtype(inputs[i].dtype, jnp.floating) and math.prod(inputs[i].shape) > 0), None)
    if carrier is None and n > 1:
        return None

    def program(arrays):
        arrays, xs = list(arrays), list(inputs)
        out = None
        for step in range(n):
            if step:
                a = arrays[carrier]
                corner = (0,) * a.ndim
                link = jnp.ravel(jax.tree.leaves(out)[0])[:1].astype(a.dtype).reshape((1,) * a.ndim)
                first = jax.lax.slice(a, corner, (1,) * a.ndim)
                arrays[carrier] = jax.lax.dynamic_update_slice(a, first + 0 * link, corner)
            for i, x in zip(where, arrays):
                xs[i] = x
            out = run(xs)
        return out

    return jax.jit(program), [inputs[i] for i in where]

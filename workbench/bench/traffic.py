"""Each kernel launch of an op's pass, with the bytes of the arrays it is handed and the arrays it returns,
each counted once: the traffic its kernels cannot avoid, launch by launch (a kernel that reads an operand
several times, or only part of it, moves more or less; scalars and the `absent()` placeholders count 0).

Traced abstractly on the interpreter path (`launch.observing`): nothing runs, so the shapes may be as large as
a GPU's (T = 64k on a laptop). Where Triton is compiled, tracing a launch chooses its config (and may time
them): run it where Triton is interpreted (a machine without a GPU, or `WORKBENCH_INTERPRET=1`).
`scripts/kernel_traffic.py` prints the table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from .. import launch, signature
from .spec import OpBench
from .timing import nbytes

PASSES = ("forward", "forward_backward")


@dataclasses.dataclass(frozen=True)
class LaunchBytes:
    """One kernel launch: the kernel's name, the bytes of its array arguments and of its outputs."""

    kernel: str
    read: int
    written: int


def launch_bytes(fn: Callable[..., Any], *args: Any) -> list[LaunchBytes]:
    """The launches of `fn(*args)` in the order they are traced, with their bytes (`jax.eval_shape`)."""
    if not launch.INTERPRET:
        raise RuntimeError("launch_bytes: Triton is compiled on this machine, where tracing a launch chooses (and "
                           "may time) its config; run it without a GPU or with WORKBENCH_INTERPRET=1")
    seen: list[launch.Launch] = []
    with launch.observing(seen.append):
        jax.eval_shape(fn, *args)
    rows = []
    for s in seen:
        _, _, jitted = signature.unwrap(s.kernel)
        bases = [a.base if isinstance(a, signature.TensorDescriptor) else a for a in s.args]  # a descriptor's array
        arrays = [a for a in bases if signature.is_array(a) and launch.is_given(a)]
        rows.append(LaunchBytes(kernel=jitted.__name__, read=nbytes(arrays), written=nbytes(list(s.out_shapes))))
    return rows


def pass_traffic(op: OpBench, shape: Mapping[str, int], dtype: Any, pass_: str,
                 options: Mapping[str, Any] | None = None) -> list[LaunchBytes]:
    """`launch_bytes` of the op's Triton path on the bench's inputs at `shape` (abstract), for `pass_`: "forward",
    or "forward_backward" (cotangents for every output)."""
    if pass_ not in PASSES:
        raise ValueError(f"pass_: expected one of {', '.join(PASSES)}, got {pass_!r}")
    inputs = jax.eval_shape(lambda: op.inputs(shape, dtype, 0))
    names = list(op.differentiable)

    def forward(primals, rest):
        return op.call("triton", **primals, **rest, **dict(options or {}))

    def forward_backward(primals, rest):
        out, pullback = jax.vjp(lambda p: forward(p, rest), primals)
        return out, pullback(jax.tree.map(jnp.ones_like, out))

    primals = {n: inputs[n] for n in names}
    rest = {n: v for n, v in inputs.items() if n not in names}
    return launch_bytes(forward if pass_ == "forward" else forward_backward, primals, rest)

"""What `workbench bench` knows of an op (`OpBench`) and of a peer library's kernel for it (`Peer`, `PeerCalls`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np


@dataclasses.dataclass(frozen=True)
class Peer:
    """Another library's kernel for the op's math.

    module: imported first; if that fails the peer is recorded as "not installed" (an ImportError) or
        "import failed" (anything else), with the reason, and the run goes on.
    setup: `setup(inputs, cotangents)` → `PeerCalls` on the same inputs (converted as it needs).
    runtime: the framework it runs on ("torch" or "jax"), whose version the record keeps.
    interpretable: its Triton kernels can also be launched through `workbench.launch`, so on a machine
        without CUDA they run in Triton's interpreter like ours and the CPU smoke run checks its
        input mapping (the error column); otherwise a `needs_cuda` peer is skipped there.
    """

    name: str
    module: str
    setup: Callable[[Mapping[str, jax.Array], Sequence[jax.Array]], PeerCalls]
    needs_cuda: bool = True
    runtime: str = "torch"
    interpretable: bool = False


@dataclasses.dataclass(frozen=True)
class PeerCalls:
    """forward() → outputs; forward_backward() → outputs + gradients (in `OpBench` order);
    block(result) waits for the device; to_numpy(result) → list of arrays.

    copies: for a contender that is one jitted JAX program per pass, `copies(pass_, n)` → (a call of one
    program that runs that pass n times, each copy on its own arguments, the n it runs), for `--timer
    copies` (`timing.pass_copies`); None for the others (torch peers), which are then timed by calls.
    kept: for a JAX contender, what its forward keeps for the backward (`timing.kept_bytes`); None for others.
    """

    forward: Callable[[], Any]
    forward_backward: Callable[[], Any]
    block: Callable[[Any], None]
    to_numpy: Callable[[Any], list[np.ndarray]]
    copies: Callable[[str, int], tuple[Callable[[], Any], int]] | None = None
    kept: Callable[[], tuple[int, int]] | None = None  # (residual bytes, input + output bytes): timing.kept_bytes


@dataclasses.dataclass(frozen=True)
class OpBench:
    """An op as `bench` sees it.

    shape_sets: name → shapes (dicts of dimension sizes); cpu_shape_sets: those the interpreter may run.
    inputs: `inputs(shape, dtype, seed)` → keyword arguments of the op; `differentiable` of them get gradients.
    call: `call(implementation, **inputs, **options)` → tuple of outputs named `outputs`; the option `library`
        is the workbench package whose op runs (default this one; another checkout's: `against`).
    bytes: `bytes(shape, dtype)` → (forward, forward+backward) bytes read and written once, estimated.
    flops: `flops(shape)` → (forward, forward+backward) matmul FLOPs, for compute-bound ops (attention).
    variants: other static choices of the Triton path, timed beside it when "triton" runs, as
        `triton[<name>]` rows (kind "kernel", never a peer): name → keyword options of `call`.
    max_T: implementation or peer name → (the largest T it is run at, why). Past it the row is not
        attempted (dense O(T²) attention, the reference's autodiff memory) and the record lists it under
        "skipped" with the reason; the limits themselves are recorded under "limits". Sized for the
        op's shape sets (B·H = 16 at the long sequence lengths).
    error_sources: where the reference does not run at a shape, errors are measured against the first of
        these (independent implementations) measured there; with none, the rows are "unchecked".
    variant_needs: variant name → `needs()`, why this machine cannot run the variant (None: it can). Such a
        variant is not attempted and the record lists it under "skipped" with the reason.
    """

    shape_sets: Mapping[str, tuple[Mapping[str, int], ...]]
    cpu_shape_sets: tuple[str, ...]
    dtype: str
    inputs: Callable[[Mapping[str, int], Any, int], dict[str, jax.Array]]
    differentiable: tuple[str, ...]
    outputs: tuple[str, ...]
    call: Callable[..., tuple]
    bytes: Callable[[Mapping[str, int], Any], tuple[int, int]]
    peers: tuple[Peer, ...] = ()
    notes: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    flops: Callable[[Mapping[str, int]], tuple[float, float]] | None = None
    variants: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    max_T: Mapping[str, tuple[int, str]] = dataclasses.field(default_factory=dict)
    error_sources: tuple[str, ...] = ()
    variant_needs: Mapping[str, Callable[[], str | None]] = dataclasses.field(default_factory=dict)

    def skip_reason(self, name: str, shape: Mapping[str, int]) -> str | None:
        """Why `name` is not run at `shape` under `max_T`, or on this machine (`variant_needs`), or None."""
        if name in self.max_T and shape["T"] > self.max_T[name][0]:
            limit, why = self.max_T[name]
            return f"T={shape['T']} > {limit}: {why}"
        variant = name[len("triton["):-1] if name.startswith("triton[") and name.endswith("]") else None
        if variant in self.variant_needs:
            return self.variant_needs[variant]()
        return None

    def trace(self, shape: Mapping[str, int], dtype: Any, options: Mapping[str, Any] | None = None) -> None:
        """Trace the Triton path's forward+backward (ones as cotangents) and its forward alone at `shape`,
        abstractly (`jax.eval_shape`: no kernel runs), with `options` passed to every call: what a launch
        observer (`launch.observing`, `compile_check.record`) sees of the op at that shape."""
        import jax.numpy as jnp

        options = dict(options or {})
        dtype = jnp.dtype(dtype)
        inputs = jax.eval_shape(lambda: {n: x for n, x in self.inputs(shape, dtype, 0).items() if hasattr(x, "dtype")})
        tiny = {n: 16 for n in shape if n in ("T", "Tq", "Tk")}  # the non-array inputs without the full arrays
        fixed = {n: x for n, x in self.inputs({**shape, **tiny}, dtype, 0).items() if not hasattr(x, "dtype")}
        wrt = [n for n in self.differentiable if n in inputs]
        rest = {n: x for n, x in inputs.items() if n not in wrt}

        def both(primals):
            out, pullback = jax.vjp(lambda *xs: self.call("triton", **rest, **fixed, **dict(zip(wrt, xs)), **options),
                                    *primals)
            return pullback(jax.tree.map(jnp.ones_like, out))

        jax.eval_shape(both, [inputs[n] for n in wrt])
        jax.eval_shape(lambda arrays: self.call("triton", **arrays, **fixed, **options), inputs)

    @property
    def names(self) -> tuple[str, ...]:
        """Outputs then gradients: what a forward+backward returns, in order."""
        return self.outputs + tuple("d" + n for n in self.differentiable)


def parse_shape(text: str) -> dict[str, int]:
    """A shape from the command line, "B=1,T=65536,H=16" → {"B": 1, "T": 65536, "H": 16} (scripts' --shape)."""
    shape = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        try:
            shape[name.strip()] = int(value)
        except ValueError:
            raise ValueError(f"--shape: expected NAME=INT pairs, got {part!r} in {text!r}") from None
    return shape

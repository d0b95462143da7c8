"""`workbench bench`: forward and forward+backward timings of each op, appended to `data/bench/`.

For every shape of a named shape set, on the same random inputs and random cotangents (one for
every output, final states included), the harness times

    triton     the op with `implementation="triton"` under `jax.jit`;
    reference  the pure-JAX reference under `jax.jit`;
    peers      other libraries' kernels for the same math (`--peers`), imported lazily: a peer that
               is not installed, or needs CUDA on a machine without it, is recorded with its status
               and the run goes on.

Each (shape, implementation, pass) gets the median, min and p90 of `iters` timed calls after two
warm-up calls (compilation, autotuning; one in the interpreter), an achieved bandwidth from an
estimate of the bytes read and written once, its fraction of the device's peak when known, the ratio to the best peer measured
in the same run, and its error against the reference's output on the same inputs (max |Δ| and RMS
relative, per output and gradient). An implementation whose RMS-relative error exceeds
`WRONG_RMS_REL[dtype]` is marked WRONG and not ranked.

On a CPU Triton runs in its interpreter: only the shape sets an op lists in `cpu_shape_sets` run
(as a smoke test, the record marked `"interpreted": true`); others are refused (`Refused`).

Each run writes ONE new file `<out>/<op>-<UTC timestamp>.json`, never overwriting one. Its keys:
`op, harness, command, interpreted, date, device {name, kind, platform, driver, peak_bytes_per_s},
versions, git {commit, dirty}, shape_set, shapes, dtype, iters, implementations, peers, results`;
each result has `shape, implementation, pass, ms {median, min, p90}, bytes, gb_per_s,
fraction_of_peak, flops, tflops_per_s (attention; None elsewhere), ratio_to_best_peer, errors {name: {max_abs, rms_rel}}, status` (ok | WRONG).

Adding an op: write its input factory, its call, its byte estimate and its peers, and add an
`OpBench` to `OPS`.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import triton

import workbench

from . import launch, testing

IMPLEMENTATIONS = ("triton", "reference")
WARMUP = 2
WRONG_RMS_REL = {"bfloat16": 5e-2, "float16": 2e-2, "float32": 1e-3}
PEAK_BYTES_PER_S = {"H100": 3.35e12, "H200": 4.8e12}
DEFAULT_OUT = Path("data/bench")


class Refused(Exception):
    """The run was not started (a shape set too large for the Triton interpreter, a file exists)."""


# ----------------------------------------------------------------------------- registry


@dataclasses.dataclass(frozen=True)
class Peer:
    """Another library's kernel for the op's math.

    module: imported first; if that fails the peer is recorded as "not installed".
    setup: `setup(inputs, cotangents)` → `PeerCalls` on the same inputs (converted as it needs).
    """

    name: str
    module: str
    setup: Callable[[Mapping[str, jax.Array], Sequence[jax.Array]], PeerCalls]
    needs_cuda: bool = True


@dataclasses.dataclass(frozen=True)
class PeerCalls:
    """forward() → outputs; forward_backward() → outputs + gradients (in `OpBench` order);
    block(result) waits for the device; to_numpy(result) → list of arrays."""

    forward: Callable[[], Any]
    forward_backward: Callable[[], Any]
    block: Callable[[Any], None]
    to_numpy: Callable[[Any], list[np.ndarray]]


@dataclasses.dataclass(frozen=True)
class OpBench:
    """An op as `bench` sees it.

    shape_sets: name → shapes (dicts of dimension sizes); cpu_shape_sets: those the interpreter may run.
    inputs: `inputs(shape, dtype, seed)` → keyword arguments of the op; `differentiable` of them get gradients.
    call: `call(implementation, **inputs, **options)` → tuple of outputs named `outputs`.
    bytes: `bytes(shape, dtype)` → (forward, forward+backward) bytes read and written once, estimated.
    flops: `flops(shape)` → (forward, forward+backward) matmul FLOPs, for compute-bound ops (attention).
    variants: other static choices of the Triton path, timed beside it when "triton" runs, as
        `triton[<name>]` rows (kind "kernel", never a peer): name → keyword options of `call`.
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

    @property
    def names(self) -> tuple[str, ...]:
        """Outputs then gradients: what a forward+backward returns, in order."""
        return self.outputs + tuple("d" + n for n in self.differentiable)


def _recurrent_inputs(shape, dtype, seed):
    B, T, H, K, V = (shape[n] for n in "BTHKV")
    return testing.recurrent_inputs(seed, B, T, H, K, V, dtype=dtype, gates=("gk",), strength=0.1,
                                    initial_state=False)


def _recurrent_call(implementation, q, k, v, gk, **options):
    return workbench.recurrent(q, k, v, gk=gk, implementation=implementation, **options)  # looked up per call


def _recurrent_bytes(shape, dtype):
    """q, k, gk [B,T,H,K] and v [B,T,H,V] read; o written, final_state (float32) written.
    Backward: inputs, do and dht read again, one gradient per input written."""
    B, T, H, K, V = (shape[n] for n in "BTHKV")
    size = jnp.dtype(dtype).itemsize
    inputs = (3 * B * T * H * K + B * T * H * V) * size
    o = B * T * H * V * size
    state = B * H * K * V * 4
    forward = inputs + o + state
    return forward, forward + (inputs + o + state) + inputs


def _torch_triton_cache() -> None:
    """Peers launch Triton from torch, which needs `triton.knobs.cache.dir`; it is empty on some
    machines (the GPU image this project benchmarks on), and then every launch fails."""
    if not triton.knobs.cache.dir:
        triton.knobs.cache.dir = os.environ.get("TRITON_CACHE_DIR") or tempfile.mkdtemp(prefix="triton-cache-")


def _fla_gla(function: str, gate: str):
    """A peer setup for flash-linear-attention's `fla.ops.gla.<function>`, the per-key log-decay passed
    as its argument `gate` (`gk` for fused_recurrent_gla, `g` for chunk_gla)."""

    def setup(inputs, cotangents) -> PeerCalls:
        import torch

        _torch_triton_cache()
        fn = getattr(importlib.import_module("fla.ops.gla"), function)

        def to_torch(x, grad=False):
            t = torch.from_dlpack(jax.device_put(x, jax.devices()[0])).cuda().contiguous()
            return t.detach().requires_grad_(grad)

        q, k, v, gk = (to_torch(inputs[n], grad=True) for n in ("q", "k", "v", "gk"))
        do, dht = (to_torch(c) for c in cotangents)

        def forward():
            return tuple(fn(q, k, v, **{gate: gk}, output_final_state=True))

        def forward_backward():
            o, ht = forward()
            return (o, ht, *torch.autograd.grad((o, ht), (q, k, v, gk), (do, dht)))

        return PeerCalls(forward=forward, forward_backward=forward_backward,
                         block=lambda _: torch.cuda.synchronize(),
                         to_numpy=lambda out: [t.detach().float().cpu().numpy() for t in out])

    return setup


RECURRENT = OpBench(
    shape_sets={
        "target": (dict(B=8, T=4096, H=16, K=64, V=64),),  # the foundation issue's target
        # 1k … 16k tokens: past that the reference's autodiff (every state stored) exceeds GPU memory,
        # and the reference is what the errors are measured against.
        "sweep": tuple(dict(B=1, T=2 ** e, H=16, K=64, V=64) for e in range(10, 15)),
        "tiny": (dict(B=1, T=16, H=2, K=8, V=8),),
    },
    cpu_shape_sets=("tiny",),
    dtype="bfloat16",
    inputs=_recurrent_inputs,
    differentiable=("q", "k", "v", "gk"),
    outputs=("o", "final_state"),
    call=_recurrent_call,
    bytes=_recurrent_bytes,
    peers=(Peer("fla.ops.gla.fused_recurrent_gla", "fla", _fla_gla("fused_recurrent_gla", "gk")),),
    notes={"gates": ["gk"], "gate_strength": 0.1, "targets_ms": {"target": {"forward": 3.6,
                                                                             "forward_backward": 8.0}}},
)

def _chunk_gla_call(implementation, q, k, v, gk, **options):
    return workbench.chunk_gla(q, k, v, gk=gk, implementation=implementation, **options)  # looked up per call


CHUNK_GLA = OpBench(
    shape_sets={
        "target": (dict(B=8, T=4096, H=16, K=64, V=64),),  # the chunk_gla issue's target
        # 1k … 16k tokens: the reference's autodiff holds [chunks, 64, 64, H, K] ratio tensors
        "sweep": tuple(dict(B=1, T=2 ** e, H=16, K=64, V=64) for e in range(10, 15)),
        "tiny": (dict(B=1, T=40, H=2, K=16, V=16),),
    },
    cpu_shape_sets=("tiny",),
    dtype="bfloat16",
    inputs=_recurrent_inputs,
    differentiable=("q", "k", "v", "gk"),
    outputs=("o", "final_state"),
    call=_chunk_gla_call,
    bytes=_recurrent_bytes,
    peers=(Peer("fla.ops.gla.chunk_gla", "fla", _fla_gla("chunk_gla", "g")),),
    notes={"gates": ["gk"], "gate_strength": 0.1, "chunk_size": 64,
           "targets_ms": {"target": {"forward": 0.72, "forward_backward": 3.0}}},
)


def _kda_inputs(shape, dtype, seed):
    from .kda.inputs import kda_inputs

    B, T, H, K, V = (shape[n] for n in "BTHKV")
    return kda_inputs(seed, B, T, H, K, V, dtype=dtype, strength=0.5, initial_state=False)


def _chunk_kda_call(implementation, q, k, v, g, beta, **options):
    return workbench.chunk_kda(q, k, v, g, beta, implementation=implementation, **options)  # looked up per call


def _kda_bytes(shape, dtype):
    """`_recurrent_bytes` (q, k, g, v read; o and the state written; the backward reads them again and
    writes one gradient per input) plus β [B,T,H] read, and its gradient written."""
    B, T, H = (shape[n] for n in "BTH")
    forward, forward_backward = _recurrent_bytes(shape, dtype)
    beta = B * T * H * jnp.dtype(dtype).itemsize
    return forward + beta, forward_backward + 3 * beta


def _fla_chunk_kda(inputs, cotangents) -> PeerCalls:
    """flash-linear-attention's `fla.ops.kda.chunk_kda` on the same inputs (natural-log per-key decays g)."""
    import torch

    _torch_triton_cache()
    fn = importlib.import_module("fla.ops.kda").chunk_kda

    def to_torch(x, grad=False):
        t = torch.from_dlpack(jax.device_put(x, jax.devices()[0])).cuda().contiguous()
        return t.detach().requires_grad_(grad)

    q, k, v, g, beta = (to_torch(inputs[n], grad=True) for n in ("q", "k", "v", "g", "beta"))
    do, dht = (to_torch(c) for c in cotangents)

    def forward():
        return tuple(fn(q, k, v, g=g, beta=beta, output_final_state=True))

    def forward_backward():
        o, ht = forward()
        return (o, ht, *torch.autograd.grad((o, ht), (q, k, v, g, beta), (do, dht)))

    return PeerCalls(forward=forward, forward_backward=forward_backward, block=lambda _: torch.cuda.synchronize(),
                     to_numpy=lambda out: [t.detach().float().cpu().numpy() for t in out])


def _chunk_kda_bench() -> OpBench:
    from .kda import Tuning

    return OpBench(
        shape_sets={
            "target": (dict(B=8, T=4096, H=16, K=128, V=128),),  # the KDA issue's target
            "sweep": tuple(dict(B=1, T=2 ** e, H=16, K=128, V=128) for e in range(10, 15)),
            "tiny": (dict(B=1, T=40, H=2, K=16, V=16),),
        },
        cpu_shape_sets=("tiny",),
        dtype="bfloat16",
        inputs=_kda_inputs,
        differentiable=("q", "k", "v", "g", "beta"),
        outputs=("o", "final_state"),
        call=_chunk_kda_call,
        bytes=_kda_bytes,
        peers=(Peer("fla.ops.kda.chunk_kda", "fla", _fla_chunk_kda),),
        variants={"unfused backward": {"tuning": Tuning(fused_backward=False)}},
        notes={"gate_strength": 0.5, "keys": "L2-normalised", "chunk_size": 64,
               "targets_ms": {"target": {"forward": 1.75, "forward_backward": 10.0}},
               "fused_vs_unfused": "forward_backward of triton vs triton[unfused backward]: same forward, the "
                                   "difference is the fused WY + dq/dk/dg kernel against its two halves"},
    )


def _attention_inputs(shape, dtype, seed):
    B, T, H, D = (shape[n] for n in "BTHD")
    ks = jax.random.split(jax.random.key(seed), 3)
    q, k, v = (jax.random.normal(kk, (B, T, H, D), jnp.float32).astype(dtype) for kk in ks)
    return dict(q=q, k=k, v=v, causal=bool(shape["causal"]))


def _attention_call(implementation, q, k, v, causal, **options):
    return (workbench.flash_attention(q, k, v, causal=causal, implementation=implementation, **options),)


def _attention_bytes(shape, dtype):
    """q, k, v read and o written once; backward: q, k, v, o, do read, dq, dk, dv written."""
    B, T, H, D = (shape[n] for n in "BTHD")
    x = B * T * H * D * jnp.dtype(dtype).itemsize
    return 4 * x, 4 * x + 8 * x


def _attention_flops(shape):
    """4·B·H·T²·D for the two forward matmuls (half when causal); the backward is 2.5× that."""
    B, T, H, D = (shape[n] for n in "BTHD")
    forward = 4 * B * H * T * T * D * (0.5 if shape["causal"] else 1.0)
    return forward, 3.5 * forward


def _dot_product_attention(implementation: str):
    """`jax.nn.dot_product_attention` with a fixed backend, as a peer on the same inputs."""

    def setup(inputs, cotangents) -> PeerCalls:
        causal = inputs["causal"]

        def forward(p):
            return (jax.nn.dot_product_attention(p["q"], p["k"], p["v"], is_causal=causal,
                                                 implementation=implementation),)

        def forward_backward(p):
            out, pullback = jax.vjp(forward, p)
            (grads,) = pullback(tuple(cotangents))
            return (*out, grads["q"], grads["k"], grads["v"])

        primals = {n: inputs[n] for n in ("q", "k", "v")}
        fwd, fwd_bwd = jax.jit(forward), jax.jit(forward_backward)
        return PeerCalls(forward=lambda: fwd(primals), forward_backward=lambda: fwd_bwd(primals),
                         block=jax.block_until_ready, to_numpy=lambda out: [np.asarray(x) for x in out])

    return setup


FLASH_ATTENTION = OpBench(
    shape_sets={
        # the flash-attention issue's targets, causal and not
        "target": (dict(B=4, T=4096, H=16, D=128, causal=1), dict(B=4, T=4096, H=16, D=128, causal=0)),
        # 1k … 8k tokens: the dense reference (the error source) holds B·H·T² float32 logits
        "sweep": tuple(dict(B=1, T=2 ** e, H=16, D=128, causal=c) for c in (1, 0) for e in range(10, 14)),
        "tiny": (dict(B=1, T=32, H=2, D=16, causal=1),),
    },
    cpu_shape_sets=("tiny",),
    dtype="bfloat16",
    inputs=_attention_inputs,
    differentiable=("q", "k", "v"),
    outputs=("o",),
    call=_attention_call,
    bytes=_attention_bytes,
    flops=_attention_flops,
    peers=(Peer("jax.nn.dot_product_attention[cudnn]", "jax", _dot_product_attention("cudnn")),
           Peer("jax.nn.dot_product_attention[xla]", "jax", _dot_product_attention("xla"), needs_cuda=False)),
    notes={"targets_ms": {"causal": {"forward": 1.5, "forward_backward": 4.6},
                          "non_causal": {"forward": 1.9, "forward_backward": 6.3}}},
)

OPS: dict[str, OpBench] = {"recurrent": RECURRENT, "chunk_gla": CHUNK_GLA, "chunk_kda": _chunk_kda_bench(),
                            "flash_attention": FLASH_ATTENTION}


# ----------------------------------------------------------------------------- timing


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
    diff = op.differentiable
    rest = {n: x for n, x in inputs.items() if n not in diff}

    def forward(primals):
        return tuple(op.call(implementation, **primals, **rest, **options))

    def forward_backward(primals):
        outputs, pullback = jax.vjp(lambda p: forward(p), primals)
        (grads,) = pullback(tuple(cotangents))
        return (*outputs, *(grads[n] for n in diff))

    primals = {n: inputs[n] for n in diff}
    fwd, fwd_bwd = jax.jit(forward), jax.jit(forward_backward)
    return PeerCalls(forward=lambda: fwd(primals), forward_backward=lambda: fwd_bwd(primals),
                     block=jax.block_until_ready, to_numpy=lambda out: [np.asarray(x) for x in out])


# ----------------------------------------------------------------------------- machine


def device_info() -> dict[str, Any]:
    dev = jax.devices()[0]
    driver = None
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    peak = next((b for name, b in PEAK_BYTES_PER_S.items() if name in dev.device_kind), None)
    return {"name": str(dev), "kind": dev.device_kind, "platform": dev.platform, "driver": driver,
            "peak_bytes_per_s": peak}


def versions(extra: Sequence[str] = ()) -> dict[str, str]:
    """python, jax, jaxlib, triton, jax_triton (when importable) and each module in `extra`."""
    out = {"python": platform.python_version()}
    for name in ("jax", "jaxlib", "triton", "jax_triton", "numpy", *extra):
        try:
            out[name] = getattr(importlib.import_module(name), "__version__", "unknown")
        except ImportError:
            pass
    return out


def git_state() -> dict[str, Any]:
    root = Path(__file__).resolve().parent.parent

    def git(*args):
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=20)

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode:
            return {"commit": None}
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
        return {"commit": head.stdout.strip(), "dirty": bool(dirty)}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None}


# ----------------------------------------------------------------------------- run


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _errors(names, got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> dict[str, dict[str, float]]:
    return {n: {"max_abs": testing.max_abs(g, w), "rms_rel": testing.rms_rel(g, w)}
            for n, g, w in zip(names, got, want)}


def run(op_name: str = "recurrent", shape_set: str = "target", *, iters: int = 20, reps: int = 1,
        implementations: Sequence[str] = IMPLEMENTATIONS, peers: bool = False, command: str = "",
        shapes: Sequence[Mapping[str, int]] | None = None) -> dict[str, Any]:
    """Time `op_name` over a shape set (or explicit `shapes`) and return the record (not written)."""
    if op_name not in OPS:
        raise ValueError(f"--op: unknown op {op_name!r}; known: {', '.join(OPS)}")
    op = OPS[op_name]
    if shapes is None:
        if shape_set not in op.shape_sets:
            raise ValueError(f"--shapes: {op_name} has no shape set {shape_set!r}; known: {', '.join(op.shape_sets)}")
        shapes = op.shape_sets[shape_set]
    unknown = set(implementations) - set(IMPLEMENTATIONS)
    if unknown or not implementations:
        raise ValueError(f"--implementations: expected a comma list of {', '.join(IMPLEMENTATIONS)}, "
                         f"got {','.join(implementations)!r}")
    if iters < 1:
        raise ValueError(f"--iters: must be ≥ 1, got {iters}")
    if reps < 1:
        raise ValueError(f"--reps: must be ≥ 1, got {reps}")
    if launch.INTERPRET and shape_set not in op.cpu_shape_sets:
        raise Refused(f"no CUDA GPU: Triton runs in its interpreter here, where shape set {shape_set!r} of "
                      f"{op_name} would take hours and time nothing; use --shapes "
                      f"{' or '.join(op.cpu_shape_sets)} for a smoke test, or run on a GPU")
    if launch.INTERPRET:
        _say("warning: Triton is interpreted on this CPU: the timings are meaningless (smoke test only)")

    warmup = 1 if launch.INTERPRET else WARMUP  # the interpreter neither compiles nor autotunes
    dtype = jnp.dtype(op.dtype)
    device = device_info()
    bound = WRONG_RMS_REL[op.dtype]
    peer_status: list[dict[str, Any]] = []
    active_peers: list[Peer] = []
    used_modules: list[str] = []
    for peer in op.peers if peers else ():
        try:
            importlib.import_module(peer.module)
        except ImportError:
            peer_status.append({"peer": peer.name, "status": "not installed"})
            continue
        used_modules += ["torch", peer.module]
        if peer.needs_cuda and device["platform"] != "gpu":
            peer_status.append({"peer": peer.name, "status": "skipped: needs a CUDA GPU"})
            continue
        active_peers.append(peer)

    t_start = time.perf_counter()
    results: list[dict[str, Any]] = []
    for i, shape in enumerate(shapes):
        label = " ".join(f"{n}={s}" for n, s in shape.items())
        inputs = op.inputs(shape, dtype, i)
        reference = jax_calls(op, "reference", inputs, [])
        outputs = jax.eval_shape(reference.forward)
        cotangents = testing.random_cotangents(1000 + i, outputs)
        reference = jax_calls(op, "reference", inputs, cotangents)
        want = {"forward": None, "forward_backward": None}
        fwd_bytes, fwd_bwd_bytes = op.bytes(shape, dtype)
        flops = op.flops(shape) if op.flops is not None else (None, None)
        n_out = len(op.outputs)

        contenders: list[tuple[str, str, Callable[[], PeerCalls]]] = [
            (impl, "kernel", lambda impl=impl: reference if impl == "reference"
             else jax_calls(op, impl, inputs, cotangents)) for impl in implementations]
        if "triton" in implementations:
            contenders += [(f"triton[{v}]", "kernel", lambda opts=opts: jax_calls(op, "triton", inputs, cotangents,
                                                                                  **opts))
                           for v, opts in op.variants.items()]
        contenders += [(p.name, "peer", lambda p=p: p.setup(inputs, cotangents)) for p in active_peers]
        if "reference" not in implementations:  # the errors still need it
            want["forward_backward"] = reference.to_numpy(reference.forward_backward())
            want["forward"] = want["forward_backward"][:n_out]

        shape_rows = []
        for name, kind, make in contenders:
            try:
                calls = make()
                fwd_ms, fwd_out = time_ms(calls.forward, calls.block, iters, warmup, reps)
                fb_ms, fb_out = time_ms(calls.forward_backward, calls.block, iters, warmup, reps)
            except Exception as exc:  # a peer's failure is recorded, never fatal
                if kind != "peer":
                    raise
                peer_status.append({"peer": name, "status": f"failed: {type(exc).__name__}: {exc}"[:500]})
                _say(f"[{time.perf_counter() - t_start:7.1f} s] {op_name} {label} {name}: failed ({exc})")
                continue
            got = {"forward": calls.to_numpy(fwd_out), "forward_backward": calls.to_numpy(fb_out)}
            if name == "reference":
                want = got
            for pass_, ms, nbytes, nflops in (("forward", fwd_ms, fwd_bytes, flops[0]),
                                              ("forward_backward", fb_ms, fwd_bwd_bytes, flops[1])):
                shape_rows.append({"shape": dict(shape), "implementation": name, "kind": kind, "pass": pass_,
                                   "ms": ms, "bytes": nbytes, "flops": nflops, "_got": got[pass_]})
            if kind == "peer" and not any(p["peer"] == name for p in peer_status):
                peer_status.append({"peer": name, "status": "measured"})
            _say(f"[{time.perf_counter() - t_start:7.1f} s] {op_name} {label} {name}: "
                 f"forward {fwd_ms['median']:.3f} ms, forward+backward {fb_ms['median']:.3f} ms")

        for row in shape_rows:
            got = row.pop("_got")
            names = op.names[:len(got)]
            row["errors"] = _errors(names, got, want[row["pass"]])
            worst = max((e["rms_rel"] for e in row["errors"].values()), default=0.0)
            row["status"] = "WRONG" if not worst <= bound else "ok"  # NaN is WRONG too
            seconds = row["ms"]["median"] / 1e3
            row["gb_per_s"] = row["bytes"] / seconds / 1e9
            row["tflops_per_s"] = row["flops"] / seconds / 1e12 if row["flops"] else None
            peak = device["peak_bytes_per_s"]
            row["fraction_of_peak"] = row["bytes"] / seconds / peak if peak else None
        for pass_ in ("forward", "forward_backward"):
            rows = [r for r in shape_rows if r["pass"] == pass_]
            best = min((r["ms"]["median"] for r in rows if r["kind"] == "peer" and r["status"] == "ok"), default=None)
            for r in rows:
                r["ratio_to_best_peer"] = (r["ms"]["median"] / best if best and r["status"] == "ok" else None)
        results += shape_rows

    return {
        "op": op_name, "harness": "workbench.bench", "command": command, "interpreted": launch.INTERPRET,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "device": device,
        "versions": versions(sorted(set(used_modules))), "git": git_state(),
        "shape_set": shape_set, "shapes": [dict(s) for s in shapes], "dtype": op.dtype, "iters": iters,
        "reps": reps,
        "warmup": warmup, "implementations": list(implementations), "wrong_rms_rel": bound,
        "peers": peer_status, **op.notes, "results": results, "seconds": time.perf_counter() - t_start,
    }


# ----------------------------------------------------------------------------- output


def write(record: Mapping[str, Any], out: Path = DEFAULT_OUT, stamp: str | None = None) -> Path:
    """Write `record` to a new `<out>/<op>-<UTC timestamp>.json`; refuse if that file exists."""
    stamp = stamp or datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{record['op']}-{stamp}.json"
    try:
        with path.open("x") as fh:  # exclusive: records are append-only
            json.dump(record, fh, indent=2, default=_json_default)
            fh.write("\n")
    except FileExistsError:
        raise Refused(f"{path} exists; bench records are never overwritten") from None
    return path


def _json_default(x):
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


COLUMNS = ("shape", "implementation", "pass", "median ms", "min ms", "p90 ms", "GB/s", "% peak", "TFLOP/s",
           "× best peer", "max|Δ| o", "rms-rel", "")


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def table(record: Mapping[str, Any]) -> str:
    rows = []
    for r in record["results"]:
        worst = max((e["rms_rel"] for e in r["errors"].values()), default=0.0)
        first = next(iter(r["errors"]), None)
        rows.append((" ".join(f"{n}={s}" for n, s in r["shape"].items()), r["implementation"],
                     "fwd" if r["pass"] == "forward" else "fwd+bwd",
                     _fmt(r["ms"]["median"], ".3f"), _fmt(r["ms"]["min"], ".3f"), _fmt(r["ms"]["p90"], ".3f"),
                     _fmt(r["gb_per_s"], ".1f"),
                     _fmt(None if r["fraction_of_peak"] is None else 100 * r["fraction_of_peak"], ".1f"),
                     _fmt(r.get("tflops_per_s"), ".0f"),
                     _fmt(r["ratio_to_best_peer"], ".2f"),
                     _fmt(r["errors"][first]["max_abs"] if first else None, ".2e"), _fmt(worst, ".2e"),
                     "WRONG" if r["status"] == "WRONG" else ""))
    widths = [max(len(c), *(len(row[i]) for row in rows)) if rows else len(c) for i, c in enumerate(COLUMNS)]
    line = lambda cells: "  ".join(c.rjust(w) if i >= 3 else c.ljust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    out = [line(COLUMNS), line(["-" * w for w in widths]), *map(line, rows)]
    for p in record["peers"]:
        if p["status"] != "measured":
            out.append(f"peer {p['peer']}: {p['status']}")
    dev = record["device"]
    out.append(f"{record['op']} {record['shape_set']} {record['dtype']} on {dev['kind']} ({dev['platform']}), "
               f"{record['iters']} samples of {record.get('reps', 1)} back-to-back call(s) after {record['warmup']} warm-up"
               + (" — INTERPRETED: timings meaningless" if record["interpreted"] else ""))
    return "\n".join(out)

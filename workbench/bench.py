"""`workbench bench`: forward and forward+backward timings of each op, appended to `data/bench/`.

For every shape of a named shape set, on the same random inputs and random cotangents (one for
every output, final states included), the harness times

    triton     the op with `implementation="triton"` under `jax.jit`;
    reference  the pure-JAX reference under `jax.jit`;
    peers      other libraries' kernels for the same math (`--peers`), imported lazily: a peer that
               is not installed, fails to import, or needs CUDA on a machine without it, is recorded
               with its status and reason, and the run goes on. flash-linear-attention runs on torch
               (same arrays through DLPack); ejkernel's Triton kernels and `jax.nn.dot_product_attention`
               run on JAX.

Each (shape, implementation, pass) gets the median, min and p90 of `iters` timed calls after two
warm-up calls (compilation, autotuning; one in the interpreter), an achieved bandwidth from an
estimate of the bytes read and written once, its fraction of the device's peak when known, the ratio
to the best peer measured in the same run, and its error against the reference's output on the same
inputs (max |Δ| and RMS relative, per output and gradient). An implementation whose RMS-relative
error exceeds `WRONG_RMS_REL[dtype]` is marked WRONG and not ranked.

An implementation is not run past its `OpBench.max_T` (dense attention and the references' autodiff
would not fit in memory at 64k tokens), nor after it runs out of device memory: both are recorded
under "skipped" with the reason. Where the reference does not run, the errors are measured against the
op's first `error_sources` entry measured at that shape (`error_source` on each row says which);
with none, rows are "unchecked" and not ranked.

On a CPU Triton runs in its interpreter: only the shape sets an op lists in `cpu_shape_sets` run
(as a smoke test, the record marked `"interpreted": true`); others are refused (`Refused`). Peers
whose Triton kernels `workbench.launch` can launch (ejkernel) run there in the interpreter too, so
the smoke run checks how our inputs are mapped to them.

Each run writes ONE new file `<out>/<op>-<UTC timestamp>.json`, never overwriting one. Its keys:
`op, harness, command, interpreted, date, device {name, kind, platform, driver, peak_bytes_per_s},
versions, git {commit, dirty}, shape_set, shapes, tokens (the --T filter or None), dtype, iters,
implementations, peers [{peer, status, reason?}], limits {name: {max_T, why}}, error_sources,
skipped [{shape, implementation, reason}], results`; each result has `shape, implementation, kind,
pass, ms {median, min, p90}, bytes, gb_per_s, fraction_of_peak, flops, tflops_per_s (attention; None
elsewhere), ratio_to_best_peer, error_source, errors {name: {max_abs, rms_rel}}, status` (ok | WRONG |
unchecked).

`first_call` (`workbench bench --first-call`) measures something else: the wall seconds from a fresh
process's start to its first forward+backward result at a shape set, once with empty caches and once
with what the first process left in them (`workbench.autotune`'s chosen configs and compiled kernels,
JAX's persistent compilation cache), each in a new `python -m workbench.bench --first-call-child`
process. Its records go to `<out>/first_call/` (they hold no `results` rows; see `first_call`).

Adding an op: write its input factory, its call, its byte estimate and its peers, and add an
`OpBench` to `OPS`.
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import json
import math
import os
import platform
import shutil
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
from .chunk_gla import Tuning as _GlaTuning
from .flash_attention import Tuning as _FlashTuning

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
    max_T: implementation or peer name → (the largest T it is run at, why). Past it the row is not
        attempted (dense O(T²) attention, the reference's autodiff memory) and the record lists it under
        "skipped" with the reason; the limits themselves are recorded under "limits". Sized for the
        op's shape sets (B·H = 16 at the long sequence lengths).
    error_sources: where the reference does not run at a shape, errors are measured against the first of
        these (independent implementations) measured there; with none, the rows are "unchecked".
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

    def skip_reason(self, name: str, shape: Mapping[str, int]) -> str | None:
        """Why `name` is not run at `shape` under `max_T`, or None."""
        if name in self.max_T and shape["T"] > self.max_T[name][0]:
            limit, why = self.max_T[name]
            return f"T={shape['T']} > {limit}: {why}"
        return None

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


# ----------------------------------------------------------------------------- JAX peers (ejkernel)


def _jax_peer_calls(forward: Callable[[dict[str, jax.Array]], tuple], primals: dict[str, jax.Array],
                    cotangents: Sequence[jax.Array], launched: Sequence[str] = ()) -> PeerCalls:
    """A JAX peer's forward (`forward(primals)` → outputs) and forward+backward (`jax.vjp` with the
    given cotangents; gradients in the order of `primals`), each under `jax.jit`.

    launched: modules of ejkernel that hold its `triton_call`; on a machine without CUDA they launch
    through `workbench.launch` (Triton's interpreter) while a call traces.
    """
    order = tuple(primals)

    def forward_backward(p):
        outputs, pullback = jax.vjp(forward, p)
        (grads,) = pullback(tuple(cotangents))
        return (*outputs, *(grads[n] for n in order))

    fwd, fwd_bwd = jax.jit(forward), jax.jit(forward_backward)
    if launch.INTERPRET and launched:
        fwd, fwd_bwd = (_launched_by_workbench(launched, f) for f in (fwd, fwd_bwd))
    return PeerCalls(forward=lambda: fwd(primals), forward_backward=lambda: fwd_bwd(primals),
                     block=jax.block_until_ready, to_numpy=lambda out: [np.asarray(x) for x in out])


def _ejkernel_triton_call(*args, kernel, out_shape, grid, name="", num_warps=None, num_stages=None, **metaparams):
    """ejkernel's `triton_call` convention on `workbench.launch.triton_call`.

    ejkernel evaluates a kernel's `@triton.heuristics` itself, on the abstract values of its array
    arguments and outputs (so `x != 1` is True for an array and False for the `1` it passes for a
    missing input), innermost first, and their values override the call's keywords; the plain
    `@triton.jit` function is then launched. This does the same and hands that function to our launcher.
    """
    from triton.runtime.autotuner import Heuristics

    fn, rules = kernel, []
    while isinstance(fn, Heuristics):
        rules.append(fn.values)
        fn = fn.fn
    outs = list(out_shape) if isinstance(out_shape, (list, tuple)) else [out_shape]
    abstract = [jax.ShapeDtypeStruct(a.shape, a.dtype) if isinstance(a, (jax.Array, np.ndarray)) or hasattr(a, "aval")
                else a for a in args]
    named = dict(zip(fn.arg_names, [*abstract, *(jax.ShapeDtypeStruct(o.shape, o.dtype) for o in outs)]))
    flags: dict[str, Any] = {}
    for values in reversed(rules):
        for key, rule in values.items():
            flags[key] = rule({**named, **metaparams, **flags})
    return launch.triton_call(*args, kernel=fn, out_shape=out_shape, grid=grid, name=name, num_warps=num_warps,
                              num_stages=num_stages, **{**metaparams, **flags})


def _launched_by_workbench(modules: Sequence[str], fn: Callable) -> Callable:
    """`fn` with each module's `triton_call` (ejkernel's CUDA-only launcher) replaced by
    `_ejkernel_triton_call` while it runs; the jit-traced calls keep the interpreter's callbacks."""

    def call(*args):
        loaded = [importlib.import_module(m) for m in modules]
        saved = [m.triton_call for m in loaded]
        for m in loaded:
            m.triton_call = _ejkernel_triton_call
        try:
            return fn(*args)
        finally:
            for m, original in zip(loaded, saved):
                m.triton_call = original

    return call


_EJKERNEL_RECURRENT_LAUNCH = ("ejkernel.kernels._triton.recurrent._triton_impl_fwd",
                              "ejkernel.kernels._triton.recurrent._triton_impl_bwd")
_EJKERNEL_FLASH_LAUNCH = ("ejkernel.kernels._triton.flash_attention._triton_impl_fwd",
                          "ejkernel.kernels._triton.flash_attention._triton_impl_bwd")


def _ejkernel_recurrent(inputs, cotangents) -> PeerCalls:
    """ejkernel's Triton `recurrent` (`ejkernel.kernels._triton.recurrent`, its default 64×64 state
    tiles, 4 warps, 1 stage) on the same arrays.

    Mapping: the layout is ours ([B,T,H,K], v [B,T,H,V]); its `gk` is a per-key natural-log decay
    applied as ours (S ← S·exp(gk_t) + k_t v_tᵀ, then o_t = Sᵀ(scale·q_t)); final state float32
    [B,H,K,V]. The scale is passed explicitly: with `softmax_scale=None` its custom-VJP forward rule
    (the path `jax.vjp` takes) launches the kernel with scale 1 while the plain call uses K^-0.5
    (ejkernel 0.0.80.3). Its `recurrent_gla` wrapper is not used: it hands its per-key `g` [B,T,H,K]
    to the kernel's per-head scalar gate, which reads it with stride H. Gradients come back float32.
    """
    from ejkernel.kernels._triton.recurrent import recurrent

    scale = inputs["q"].shape[-1] ** -0.5

    def forward(p):
        return tuple(recurrent(p["q"], p["k"], p["v"], gk=p["gk"], softmax_scale=scale))

    return _jax_peer_calls(forward, {n: inputs[n] for n in ("q", "k", "v", "gk")}, cotangents,
                           _EJKERNEL_RECURRENT_LAUNCH)


def _ejkernel_flash_attention(heuristic_config: bool):
    """A peer setup for ejkernel's Triton `flash_attention` (JAX): with the kernel's own defaults
    (forward tiles 128×128, 4 warps, 2 stages; backward 32×32, 4 warps), or with the GPU configuration
    `ejkernel.modules` picks by heuristic when it does not autotune (`FlashAttention.heuristic_cfg_gpu`:
    forward 64 × (32 if D ≥ 128 else 128), backward 32×32, 4 warps, 2 stages).

    Mapping: the layout is ours ([B,T,H,D]); its causal mask keeps j − (Tk − Tq) ≤ i (bottom-right, as
    ours); the scale D^-0.5 is passed explicitly. Gradients come back float32.
    """

    def setup(inputs, cotangents) -> PeerCalls:
        from ejkernel.kernels._triton.flash_attention import flash_attention
        from ejkernel.ops import BwdParams, FwdParams

        D = inputs["q"].shape[-1]
        params = {}
        if heuristic_config:
            params = dict(fwd_params=FwdParams(q_blocksize=64, kv_blocksize=32 if D >= 128 else 128, num_warps=4,
                                               num_stages=2),
                          bwd_params=BwdParams(q_blocksize=32, kv_blocksize=32, num_warps=4, num_stages=2))

        def forward(p):
            return (flash_attention(p["q"], p["k"], p["v"], causal=inputs["causal"], softmax_scale=D ** -0.5,
                                    **params),)

        return _jax_peer_calls(forward, {n: inputs[n] for n in ("q", "k", "v")}, cotangents, _EJKERNEL_FLASH_LAUNCH)

    return setup


RECURRENT = OpBench(
    shape_sets={
        "target": (dict(B=8, T=4096, H=16, K=64, V=64),),  # the foundation issue's target
        # 1k … 64k tokens; at 64k the errors are measured against the peers (max_T, error_sources)
        "sweep": tuple(dict(B=1, T=2 ** e, H=16, K=64, V=64) for e in range(10, 17)),
        "tiny": (dict(B=1, T=16, H=2, K=8, V=8),),
    },
    cpu_shape_sets=("tiny",),
    dtype="bfloat16",
    inputs=_recurrent_inputs,
    differentiable=("q", "k", "v", "gk"),
    outputs=("o", "final_state"),
    call=_recurrent_call,
    bytes=_recurrent_bytes,
    peers=(Peer("fla.ops.gla.fused_recurrent_gla", "fla", _fla_gla("fused_recurrent_gla", "gk")),
           Peer("ejkernel.recurrent[triton]", "ejkernel", _ejkernel_recurrent, runtime="jax", interpretable=True)),
    max_T={"reference": (32768, "the reference's autodiff stores every state (XLA's memory analysis: 25 GiB "
                                "at 32k, 50 GiB at 64k)")},
    error_sources=("fla.ops.gla.fused_recurrent_gla", "ejkernel.recurrent[triton]"),
    notes={"gates": ["gk"], "gate_strength": 0.1, "targets_ms": {"target": {"forward": 3.6,
                                                                             "forward_backward": 8.0}}},
)

def _chunk_gla_call(implementation, q, k, v, gk, **options):
    return workbench.chunk_gla(q, k, v, gk=gk, implementation=implementation, **options)  # looked up per call


CHUNK_GLA = OpBench(
    shape_sets={
        "target": (dict(B=8, T=4096, H=16, K=64, V=64),),  # the chunk_gla issue's target
        # 1k … 64k tokens; past 16k the errors are measured against fla's chunk_gla (max_T)
        "sweep": tuple(dict(B=1, T=2 ** e, H=16, K=64, V=64) for e in range(10, 17)),
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
    max_T={"reference": (16384, "the reference's autodiff holds [chunks, 64, 64, H, K] ratio tensors "
                                "(25.6 GiB at 16k by XLA's memory analysis, 51 GiB at 32k, 102 GiB at 64k)")},
    error_sources=("fla.ops.gla.chunk_gla",),
    variants={"one sweep": {"tuning": _GlaTuning(segments=1)}},
    notes={"gates": ["gk"], "gate_strength": 0.1, "chunk_size": 64,
           "one_sweep": "triton vs triton[one sweep]: the two-level state pass (NOTES gla.13, segments chosen by "
                        "state_segments) against one sweep per sequence; the same where the heuristic picks 1",
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
            "sweep": tuple(dict(B=1, T=2 ** e, H=16, K=128, V=128) for e in range(10, 17)),  # 1k … 64k
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
        max_T={"reference": (32768, "the reference's autodiff (13 GiB at 32k by XLA's memory analysis, 26 GiB "
                                    "at 64k) on top of every other contender's buffers")},
        error_sources=("fla.ops.kda.chunk_kda",),
        variants={"unfused backward": {"tuning": Tuning(fused_backward=False)},
                  "unfused forward": {"tuning": Tuning(fused_forward=False)},
                  "unfused output": {"tuning": Tuning(fused_output=False)},
                  "sub-chunk products": {"tuning": Tuning(whole_chunk=False)},
                  "one sweep": {"tuning": Tuning(segments=1)}},
        notes={"gate_strength": 0.5, "keys": "L2-normalised", "chunk_size": 64,
               "targets_ms": {"target": {"forward": 1.75, "forward_backward": 10.0}},
               "one_sweep": "triton vs triton[one sweep]: the two-level state pass (NOTES kda.18, segments chosen "
                            "by kda.state_segments) against one sweep per sequence; the same where it picks 1",
               "fused_vs_unfused": "forward_backward of triton vs triton[unfused backward]: same forward, the "
                                   "difference is the fused WY + dq/dk/dg kernel against its two halves",
               "whole_chunk": "triton vs triton[sub-chunk products]: L, Aqk and their backward from whole-chunk "
                              "products (kda.17) against sub-chunk products"},
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

        return _jax_peer_calls(forward, {n: inputs[n] for n in ("q", "k", "v")}, cotangents)

    return setup


FLASH_ATTENTION = OpBench(
    shape_sets={
        # the flash-attention issue's targets, causal and not
        "target": (dict(B=4, T=4096, H=16, D=128, causal=1), dict(B=4, T=4096, H=16, D=128, causal=0)),
        # 1k … 64k tokens; past 8k the dense reference and XLA are skipped (max_T) and the errors are
        # measured against cuDNN
        "sweep": tuple(dict(B=1, T=2 ** e, H=16, D=128, causal=c) for c in (1, 0) for e in range(10, 17)),
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
    peers=(Peer("jax.nn.dot_product_attention[cudnn]", "jax", _dot_product_attention("cudnn"), runtime="jax"),
           Peer("jax.nn.dot_product_attention[xla]", "jax", _dot_product_attention("xla"), needs_cuda=False,
                runtime="jax"),
           Peer("ejkernel.flash_attention[triton]", "ejkernel", _ejkernel_flash_attention(False), runtime="jax",
                interpretable=True),
           Peer("ejkernel.flash_attention[triton,heuristic_cfg_gpu]", "ejkernel", _ejkernel_flash_attention(True),
                runtime="jax", interpretable=True)),
    variants={"dq pass": {"tuning": _FlashTuning(dq="pass")}, "tma loads": {"tuning": _FlashTuning(forward_loads="tma")},
              "warp specialized forward": {"tuning": _FlashTuning(forward_schedule="warp_specialized")},
              "warp specialized": {"tuning": _FlashTuning(forward_schedule="warp_specialized",
                                                          backward_schedule="warp_specialized")}},
    max_T={name: (8192, "dense attention: its forward+backward holds several B·H·T² float32 arrays (XLA's memory "
                        "analysis at B=1 H=16: 16-20 GiB at 8k, 64-80 GiB at 16k)")
           for name in ("reference", "jax.nn.dot_product_attention[xla]")},
    error_sources=("jax.nn.dot_product_attention[cudnn]", "ejkernel.flash_attention[triton]",
                   "jax.nn.dot_product_attention[xla]"),
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


def _import_peer(module: str) -> None:
    """Import a peer's module, undoing what importing it changes for the whole process: ejkernel turns
    on JAX's persistent compilation cache (its `ejit` decorator sets `jax_compilation_cache_dir` when
    the module loads) and sets environment variables (TF_GPU_ALLOCATOR, ...); every contender should
    compile and allocate as it would without the peer."""
    cache_dir = jax.config.jax_compilation_cache_dir
    environment = set(os.environ)
    try:
        importlib.import_module(module)
    finally:
        jax.config.update("jax_compilation_cache_dir", cache_dir)
        for name in set(os.environ) - environment:
            del os.environ[name]


def _out_of_memory(exc: BaseException) -> bool:
    """XLA's RESOURCE_EXHAUSTED or torch's CUDA out-of-memory error."""
    text = f"{type(exc).__name__}: {exc}"
    return "RESOURCE_EXHAUSTED" in text or "OutOfMemory" in text or "out of memory" in text.lower()


def chosen_variants(op_name: str, variants: bool | Sequence[str]) -> dict[str, Mapping[str, Any]]:
    """The variants of `op_name` to time: all (True), none (False) or those named (unknown: ValueError)."""
    op = OPS[op_name]
    if isinstance(variants, bool):
        return dict(op.variants) if variants else {}
    unknown = sorted(set(variants) - set(op.variants))
    if unknown:
        raise ValueError(f"--variants: {op_name} has no variant {', '.join(map(repr, unknown))}; known: "
                         f"{', '.join(map(repr, op.variants)) or 'none'}")
    return {v: op.variants[v] for v in variants}


def run(op_name: str = "recurrent", shape_set: str = "target", *, iters: int = 20, reps: int = 1,
        implementations: Sequence[str] = IMPLEMENTATIONS, peers: bool = False, command: str = "",
        shapes: Sequence[Mapping[str, int]] | None = None, tokens: Sequence[int] | None = None,
        errors_from: str = "reference", progress: Callable[[dict[str, Any]], None] | None = None,
        variants: bool | Sequence[str] = True) -> dict[str, Any]:
    """Time `op_name` over a shape set (or explicit `shapes`) and return the record (not written).

    tokens: only the shapes with these sequence lengths T (a long sweep in parts; recorded).
    variants: also time the op's `variants` beside the Triton path (each compiles and autotunes anew at
      every shape: a long sweep may leave them to the target shapes; recorded); a list of names: only those.
    errors_from: "reference" (the JAX reference's outputs, computed even when it is not timed) or
      "peers" (the op's `error_sources` measured in the same run; the reference is then not run at
      all unless timed: at large shapes its XLA compile can take minutes).
    progress: called with the record so far ("complete": False) after every timed contender, so a run
      cut short by a time limit still leaves what it measured (`workbench bench` writes it).
    """
    if op_name not in OPS:
        raise ValueError(f"--op: unknown op {op_name!r}; known: {', '.join(OPS)}")
    op = OPS[op_name]
    if shapes is None:
        if shape_set not in op.shape_sets:
            raise ValueError(f"--shapes: {op_name} has no shape set {shape_set!r}; known: {', '.join(op.shape_sets)}")
        shapes = op.shape_sets[shape_set]
    if tokens is not None:
        known = sorted({s["T"] for s in shapes})
        if not tokens or set(tokens) - set(known):
            raise ValueError(f"--T: expected sequence lengths of shape set {shape_set!r} ({', '.join(map(str, known))}), "
                             f"got {','.join(map(str, tokens))!r}")
        shapes = tuple(s for s in shapes if s["T"] in set(tokens))
    unknown = set(implementations) - set(IMPLEMENTATIONS)
    if unknown or not implementations:
        raise ValueError(f"--implementations: expected a comma list of {', '.join(IMPLEMENTATIONS)}, "
                         f"got {','.join(implementations)!r}")
    if iters < 1:
        raise ValueError(f"--iters: must be ≥ 1, got {iters}")
    if reps < 1:
        raise ValueError(f"--reps: must be ≥ 1, got {reps}")
    if errors_from not in ("reference", "peers"):
        raise ValueError(f"--errors-from: expected reference or peers, got {errors_from!r}")
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
            _import_peer(peer.module)
        except ImportError as exc:
            peer_status.append({"peer": peer.name, "status": "not installed", "reason": str(exc)[:500]})
            continue
        except Exception as exc:  # an installed peer that cannot load (wrong jax, a missing symbol) is recorded
            peer_status.append({"peer": peer.name, "status": "import failed",
                                "reason": f"{type(exc).__name__}: {exc}"[:500]})
            continue
        used_modules += [peer.runtime, peer.module]
        if peer.needs_cuda and device["platform"] != "gpu" and not (peer.interpretable and launch.INTERPRET):
            peer_status.append({"peer": peer.name, "status": "skipped: needs a CUDA GPU"})
            continue
        active_peers.append(peer)

    t_start = time.perf_counter()
    results: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    timed_variants = chosen_variants(op_name, variants) if "triton" in implementations else {}

    def skip(shape, name, reason, label):
        skipped.append({"shape": dict(shape), "implementation": name, "reason": reason})
        _say(f"[{time.perf_counter() - t_start:7.1f} s] {op_name} {label} {name}: skipped ({reason})")

    def record(rows, complete: bool) -> dict[str, Any]:
        return {
            "op": op_name, "harness": "workbench.bench", "command": command, "interpreted": launch.INTERPRET,
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "device": device,
            "versions": versions(sorted(set(used_modules))), "git": git_state(),
            "shape_set": shape_set, "shapes": [dict(s) for s in shapes],
            "tokens": None if tokens is None else list(tokens),
            "dtype": op.dtype, "iters": iters, "reps": reps,
            "warmup": warmup, "implementations": list(implementations), "wrong_rms_rel": bound,
            "variants": list(timed_variants),
            "peers": peer_status, "limits": {n: {"max_T": t, "why": why} for n, (t, why) in op.max_T.items()},
            "error_sources": list(op.error_sources), "errors_from": errors_from, "skipped": skipped,
            **op.notes, "results": rows, "seconds": time.perf_counter() - t_start, "complete": complete,
        }

    for i, shape in enumerate(shapes):
        label = " ".join(f"{n}={s}" for n, s in shape.items())
        inputs = op.inputs(shape, dtype, i)
        reference = jax_calls(op, "reference", inputs, [])
        outputs = jax.eval_shape(reference.forward)
        cotangents = testing.random_cotangents(1000 + i, outputs)
        reference = jax_calls(op, "reference", inputs, cotangents)
        fwd_bytes, fwd_bwd_bytes = op.bytes(shape, dtype)
        flops = op.flops(shape) if op.flops is not None else (None, None)
        n_out = len(op.outputs)

        # the kernel, then the peers (the ratios need both), then its variants, the reference last: a run
        # cut short keeps the figures that matter most
        contenders: list[tuple[str, str, Callable[[], PeerCalls]]] = []
        if "triton" in implementations:
            contenders.append(("triton", "kernel", lambda: jax_calls(op, "triton", inputs, cotangents)))
        contenders += [(p.name, "peer", lambda p=p: p.setup(inputs, cotangents)) for p in active_peers]
        contenders += [(f"triton[{v}]", "kernel", lambda opts=opts: jax_calls(op, "triton", inputs, cotangents,
                                                                              **opts))
                       for v, opts in timed_variants.items()]
        if "reference" in implementations:
            contenders.append(("reference", "kernel", lambda: reference))
        outputs_of: dict[str, dict[str, list[np.ndarray]]] = {}  # name → pass → outputs and gradients
        reference_skip = op.skip_reason("reference", shape)
        if "reference" not in implementations and errors_from == "reference":  # the errors still need it
            if reference_skip is None:
                try:
                    fb = reference.to_numpy(reference.forward_backward())
                    outputs_of["reference"] = {"forward": fb[:n_out], "forward_backward": fb}
                except Exception as exc:
                    if not _out_of_memory(exc):
                        raise
                    skip(shape, "reference", f"out of memory: {type(exc).__name__}: {exc}"[:500], label)
            else:
                skip(shape, "reference", reference_skip, label)

        shape_rows = []
        for name, kind, make in contenders:
            reason = op.skip_reason(name, shape)
            if reason is not None:
                skip(shape, name, reason, label)
                continue
            try:
                calls = make()
                fwd_ms, fwd_out = time_ms(calls.forward, calls.block, iters, warmup, reps)
                fb_ms, fb_out = time_ms(calls.forward_backward, calls.block, iters, warmup, reps)
            except Exception as exc:  # a peer's failure is recorded, never fatal; so is running out of memory
                if kind == "peer":
                    peer_status.append({"peer": name, "status": f"failed: {type(exc).__name__}: {exc}"[:500]})
                    _say(f"[{time.perf_counter() - t_start:7.1f} s] {op_name} {label} {name}: failed ({exc})")
                    continue
                if not _out_of_memory(exc):
                    raise
                skip(shape, name, f"out of memory: {type(exc).__name__}: {exc}"[:500], label)
                continue
            got = {"forward": calls.to_numpy(fwd_out), "forward_backward": calls.to_numpy(fb_out)}
            outputs_of[name] = got
            for pass_, ms, nbytes, nflops in (("forward", fwd_ms, fwd_bytes, flops[0]),
                                              ("forward_backward", fb_ms, fwd_bwd_bytes, flops[1])):
                shape_rows.append({"shape": dict(shape), "implementation": name, "kind": kind, "pass": pass_,
                                   "ms": ms, "bytes": nbytes, "flops": nflops, "_got": got[pass_]})
            if kind == "peer" and not any(p["peer"] == name for p in peer_status):
                peer_status.append({"peer": name, "status": "measured"})
            _say(f"[{time.perf_counter() - t_start:7.1f} s] {op_name} {label} {name}: "
                 f"forward {fwd_ms['median']:.3f} ms, forward+backward {fb_ms['median']:.3f} ms")
            if progress is not None:
                rows_so_far = results + _finish(shape_rows, outputs_of, errors_from, op, bound, device)
                progress(record(rows_so_far, complete=False))

        results += _finish(shape_rows, outputs_of, errors_from, op, bound, device)

    return record(results, complete=True)


def _finish(shape_rows, outputs_of, errors_from, op, bound, device):
    """The rows of one shape with errors, status, rates and ratios (copies; `shape_rows` kept)."""
    sources = op.error_sources if errors_from == "peers" else ("reference", *op.error_sources)
    source = next((n for n in sources if n in outputs_of), None)
    done = []
    for row in shape_rows:
        row = dict(row)
        got = row.pop("_got")
        row["error_source"] = source
        if source is None:
            row["errors"], row["status"] = {}, "unchecked"
        else:
            row["errors"] = _errors(op.names[:len(got)], got, outputs_of[source][row["pass"]])
            worst = max((e["rms_rel"] for e in row["errors"].values()), default=0.0)
            row["status"] = "WRONG" if not worst <= bound else "ok"  # NaN is WRONG too
        seconds = row["ms"]["median"] / 1e3
        row["gb_per_s"] = row["bytes"] / seconds / 1e9
        row["tflops_per_s"] = row["flops"] / seconds / 1e12 if row["flops"] else None
        peak = device["peak_bytes_per_s"]
        row["fraction_of_peak"] = row["bytes"] / seconds / peak if peak else None
        done.append(row)
    for pass_ in ("forward", "forward_backward"):
        rows = [r for r in done if r["pass"] == pass_]
        best = min((r["ms"]["median"] for r in rows if r["kind"] == "peer" and r["status"] == "ok"), default=None)
        for r in rows:
            r["ratio_to_best_peer"] = (r["ms"]["median"] / best if best and r["status"] == "ok" else None)
    return done


# ----------------------------------------------------------------------------- first call

FIRST_CALL_OUT = DEFAULT_OUT / "first_call"
FIRST_CALL_GOAL = 0.25  # cached_s ≤ this × cold_s (issue 18)
_MARK = "workbench-first-call "  # the child's protocol lines on stdout start with this


def first_call(op_name: str, shape_set: str = "target", *, command: str = "",
               child: Sequence[str] | None = None, timeout: float | None = None) -> dict[str, Any]:
    """Seconds from a fresh process's start to its first forward+backward result, cold then cached.

    Two processes run one after the other (`child`, default `python -m workbench.bench
    --first-call-child OP SET`), with `WORKBENCH_CACHE_DIR` a fresh temporary folder shared by both,
    `WORKBENCH_AUTOTUNE=on`, and JAX's persistent compilation cache in `<that folder>/jax` (every
    compile kept). Each computes, for every shape of the set in turn, the op's Triton path under
    `jax.jit` (forward, then forward+backward with random cotangents, as `run` does) and reports on
    stdout as each result is ready. `cold_s` and `cached_s` are wall seconds from just before the
    process is started to its last shape's first forward+backward result; `ratio` = cached_s / cold_s.
    The record keeps, per process, the seconds to its imports (`startup_s`) and to each shape's
    result, what `workbench.autotune` did (`stats`), and the number of files the first process left in
    each cache. The folder is removed afterwards.
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
        _say("warning: Triton is interpreted on this CPU: no cache applies, the figures are meaningless")
    root = Path(__file__).resolve().parent.parent
    argv = list(child or [sys.executable, "-m", "workbench.bench", "--first-call-child", op_name, shape_set])
    t_start = time.perf_counter()
    cache = Path(tempfile.mkdtemp(prefix="workbench-first-call-"))
    settings = {"WORKBENCH_CACHE_DIR": "<a fresh temporary folder>", "WORKBENCH_AUTOTUNE": "on",
                "JAX_COMPILATION_CACHE_DIR": "<that folder>/jax", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1"}
    env = {**os.environ, **settings, "WORKBENCH_CACHE_DIR": str(cache), "JAX_COMPILATION_CACHE_DIR": str(cache / "jax"),
           "PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)}
    try:
        runs = {}
        for run_name in ("cold", "cached"):
            _say(f"[{time.perf_counter() - t_start:7.1f} s] {op_name} {shape_set} first call, {run_name} cache")
            runs[run_name] = _first_call_process(argv, env, len(op.shape_sets[shape_set]), timeout)
            _say(f"[{time.perf_counter() - t_start:7.1f} s] {op_name} {shape_set} first call, {run_name}: "
                 f"{runs[run_name]['first_result_s']:.2f} s")
            if run_name == "cold":
                left = {name: _count_files(cache / folder)
                        for name, folder in (("autotune_files", "autotune"), ("kernel_files", "kernels"),
                                             ("jax_files", "jax"))}
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
    from . import autotune

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


def first_call_table(record: Mapping[str, Any]) -> str:
    fc = record["first_call"]
    dev = record["device"]
    lines = [f"{record['op']} {record['shape_set']} {record['dtype']} on {dev['kind']} ({dev['platform']}): "
             f"first forward+backward result {fc['cold_s']:.2f} s from a fresh process with empty caches, "
             f"{fc['cached_s']:.2f} s with the caches it left: ratio {fc['ratio']:.3f} "
             f"(goal ≤ {fc['goal_ratio']}: {'met' if fc['met'] else 'NOT met'})"]
    for name, run in fc["runs"].items():
        stats = ", ".join(f"{k} {v}" for k, v in sorted(run["stats"].items())) or "-"
        startup = "-" if run["startup_s"] is None else f"{run['startup_s']:.2f} s"
        lines.append(f"  {name:6s} imports {startup}, results at {', '.join(f'{t:.2f}' for t in run['result_s'])} s; "
                     f"autotune: {stats}")
    lines.append("  left by the first: " + ", ".join(f"{k} {v}" for k, v in fc["cache_left"].items()))
    if record["interpreted"]:
        lines.append("  INTERPRETED: no cache applies, the figures are meaningless")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- output


def stamp_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def claim_stamp(op: str, out: Path) -> str:
    """A stamp for a new run of `op` whose record names in `out` no other run holds: the UTC time, with `-2`, `-3`, …
    after it when a run of the same second already left `<op>-<stamp>.json` or `.json.partial` there. The name is
    claimed by creating its `.json.partial` (exclusively, so two processes cannot take the same one), holding an
    empty incomplete record until the run's first progress replaces it."""
    out.mkdir(parents=True, exist_ok=True)
    base = stamp_now()
    for n in itertools.count(1):
        stamp = base if n == 1 else f"{base}-{n}"
        if (out / f"{op}-{stamp}.json").exists():
            continue
        try:
            with (out / f"{op}-{stamp}.json.partial").open("x") as fh:
                json.dump({"op": op, "complete": False, "results": []}, fh)
                fh.write("\n")
        except FileExistsError:
            continue
        return stamp
    raise AssertionError("unreachable")


def release_stamp(op: str, out: Path, stamp: str) -> None:
    """Remove the `.json.partial` that `claim_stamp` made if the run ended before recording anything in it (a run
    that measured something keeps its partial record)."""
    path = out / f"{op}-{stamp}.json.partial"
    try:
        if not json.loads(path.read_text())["results"]:
            path.unlink()
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        pass


def write_partial(record: Mapping[str, Any], out: Path, stamp: str) -> Path:
    """The record so far of a run still going, as `<out>/<op>-<stamp>.json.partial` (rewritten as the run
    goes, removed by `write` when it ends; a run killed by a time limit leaves it behind)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{record['op']}-{stamp}.json.partial"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2, default=_json_default) + "\n")
    tmp.replace(path)
    return path


def write(record: Mapping[str, Any], out: Path = DEFAULT_OUT, stamp: str | None = None) -> Path:
    """Write `record` to a new `<out>/<op>-<UTC timestamp>.json`; refuse if that file exists."""
    stamp = stamp or stamp_now()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{record['op']}-{stamp}.json"
    try:
        with path.open("x") as fh:  # exclusive: records are append-only
            json.dump(record, fh, indent=2, default=_json_default)
            fh.write("\n")
    except FileExistsError:
        raise Refused(f"{path} exists; bench records are never overwritten") from None
    (out / f"{record['op']}-{stamp}.json.partial").unlink(missing_ok=True)
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
                     r["status"] if r["status"] in ("WRONG", "unchecked") else ""))
    widths = [max(len(c), *(len(row[i]) for row in rows)) if rows else len(c) for i, c in enumerate(COLUMNS)]
    line = lambda cells: "  ".join(c.rjust(w) if i >= 3 else c.ljust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    out = [line(COLUMNS), line(["-" * w for w in widths]), *map(line, rows)]
    for p in record["peers"]:
        if p["status"] != "measured":
            out.append(f"peer {p['peer']}: {p['status']}" + (f" ({p['reason']})" if p.get("reason") else ""))
    for s in record.get("skipped", ()):
        out.append(f"skipped {s['implementation']} at {' '.join(f'{n}={v}' for n, v in s['shape'].items())}: "
                   f"{s['reason']}")
    sources = {}
    for r in record["results"]:
        if r.get("error_source", "reference") != "reference":
            sources.setdefault(r["error_source"] or "nothing (unchecked)", {})[str(r["shape"])] = r["shape"]
    for source, shapes in sources.items():
        out.append(f"errors against {source} at " + "; ".join(" ".join(f"{n}={v}" for n, v in s.items())
                                                             for s in shapes.values()) + " (no reference there)")
    dev = record["device"]
    out.append(f"{record['op']} {record['shape_set']} {record['dtype']} on {dev['kind']} ({dev['platform']}), "
               f"{record['iters']} samples of {record.get('reps', 1)} back-to-back call(s) after {record['warmup']} warm-up"
               + (" — INTERPRETED: timings meaningless" if record["interpreted"] else ""))
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "--first-call-child":
        sys.exit("usage: python -m workbench.bench --first-call-child OP SHAPE_SET (run by workbench bench --first-call)")
    first_call_child(sys.argv[2], sys.argv[3])

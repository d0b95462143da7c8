"""The peers `workbench bench --peers` times against, each adapted to our inputs in one place: flash-linear-attention
(torch, the same arrays through DLPack), ejkernel's Triton kernels (JAX; through `workbench.launch` in the
interpreter on a machine without CUDA), and cuDNN / XLA attention (`jax.nn.dot_product_attention`).

Peer modules are imported lazily (`import_peer`): a peer that is not installed, fails to import, or needs
CUDA on a machine without it is recorded with its status and reason, and the run goes on.
"""

from __future__ import annotations

import importlib
import os
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
import triton

from .. import launch
from .spec import PeerCalls
from .timing import jitted_pair, pair_calls


# ----------------------------------------------------------------------------- flash-linear-attention (torch)


def torch_triton_cache() -> None:
    """Peers launch Triton from torch, which needs `triton.knobs.cache.dir`; it is empty on some
    machines (the GPU image this project benchmarks on), and then every launch fails."""
    if not triton.knobs.cache.dir:
        triton.knobs.cache.dir = os.environ.get("TRITON_CACHE_DIR") or tempfile.mkdtemp(prefix="triton-cache-")


def fla_gla(function: str, gate: str):
    """A peer setup for flash-linear-attention's `fla.ops.gla.<function>`, the per-key log-decay passed
    as its argument `gate` (`gk` for fused_recurrent_gla, `g` for chunk_gla)."""

    def setup(inputs, cotangents) -> PeerCalls:
        import torch

        torch_triton_cache()
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


def jax_peer_calls(forward: Callable[[dict[str, jax.Array]], tuple], primals: dict[str, jax.Array],
                    cotangents: Sequence[jax.Array], launched: Sequence[str] = ()) -> PeerCalls:
    """A JAX peer's forward (`forward(primals)` → outputs) and forward+backward (`jax.vjp` with the
    given cotangents; gradients in the order of `primals`), each under `jax.jit`.

    launched: modules of ejkernel that hold its `triton_call`; on a machine without CUDA they launch
    through `workbench.launch` (Triton's interpreter) while a call traces.
    """
    (fwd, fwd_bwd), (primals, cts) = jitted_pair(forward, primals, cotangents)
    if launch.INTERPRET and launched:
        fwd, fwd_bwd = (_launched_by_workbench(launched, f) for f in (fwd, fwd_bwd))
    return pair_calls(fwd, fwd_bwd, primals, cts)


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


EJKERNEL_RECURRENT_LAUNCH = ("ejkernel.kernels._triton.recurrent._triton_impl_fwd",
                              "ejkernel.kernels._triton.recurrent._triton_impl_bwd")


_EJKERNEL_FLASH_LAUNCH = ("ejkernel.kernels._triton.flash_attention._triton_impl_fwd",
                          "ejkernel.kernels._triton.flash_attention._triton_impl_bwd")


def ejkernel_recurrent(inputs, cotangents) -> PeerCalls:
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

    return jax_peer_calls(forward, {n: inputs[n] for n in ("q", "k", "v", "gk")}, cotangents,
                           EJKERNEL_RECURRENT_LAUNCH)


def ejkernel_flash_attention(heuristic_config: bool):
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

        return jax_peer_calls(forward, {n: inputs[n] for n in ("q", "k", "v")}, cotangents, _EJKERNEL_FLASH_LAUNCH)

    return setup


def fla_chunk_kda(inputs, cotangents) -> PeerCalls:
    """flash-linear-attention's `fla.ops.kda.chunk_kda` on the same inputs (natural-log per-key decays g)."""
    import torch

    torch_triton_cache()
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


def dot_product_attention(implementation: str):
    """`jax.nn.dot_product_attention` with a fixed backend, as a peer on the same inputs."""

    def setup(inputs, cotangents) -> PeerCalls:
        causal = inputs["causal"]

        def forward(p):
            return (jax.nn.dot_product_attention(p["q"], p["k"], p["v"], is_causal=causal,
                                                 implementation=implementation),)

        return jax_peer_calls(forward, {n: inputs[n] for n in ("q", "k", "v")}, cotangents)

    return setup


def import_peer(module: str) -> None:
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

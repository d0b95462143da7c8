"""Compile every Triton kernel an op launches for a CUDA target, on a machine without a GPU.

The interpreter runs Python, so it accepts things the compiler refuses (a plain global read inside a
kernel, a shape the code generator cannot lay out). This script traces an op's forward and backward
with `workbench.launch.triton_call` replaced by a stand-in that compiles the kernel (Triton's frontend,
its optimiser and ptxas, for sm_90 by default) for every autotune config, with the argument dtypes
and constexprs of the real launch, and returns zeros. Run it in its own process:

    python scripts/compile_check.py chunk_gla flash_attention recurrent chunk_kda recurrent_kda
    QUICK=1 python scripts/compile_check.py chunk_gla      # bfloat16, one head size, one chunk size

It prints one line per (kernel, config) with the shared memory, registers per thread and spilled bytes (cuobjdump), and exits 1 if
any compilation failed, or if a config that survives the kernel's `prune_configs_by` (one that can
run) asks for more shared memory than the target has (`SMEM_LIMIT`; Triton checks that only at
launch, so on the GPU it surfaces as a failed custom call).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ["WORKBENCH_INTERPRET"] = "0"  # real @triton.jit functions, not the interpreter's
os.environ.pop("TRITON_INTERPRET", None)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

import workbench  # noqa: E402
from workbench import launch  # noqa: E402

QUICK = os.environ.get("QUICK") == "1"  # bfloat16, one head size, one chunk size
DTYPES = (jnp.bfloat16,) if QUICK else (jnp.bfloat16, jnp.float32)
TARGET = GPUTarget("cuda", int(os.environ.get("CC", "90")), 32)
_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "int32": "i32", "int64": "i64",
           "int8": "i8", "uint32": "u32", "bool": "i1"}
SMEM_LIMIT = int(os.environ.get("SMEM_LIMIT", 232448))  # bytes per block, opt-in maximum of sm_90 (H100/H200)
FAILURES: list[str] = []
SEEN: set = set()


def _scalar_type(x) -> str:
    if isinstance(x, bool):
        return "i1"
    if isinstance(x, int):
        return "i32" if -2**31 <= x < 2**31 else "i64"
    return "fp32"


def compile_call(*args, kernel, out_shape, grid, name="", zeroed_outputs=(), input_output_aliases=None,
                 num_warps=None, num_stages=None, **metaparams):
    args = tuple(launch.absent() if a is None else a for a in args)
    single = not isinstance(out_shape, (list, tuple))
    outs = [out_shape] if single else list(out_shape)
    tuner, heuristics, jit = launch.unwrap(kernel)
    configs = list(tuner.configs) if tuner is not None else [triton.Config({}, num_warps=num_warps or 4,
                                                                           num_stages=num_stages or 3)]
    values = list(args) + [jax.ShapeDtypeStruct(o.shape, o.dtype) for o in outs]
    params = jit.params
    named = {}
    i = 0
    for p in params:
        if p.name in metaparams or p.is_constexpr:
            continue
        named[p.name] = values[i]
        i += 1
    runnable = configs
    prune = getattr(tuner, "early_config_prune", None) if tuner is not None else None
    if prune is not None:
        runnable = prune(configs, {**named, **metaparams})
    for config in configs:
        const = {**metaparams, **config.kwargs}
        for h in reversed(heuristics):
            for key, fn in h.items():
                const[key] = fn({**named, **const})
        signature, constexprs, attrs = {}, {}, {}
        for idx, p in enumerate(params):
            if p.is_constexpr or p.name in const:
                signature[p.name] = "constexpr"
                constexprs[(idx,)] = const[p.name]
            else:
                v = named[p.name]
                if hasattr(v, "dtype") and hasattr(v, "shape"):
                    signature[p.name] = "*" + _DTYPES[jnp.dtype(v.dtype).name]
                    # XLA buffers are 16-byte aligned and jax-triton tells the compiler so; without
                    # this, loads are not vectorised or pipelined and shared memory is underestimated
                    attrs[(idx,)] = [["tt.divisibility", 16]]
                else:
                    signature[p.name] = _scalar_type(v)
        key = (jit.__name__, tuple(signature.items()), tuple(sorted(constexprs.items())), config.num_warps,
               config.num_stages)
        if key in SEEN:
            continue
        SEEN.add(key)
        label = f"{jit.__name__} {config.kwargs} w{config.num_warps} s{config.num_stages}"
        try:
            compiled = triton.compile(ASTSource(fn=jit, signature=signature, constexprs=constexprs, attrs=attrs),
                                      target=TARGET,
                                      options=dict(num_warps=config.num_warps, num_stages=config.num_stages))
            shared = compiled.metadata.shared
            verdict = "ok   "
            if shared > SMEM_LIMIT:
                verdict = "OVER " if config in runnable else "over "  # "over": pruned for this launch, never runs
                if config in runnable:
                    FAILURES.append(label)
            print(f"{verdict} {label}: shared {shared} B{' > ' + str(SMEM_LIMIT) if shared > SMEM_LIMIT else ''}, "
                  f"{_resources(compiled)}", flush=True)
        except Exception as e:  # report every failing config, then exit 1
            FAILURES.append(label)
            print(f"FAIL  {label}: {type(e).__name__}: {str(e)[-1200:]}", flush=True)
    zeros = [jnp.zeros(o.shape, o.dtype) for o in outs]
    return zeros[0] if single else zeros


def _resources(compiled) -> str:
    """Registers per thread and spilled bytes from the cubin (cuobjdump's resource usage: REG, and
    STACK, the local memory a spilling kernel uses); a kernel that spills runs from local memory."""
    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
        fh.write(compiled.asm["cubin"])
        fh.flush()
        try:
            text = subprocess.run([str(cuobjdump), "--dump-resource-usage", fh.name], capture_output=True,
                                  text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            return f"registers ? ({type(exc).__name__})"
    reg, stack = re.search(r"REG:(\d+)", text), re.search(r"STACK:(\d+)", text)
    if reg is None:
        return "registers ?"
    spill = int(stack.group(1)) if stack else 0
    return f"registers {reg.group(1)}, stack {spill} B" + ("  SPILLS" if spill else "")


def _patch():
    """Every module that imported `triton_call` from the launcher calls the stand-in instead."""
    for module in list(sys.modules.values()):
        if getattr(module, "triton_call", None) is launch.triton_call and module is not launch:
            module.triton_call = compile_call


def _grad_all(fn, args):
    out, vjp = jax.vjp(fn, *args)
    cts = jax.tree.map(lambda x: jnp.ones(x.shape, x.dtype), out)
    return vjp(cts)


def check_chunk_gla():
    _patch()
    for dtype in DTYPES:
        for K, V in ((64, 64), (128, 128))[:1 if QUICK else 2]:
            q, k, gk = (jnp.zeros((2, 256, 4, K), dtype) for _ in range(3))
            v = jnp.zeros((2, 256, 4, V), dtype)
            for cs in (64,) if QUICK else (16, 32, 64):
                jax.eval_shape(lambda *a: _grad_all(lambda q, k, v, gk: workbench.chunk_gla(q, k, v, gk=gk,
                                                                                             chunk_size=cs), a),
                               q, k, v, gk)
            g = jnp.zeros((2, 256, 4), dtype)
            jax.eval_shape(lambda *a: _grad_all(lambda q, k, v, g: workbench.chunk_gla(q, k, v, g=g), a), q, k, v, g)


def check_flash_attention():
    _patch()
    for dtype in DTYPES:
        for D in (128,) if QUICK else (64, 128, 256):
            q = jnp.zeros((2, 512, 4, D), dtype)
            for causal in (False, True):
                jax.eval_shape(lambda *a: _grad_all(lambda q, k, v: workbench.flash_attention(q, k, v, causal=causal),
                                                    a), q, q, q)
        # every optional input at once (bias tiles take shared memory too), at a non-power-of-two head dim
        for D in (80,) if QUICK else (80, 128, 256):
            q = jnp.zeros((1, 512, 4, D), dtype)
            kv = jnp.zeros((1, 512, 1, D), dtype)
            bias = jnp.zeros((1, 4, 512, 512), dtype)
            sinks = jnp.zeros((4,), dtype)
            for causal in (False, True):
                jax.eval_shape(lambda *a: _grad_all(lambda q, k, v, bias, sinks: workbench.flash_attention(
                    q, k, v, causal=causal, sliding_window=256 if causal else None, softcap=30.0, bias=bias,
                    sinks=sinks), a),
                    q, kv, kv, bias, sinks)


def check_recurrent():
    _patch()
    for dtype in DTYPES:
        q = jnp.zeros((2, 256, 4, 64), dtype)
        jax.eval_shape(lambda *a: _grad_all(lambda q, k, v, gk: workbench.recurrent(q, k, v, gk=gk), a), q, q, q, q)


def check_chunk_kda():
    _patch()
    from workbench.kda import Tuning
    for dtype in DTYPES:
        for K, V in ((128, 128),) if QUICK else ((64, 64), (128, 128)):
            q, k, g = (jnp.zeros((2, 256, 4, K), dtype) for _ in range(3))
            v = jnp.zeros((2, 256, 4, V), dtype)
            beta = jnp.zeros((2, 256, 4), dtype)
            for cs in (64,) if QUICK else (16, 32, 64):
                for fused in (True, False):
                    jax.eval_shape(lambda *a: _grad_all(lambda *x: workbench.chunk_kda(
                        *x, chunk_size=cs, tuning=Tuning(fused_backward=fused)), a), q, k, v, g, beta)


def check_recurrent_kda():
    _patch()
    for dtype in DTYPES:
        for K in (128,) if QUICK else (64, 128):
            q = jnp.zeros((2, 256, 4, K), dtype)
            beta = jnp.zeros((2, 256, 4), dtype)
            jax.eval_shape(lambda *a: _grad_all(lambda *x: workbench.recurrent_kda(*x), a), q, q, q, q, beta)


CHECKS = {"chunk_gla": check_chunk_gla, "chunk_kda": check_chunk_kda, "recurrent_kda": check_recurrent_kda, "flash_attention": check_flash_attention, "recurrent": check_recurrent}

if __name__ == "__main__":
    names = sys.argv[1:] or list(CHECKS)
    for name in names:
        print(f"== {name}", flush=True)
        CHECKS[name]()
    print(f"{len(SEEN)} compilations, {len(FAILURES)} failed", flush=True)
    sys.exit(1 if FAILURES else 0)

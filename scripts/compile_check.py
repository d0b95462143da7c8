"""Compile every Triton kernel an op launches for a Hopper GPU (sm_90), on a machine without one, and report
what the compiler made of each: shared memory, registers per thread, spilled bytes.

The op's forward and backward are traced abstractly (no kernel runs) with the launches recorded by
`workbench.compile_check.record(all_configs=True)`, each bound as the GPU launcher binds it, for every
autotune config that agrees with the call; `compile_all(last="resources")` compiles each to a cubin:

    python scripts/compile_check.py chunk_gla flash_attention recurrent chunk_kda recurrent_kda
    QUICK=1 python scripts/compile_check.py chunk_gla      # bfloat16, one head size, one chunk size

One line per (kernel, config); exit 1 if a compile failed, or if a config that survives the kernel's
`prune_configs_by` (one that can run) asks for more shared memory than an H100 or H200 has (Triton checks
that only at launch, so on the GPU it surfaces as a failed custom call). "over" marks a config over the
limit that pruning keeps from running.
"""

from __future__ import annotations

import os
import sys

import workbench  # noqa: F401  (first: interpreted Triton on this machine, so launches are recorded)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from workbench import compile_check  # noqa: E402
from workbench.kda import Tuning as KdaTuning  # noqa: E402

QUICK = os.environ.get("QUICK") == "1"  # bfloat16, one head size, one chunk size
DTYPES = (jnp.bfloat16,) if QUICK else (jnp.bfloat16, jnp.float32)


def _grad_all(fn, *args):
    out, vjp = jax.vjp(fn, *args)
    return vjp(jax.tree.map(jnp.ones_like, out))


def _trace(fn, *args):
    jax.eval_shape(lambda *a: _grad_all(fn, *a), *args)


def check_chunk_gla():
    for dtype in DTYPES:
        for K in (64,) if QUICK else (64, 128):
            q = jnp.zeros((2, 256, 4, K), dtype)
            for cs in (64,) if QUICK else (16, 32, 64):
                _trace(lambda q, k, v, gk: workbench.chunk_gla(q, k, v, gk=gk, chunk_size=cs), q, q, q, q)
            _trace(lambda q, k, v, g: workbench.chunk_gla(q, k, v, g=g), q, q, q, jnp.zeros((2, 256, 4), dtype))


def check_flash_attention():
    for dtype in DTYPES:
        for D in (128,) if QUICK else (64, 128, 256):
            q = jnp.zeros((2, 512, 4, D), dtype)
            for causal in (False, True):
                _trace(lambda q, k, v: workbench.flash_attention(q, k, v, causal=causal), q, q, q)
        # every optional input at once (bias tiles take shared memory too), at a non-power-of-two head dim
        for D in (80,) if QUICK else (80, 128, 256):
            q, kv = jnp.zeros((1, 512, 4, D), dtype), jnp.zeros((1, 512, 1, D), dtype)
            bias, sinks = jnp.zeros((1, 4, 512, 512), dtype), jnp.zeros((4,), dtype)
            for causal in (False, True):
                _trace(lambda q, k, v, bias, sinks: workbench.flash_attention(
                    q, k, v, causal=causal, sliding_window=256 if causal else None, softcap=30.0, bias=bias,
                    sinks=sinks), q, kv, kv, bias, sinks)


def check_recurrent():
    for dtype in DTYPES:
        q = jnp.zeros((2, 256, 4, 64), dtype)
        _trace(lambda q, k, v, gk: workbench.recurrent(q, k, v, gk=gk), q, q, q, q)


def check_chunk_kda():
    for dtype in DTYPES:
        for K in (128,) if QUICK else (64, 128):
            q, beta = jnp.zeros((2, 256, 4, K), dtype), jnp.zeros((2, 256, 4), dtype)
            for cs in (64,) if QUICK else (16, 32, 64):
                for fused in (True, False):
                    _trace(lambda *x: workbench.chunk_kda(*x, chunk_size=cs, tuning=KdaTuning(fused_backward=fused)),
                           q, q, q, q, beta)


def check_recurrent_kda():
    for dtype in DTYPES:
        for K in (128,) if QUICK else (64, 128):
            q, beta = jnp.zeros((2, 256, 4, K), dtype), jnp.zeros((2, 256, 4), dtype)
            _trace(workbench.recurrent_kda, q, q, q, q, beta)


CHECKS = {"chunk_gla": check_chunk_gla, "chunk_kda": check_chunk_kda, "recurrent_kda": check_recurrent_kda,
          "flash_attention": check_flash_attention, "recurrent": check_recurrent}


def main(names: list[str]) -> int:
    with compile_check.record(all_configs=True) as every:
        for name in names:
            CHECKS[name]()
    with compile_check.record() as runnable:  # the configs pruning lets run, traced again
        for name in names:
            CHECKS[name]()
    can_run = {compile_check.key_of(s) for s in runnable}
    result = compile_check.compile_all(every, last="resources", workers=os.cpu_count() or 1)
    over = 0
    for row in result["resources"]:
        spec, usage = row["spec"], row["resources"]
        verdict = "ok  "
        if usage["shared"] > compile_check.SHARED_LIMIT:
            verdict = "OVER" if compile_check.key_of(spec) in can_run else "over"
            over += verdict == "OVER"
        config = {k: v for k, v in spec["constexprs"].items() if k.startswith("B")}
        print(f"{verdict} {spec['kernel']} {config} w{spec['num_warps']} s{spec['num_stages']}: shared "
              f"{usage['shared']} B, registers {usage['registers']}, stack {usage['stack']} B"
              + ("  SPILLS" if usage["stack"] else ""))
    for failure in result["failed"]:
        print("FAIL", compile_check.describe(failure))
    print(f"{len(result['resources']) + len(result['failed'])} compilations, {len(result['failed'])} failed, "
          f"{over} runnable over {compile_check.SHARED_LIMIT} B of shared memory, {result['seconds']} s")
    return 1 if result["failed"] or over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or list(CHECKS)))

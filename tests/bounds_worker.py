"""Runs one op on traced sequence bounds in a process of its own (tests/test_bounds.py).

A kernel that reads or writes outside its buffers can kill the process (SIGSEGV) or corrupt its heap;
run here, in a worker process, such a crash fails the test that sent the case instead of killing
pytest. The worker runs with the interpreter's address check on (`WORKBENCH_CHECK_BOUNDS=1`), so an
out-of-bounds access fails loudly even where it would have survived.
"""

from __future__ import annotations

import os


def start() -> None:
    """Worker initializer: address checks on (interpreter only), before workbench is imported."""
    os.environ["WORKBENCH_CHECK_BOUNDS"] = "1"
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # a GPU shared with the test process


OPS = ("recurrent", "chunk_gla", "chunk_kda", "recurrent_kda", "flash_attention", "flash_attention[tma]")
# bfloat16 ops, whose Triton path and reference differ by bfloat16 roundings, not float32 ones
BF16_OPS = ("flash_attention[tma]",)
T, H, K = 40, 1, 16


def _problem(op: str, seed: int):
    """(inputs as a dict of arrays, which of them are differentiated, fn(inputs, cu, impl) -> outputs)."""
    import jax.numpy as jnp

    import workbench
    from workbench.kda.inputs import kda_inputs
    from workbench.testing import attention_inputs, recurrent_inputs

    if op.startswith("flash_attention"):
        from workbench.flash_attention import Tuning

        tma = op == "flash_attention[tma]"  # K, V read through tensor descriptors (bf16: 16-byte rows)
        x = attention_inputs(seed, 1, T, T, H, 1, K, sinks=True, dtype=jnp.bfloat16 if tma else jnp.float32,
                             aux_dtype=jnp.float32)
        tuning = Tuning(forward_loads="tma") if tma else None

        def fn(x, cu, impl):
            return workbench.flash_attention(x["q"], x["k"], x["v"], sinks=x["sinks"], causal=True, return_lse=True,
                                             cu_seqlens_q=cu, cu_seqlens_k=cu, implementation=impl, tuning=tuning)

        return x, ("q", "k", "v", "sinks"), fn
    if op in ("chunk_kda", "recurrent_kda"):
        x = kda_inputs(seed, 1, T, H, K, K, initial_state=False)
        call = workbench.chunk_kda if op == "chunk_kda" else workbench.recurrent_kda
        extra = dict(chunk_size=16) if op == "chunk_kda" else {}

        def fn(x, cu, impl):
            N = cu.shape[0] - 1
            h0 = jnp.broadcast_to(x["h0"][:1], (N, H, K, K))
            return call(x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=h0, cu_seqlens=cu,
                        implementation=impl, **extra)

        x["h0"] = 0.5 * recurrent_inputs(seed + 1, 1, 1, H, K, K)["initial_state"]
        return x, ("q", "k", "v", "g", "beta", "h0"), fn
    gates = ("g", "gk") if op == "chunk_gla" else ("g", "gk", "gv")
    x = recurrent_inputs(seed, 1, T, H, K, K, gates=gates, strength=0.5)
    x["h0"] = x.pop("initial_state")

    def fn(x, cu, impl):
        N = cu.shape[0] - 1
        h0 = jnp.broadcast_to(x["h0"][:1], (N, H, K, K))
        gate_args = {name: x[name] for name in gates}
        if op == "chunk_gla":
            return workbench.chunk_gla(x["q"], x["k"], x["v"], **gate_args, initial_state=h0, cu_seqlens=cu,
                                       chunk_size=16, implementation=impl)
        return workbench.recurrent(x["q"], x["k"], x["v"], **gate_args, initial_state=h0, cu_seqlens=cu,
                                   reverse=True, implementation=impl)

    return x, ("q", "k", "v", *gates, "h0"), fn


_COMPILED: dict = {}


def _compiled(op: str, impl: str):
    """(forward, gradients) of `op` under `jit`, traced once per bounds length (module cache: the
    worker serves many cases)."""
    import jax

    key = (op, impl)
    if key not in _COMPILED:
        _, diff, fn = _problem(op, 0)

        def forward(primals, rest, cu):
            return fn({**rest, **primals}, cu, impl)

        def gradients(primals, rest, cu, cotangents):
            _, pullback = jax.vjp(lambda p: forward(p, rest, cu), primals)
            return pullback(cotangents)[0]

        _COMPILED[key] = diff, jax.jit(forward), jax.jit(gradients)
    return _COMPILED[key]


def run(op: str, seed: int, bounds: list[int]) -> dict:
    """Forward and gradients of `op` with `bounds` passed as a traced argument under `jit`, on the Triton
    path and the reference, as float64 NumPy arrays: {"triton": {...}, "reference": {...}}."""
    import jax.numpy as jnp
    import numpy as np

    from workbench.testing import random_cotangents

    x, _, _ = _problem(op, seed)
    cu = jnp.asarray(np.asarray(bounds, np.int64).astype(np.int32))
    results = {}
    for impl in ("triton", "reference"):
        diff, forward, gradients = _compiled(op, impl)
        primals = {name: x[name] for name in diff}
        rest = {name: a for name, a in x.items() if name not in diff}
        outputs = forward(primals, rest, cu)
        cotangents = random_cotangents(seed + 7, outputs)
        if op.startswith("flash_attention"):  # lse is −inf on empty rows: its cotangent there is irrelevant
            cotangents = (cotangents[0], jnp.where(jnp.isfinite(outputs[1]), cotangents[1], 0.0))
        grads = gradients(primals, rest, cu, cotangents)
        arrays = {"out0": outputs[0], "out1": outputs[1], **{f"d{n}": g for n, g in grads.items()}}
        results[impl] = {n: np.asarray(a, np.float64) for n, a in arrays.items()}
    return results

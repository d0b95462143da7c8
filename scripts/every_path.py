"""Run every kernel path once, forward and backward, at small sizes: each op, each `Tuning` choice that picks
other kernels, the ring's block kernels on a one-device mesh. Meant to run under a GPU checker:

    XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off \\
        compute-sanitizer --tool memcheck --print-limit 20 python scripts/every_path.py

(the platform allocator gives each buffer its own allocation, so an access past a buffer is outside any).
Prints one line per path (its wall time, and whether any output is non-finite); exits 1 if any path raised.
`python scripts/every_path.py gluon` runs only the paths whose name holds "gluon".
The inputs are `workbench verify`'s first case of each op, in bfloat16 and float32.
"""

from __future__ import annotations

import itertools
import sys
import time

import workbench  # noqa: F401  (first)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from workbench import verify  # noqa: E402
from workbench.chunk_gla import Tuning as GlaTuning  # noqa: E402
from workbench.flash_attention import Tuning as FlashTuning, gluon_unavailable  # noqa: E402
from workbench.kda import Tuning as KdaTuning  # noqa: E402


def _fwd_bwd(op, inputs, wrt, **static):
    wrt = [n for n in wrt if inputs.get(n) is not None]
    fixed = {n: x for n, x in inputs.items() if n not in wrt}

    def f(primals):
        out, pullback = jax.vjp(lambda *xs: op(**fixed, **dict(zip(wrt, xs)), **static), *primals)
        return out, pullback(jax.tree.map(jnp.ones_like, out))

    return jax.block_until_ready(jax.jit(f)([inputs[n] for n in wrt]))


GLA = ("q", "k", "v", "g", "gk", "gv", "initial_state")
KDA = ("q", "k", "v", "g", "beta", "initial_state")


def paths(dtype):
    """(name, thunk) for every path."""
    gla = verify.gated_case_inputs(verify.RECURRENT_CASES[0], dtype)
    yield "recurrent", lambda: _fwd_bwd(workbench.recurrent, gla, GLA)
    case = verify.CHUNK_GLA_CASES[0]
    chunk = verify.gated_case_inputs(case, dtype)
    for tuning in (GlaTuning(segments=1), GlaTuning(segments=3), GlaTuning(segments=3, residuals="recompute")):
        yield f"chunk_gla {tuning}", lambda t=tuning: _fwd_bwd(workbench.chunk_gla, chunk, GLA,
                                                                chunk_size=case.params["chunk_size"], tuning=t)
    # the forward alone: the two-level pass's o kernel fixes its states without storing them
    yield "chunk_gla forward alone, segments=3", lambda: jax.block_until_ready(jax.jit(
        lambda x: workbench.chunk_gla(**x, chunk_size=case.params["chunk_size"], tuning=GlaTuning(segments=3)))(
            {n: chunk[n] for n in chunk}))
    case = verify.KDA_CASES[0]
    kda = verify.kda_case_inputs(case, dtype)
    yield "recurrent_kda", lambda: _fwd_bwd(workbench.recurrent_kda, kda, KDA)
    for tuning in (KdaTuning(segments=1), KdaTuning(segments=3), KdaTuning(fused_backward=False),
                   KdaTuning(whole_chunk=False), KdaTuning(residuals="keep"), KdaTuning(residuals="recompute"),
                   KdaTuning(residuals="recompute", segments=3)):
        yield f"chunk_kda {tuning}", lambda t=tuning: _fwd_bwd(workbench.chunk_kda, kda, KDA,
                                                                chunk_size=case.params["chunk_size"], tuning=t)
    for case in verify.FLASH_CASES[:2]:
        inputs, options = verify.flash_case_inputs(case, dtype)
        tunings = [FlashTuning(dq="atomic"), FlashTuning(dq="pass"), FlashTuning(split_rows=True),
                   FlashTuning(split_rows=False), FlashTuning(forward_loads="pointers"),
                   FlashTuning(split_rows=True, forward_loads="pointers")]
        if inputs["q"].shape[-1] * jnp.dtype(dtype).itemsize % 16 == 0:
            tunings.append(FlashTuning(forward_loads="tma"))
        for tuning in tunings:
            yield f"flash_attention {case.name} {tuning}", lambda i=inputs, o=options, t=tuning: _fwd_bwd(
                workbench.flash_attention, i, ("q", "k", "v", "sinks", "bias"), tuning=t, **o)
    # the Hopper kernels (bf16/f16 only): Tq = Tk (one T not a multiple of 4), Tq < Tk, Tq > Tk, GQA
    if dtype == jnp.bfloat16 and gluon_unavailable() is None:
        for (Tq, Tk, H, Hkv, D) in ((100, 100, 4, 2, 128), (77, 77, 2, 2, 64), (40, 200, 2, 2, 64),
                                   (200, 40, 2, 1, 128)):
            att = {n: jax.random.normal(jax.random.key(i), (1, Tq if n == "q" else Tk, H if n == "q" else Hkv, D),
                                        dtype) for i, n in enumerate("qkv")}
            # the Gluon backward where it computes (Tq = Tk), the Triton one after the Gluon forward everywhere
            backwards = ("triton", "gluon") if Tq == Tk else ("triton",)
            for causal, backward in itertools.product((True, False), backwards):
                tuning = FlashTuning(forward="gluon", backward=backward)
                yield (f"flash_attention gluon Tq={Tq} Tk={Tk} H={H}/{Hkv} D={D} causal={causal} {tuning}",
                       lambda a=att, c=causal, t=tuning: _fwd_bwd(workbench.flash_attention, a, ("q", "k", "v"),
                                                                  causal=c, return_lse=True, tuning=t))
    mesh = jax.make_mesh((1,), ("sp",))
    qkv = {n: jax.random.normal(jax.random.key(i), (1, 32, 4 if n == "q" else 2, 32), dtype)
           for i, n in enumerate("qkv")}
    for causal, layout in ((True, "zigzag"), (False, "contiguous")):
        yield f"ring {layout}", lambda c=causal, lay=layout: _fwd_bwd(
            workbench.sharded_ring_attention, qkv, ("q", "k", "v"), mesh=mesh, axis_name="sp", causal=c, layout=lay)


def main() -> int:
    only = sys.argv[1] if len(sys.argv) > 1 else ""  # run only the paths whose name holds this
    failed = 0
    for dtype in (jnp.bfloat16, jnp.float32):
        for name, run in paths(dtype):
            if only not in name:
                continue
            start = time.perf_counter()
            try:
                out = run()
                finite = all(bool(jnp.isfinite(x).all()) for x in jax.tree.leaves(out)
                             if jnp.issubdtype(x.dtype, jnp.floating))
                print(f"ok    {jnp.dtype(dtype).name} {name}: {time.perf_counter() - start:.1f} s"
                      + ("" if finite else "  (non-finite outputs)"), flush=True)
            except Exception as exc:  # noqa: BLE001 - every path reports
                failed += 1
                print(f"FAIL  {jnp.dtype(dtype).name} {name}: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

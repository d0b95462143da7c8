"""The state sweeps form each chunk's update from zero, in the code the GPU runs (NOTES.md, "Accumulation
order of the state sweeps").

The interpreter computes `h * decay + dot(x, y)` as written, so only the compiled kernel shows the
fusion that made the GPU's final states and initial-state gradients err ~3× more than the reference:
Triton's combine pass rewrites `add(dot(a, b, 0), c)` into `dot(a, b, c)`. This compiles both sweeps
for sm_90 (no GPU needed: `workbench.compiler`, as the GPU launcher compiles them),
in a subprocess with the interpreter off, and checks in the TTGIR that every matrix product starts
from a zero accumulator or from the other half of the chunk's product, never from the state.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from workbench.testing import rms_rel

ROOT = Path(__file__).resolve().parents[2]

COMPILE = textwrap.dedent("""
    import json, os, sys
    os.environ["WORKBENCH_INTERPRET"] = "0"
    os.environ.pop("TRITON_INTERPRET", None)
    from workbench import compiler, launch
    from workbench.chunk_gla import kernels

    storage, BT = sys.argv[1], int(sys.argv[2])
    pointers = {"chunk_h_kernel": dict(k=storage, v=storage, gk=storage, h0="fp32", cu_seqlens="i32",
                                       ht="fp32", hs="fp32", b="fp32"),
                "chunk_dh_kernel": dict(q=storage, do=storage, gk=storage, dht="fp32", cu_seqlens="i32",
                                        dh0="fp32", dhs="fp32", b="fp32")}
    out = {}
    for name, args in pointers.items():
        jit = launch.unwrap(getattr(kernels, name))[2]
        const = dict(H=2, K=64, V=64, BT=BT, BK=32, BV=32, F32_DOT="ieee" if storage == "fp32" else "tf32",
                     scale=0.125, USE_GK=True, B_LOCAL=storage != "fp32")  # as the op launches them
        signature = {p.name: "*" + args[p.name] if p.name in args else "constexpr" for p in jit.params}
        constexprs = {p.name: const[p.name] for p in jit.params if p.name not in args}
        compiled = compiler.compile_kernel(jit, signature, constexprs, num_warps=4, num_stages=2, last="ttgir")
        out[name] = str(compiled.binary)
    print(json.dumps(out))
""")

DEFINITION = re.compile(r"^\s*(%[\w.]+)(?::\d+)? = ([\w.]+)(.*)$")
DOT = re.compile(r"\b(?:tt\.dot|ttng\.warp_group_dot) (%[\w.#]+), (%[\w.#]+), (%[\w.#]+)")


def accumulator_sources(ttgir: str) -> list[str]:
    """For each matrix product, what its accumulator is: "zero", "dot" (another product's result) or
    the defining op (a loop-carried block argument shows as "block argument")."""
    defs = {}
    for line in ttgir.splitlines():
        m = DEFINITION.match(line)
        if m:
            defs[m.group(1)] = (m.group(2), m.group(3))
    sources = []
    for line in ttgir.splitlines():
        m = DOT.search(line)
        if not m:
            continue
        name = m.group(3).split("#")[0]
        while True:
            op, rest = defs.get(name, ("block argument", ""))
            if op in ("ttng.warp_group_dot_wait", "ttg.convert_layout"):  # pass-throughs
                name = re.match(r"\s*(%[\w.]+)", rest).group(1).split("#")[0]
                continue
            break
        if op == "arith.constant":
            sources.append("zero" if re.search(r"dense<0\.0+e\+00>", rest) else f"constant {rest.strip()}")
        elif op in ("tt.dot", "ttng.warp_group_dot"):
            sources.append("dot")
        else:
            sources.append(op)
    return sources


@pytest.mark.parametrize("BT", [16, 32, 64])
@pytest.mark.parametrize("storage", ["bf16", "fp32"])
def test_state_sweeps_accumulate_each_chunk_from_zero(storage, BT):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    run = subprocess.run([sys.executable, "-c", COMPILE, storage, str(BT)], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    for name, ttgir in json.loads(run.stdout.strip().splitlines()[-1]).items():
        sources = accumulator_sources(ttgir)
        # the chunk's two halves: the first from zero, the second from the first; the state is added after. The
        # gate's prefix sums are three more products (`_half_b`, a float32 gate's bfloat16 high parts): L a0 and
        # 1 a0 from zero, L a1 from 1 a0; the float32 low parts' sums are added after, not folded into them
        want = ["dot", "dot", "zero", "zero", "zero"]
        assert sorted(sources) == want, (name, sources)


def _float32_sum(k, v, acc):
    """acc + Σ_t k_t v_tᵀ in float32, one exactly rounded FMA per row (what one tl.dot chain does)."""
    for t in range(k.shape[0]):
        acc = (acc.astype(np.float64) + np.outer(k[t], v[t]).astype(np.float64)).astype(np.float32)
    return acc


def test_error_model_of_the_two_orders():
    """The numbers in NOTES.md: at T = 1000, K = 64, V = 100 (float32, no decay), one FMA chain from the
    state errs ≈ 0.15·ε·√T = 5.7e-7 RMS-relative; each 64-row chunk from zero, added once, ≈ 1.7e-7."""
    rng = np.random.default_rng(0)
    T, K, V, C = 1000, 64, 100, 64
    k = rng.standard_normal((T, K)).astype(np.float32)
    v = rng.standard_normal((T, V)).astype(np.float32)
    exact = k.astype(np.float64).T @ v.astype(np.float64)
    fused = _float32_sum(k, v, np.zeros((K, V), np.float32))
    chunked = np.zeros((K, V), np.float32)
    for c in range(0, T, C):
        chunked = chunked + _float32_sum(k[c:c + C], v[c:c + C], np.zeros((K, V), np.float32))
    err_fused, err_chunked = rms_rel(fused, exact), rms_rel(chunked, exact)
    assert 0.12 * 2.0 ** -23 * T ** 0.5 < err_fused < 0.18 * 2.0 ** -23 * T ** 0.5, err_fused
    assert err_chunked < 2.2e-7 and err_fused > 2.5 * err_chunked, (err_fused, err_chunked)

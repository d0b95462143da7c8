"""The traced ring on 2, 4 and 8 host devices: forward and gradients (random cotangents) against the
float64 oracle on the gathered sequence, held to 1.5× the error of `flash_attention` in the same
dtype on one device (`workbench.testing.compare`), and close to `flash_attention` with the same
implementation; causal and not, contiguous and zigzag, Triton (interpreted) and reference blocks,
GQA, odd local lengths, both entry points. Triton cases also count the kernels launched: skipped
causal blocks must not run.

XLA fixes the host device count when JAX starts, so every case runs in one subprocess with 8 host
devices (`multidevice.py`, one JAX start), each on a mesh of its first n; the tests read its JSON and
check that the ring's output lies on n devices.
"""

from __future__ import annotations

import collections
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("multidevice.py")
ROOT = SCRIPT.parents[2]


def case(n, implementation, dtype, causal, layout, T, H=2, Hkv=2, B=1, D=16, api="sharded", seed=0,
         flash_same=False):
    return dict(n=n, implementation=implementation, dtype=dtype, causal=causal, layout=layout, B=B, T=T, H=H,
                Hkv=Hkv, D=D, api=api, seed=seed, flash_same=flash_same)


# T is the local length per device; Triton cases stay tiny (the interpreter), D = 16, H = 2. One case
# per device count also runs flash_attention with its own implementation on the gathered sequence.
# An interpreted launch costs ~50 ms: 8 devices run Triton on the contiguous layout (36 blocks, 28
# skipped), zigzag (64 blocks) on 2 and 4.
CASES = {
    2: [case(2, "triton", "float32", True, "zigzag", 8, Hkv=1, seed=1, flash_same=True),
        case(2, "triton", "bfloat16", True, "contiguous", 9, api="shard_map", seed=2),
        case(2, "triton", "float32", False, "zigzag", 10, api="shard_map", seed=3),
        case(2, "reference", "float32", True, "contiguous", 7, H=4, Hkv=2, seed=4),
        case(2, "reference", "float32", False, "contiguous", 8, B=2, seed=5),
        dict(case(2, "triton", "float32", False, "contiguous", 9), invalid=True),   # T global here
        dict(case(2, "triton", "float32", False, "zigzag", 10), invalid=True)],
    4: [case(4, "triton", "float32", True, "contiguous", 8, seed=6, flash_same=True),
        case(4, "triton", "float32", True, "zigzag", 6, Hkv=1, api="shard_map", seed=7),
        case(4, "reference", "bfloat16", True, "zigzag", 8, H=4, Hkv=1, seed=8)],
    8: [case(8, "triton", "float32", True, "contiguous", 5, Hkv=1, seed=9, flash_same=True),
        case(8, "reference", "float32", True, "zigzag", 6, api="shard_map", seed=10)],
}


def case_id(c):
    gqa = f"-gqa{c['H']}:{c['Hkv']}" if c["H"] != c["Hkv"] else ""
    if c.get("invalid"):
        return f"n{c['n']}-invalid-{c['layout']}-T{c['T']}"
    return (f"n{c['n']}-{c['implementation']}-{c['dtype']}-{'causal' if c['causal'] else 'full'}-{c['layout']}"
            f"-T{c['T']}{gqa}-{c['api']}")


def results(n: int) -> dict[str, dict]:
    """Every case of `n` devices: {case id: result}."""
    returncode, stdout, stderr = _run()
    if returncode:
        raise AssertionError(f"{SCRIPT.name} {max(CASES)} failed ({returncode}):\n{stderr[-6000:]}")
    return {case_id(r["case"]): r for r in json.loads(stdout) if r["case"]["n"] == n}


@functools.cache
def _run():
    """The subprocess, once for every case (its failure too: every test reports it). Cached per process:
    under pytest-xdist every test of this module runs on one worker (tests/conftest.py, SAME_WORKER)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cases = [c for n in sorted(CASES) for c in CASES[n]]
    run = subprocess.run([sys.executable, str(SCRIPT), str(max(CASES))], input=json.dumps(cases),
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    return run.returncode, run.stdout, run.stderr


def expected_launches(c) -> int:
    """Blocks computed over all devices and steps: causal contiguous skips the n(n−1)/2 later ones."""
    n = c["n"]
    return n * (n + 1) // 2 if c["causal"] and c["layout"] == "contiguous" else n * n


ALL = [c for n in sorted(CASES) for c in CASES[n] if not c.get("invalid")]
INVALID = [c for n in sorted(CASES) for c in CASES[n] if c.get("invalid")]


@pytest.mark.parametrize("c", ALL, ids=[case_id(c) for c in ALL])
def test_ring_matches_full_sequence(c):
    r = results(c["n"])[case_id(c)]
    assert r["devices"] == c["n"]
    table = "\n".join(x["line"] for x in r["comparisons"])
    assert all(x["ok"] for x in r["comparisons"]), f"over budget:\n{table}"
    if r["rms_rel_to_flash"] is not None:  # and the same as flash_attention on the gathered sequence
        worst = max(x["tolerance"] for x in r["comparisons"])
        assert max(r["rms_rel_to_flash"].values()) <= 2 * worst, (r["rms_rel_to_flash"], table)


TRITON = [c for c in ALL if c["implementation"] == "triton"]


@pytest.mark.parametrize("c", TRITON, ids=[case_id(c) for c in TRITON])
def test_skipped_blocks_do_not_run(c):
    """One forward kernel per computed block, one backward kernel (the dK/dV pass, which also adds dQ by
    atomics: no dQ pass); none for skipped ones. Launches are grouped by pass (flash attention may pick
    among several forward kernels)."""
    r = results(c["n"])[case_id(c)]
    blocks = expected_launches(c)
    by_pass = collections.Counter()
    for name, count in r["launches"].items():
        by_pass[_pass_of(name)] += count
    assert dict(by_pass) == {"forward": blocks, "dkdv": blocks}, r["launches"]


def _pass_of(kernel_name: str) -> str:
    for key, pass_ in (("dkdv", "dkdv"), ("bwd_dq", "dq"), ("fwd", "forward")):
        if key in kernel_name:
            return pass_
    return kernel_name


@pytest.mark.parametrize("c", INVALID, ids=[case_id(c) for c in INVALID])
def test_sequence_must_split_over_the_devices(c):
    """T = 9 over 2 devices, T = 10 over 2 devices in 4 zigzag chunks: ValueError naming q and T."""
    r = results(c["n"])[case_id(c)]
    pieces = c["n"] * (2 if c["layout"] == "zigzag" else 1)
    assert r["error"] is not None and r["error"].startswith("q:"), r["error"]
    assert f"T={c['T']}" in r["error"] and f"divisible by {pieces}" in r["error"], r["error"]

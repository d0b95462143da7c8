"""Every op on several devices (4 host devices, a 2 × 2 mesh "data" × "model"), forward and gradient under `jit`:

* inside `jax.shard_map` with `jax.grad` (the user's own shard_map: outputs and cotangents carry the
  inputs' varying manual axes);
* on an explicit-axes mesh, batch sharded over "data" and heads over "model" (the op builds the shard_map
  from the inputs' types);
* on an automatic-axes mesh, batch sharded over both axes (data parallelism);
* on an automatic-axes mesh, heads sharded over both axes, or batch over "data" and heads over "model": the
  op keeps that layout (custom calls partitioned once the partitioner knows it, workbench/_partitioned.py).
  On a CPU these run the reference implementation (the interpreter's kernel launches are host callbacks, which
  cannot run inside such calls); the `gpu` test adds the compiled kernels with the heads split.

Each case must equal the same computation on unsharded arrays, keep its inputs' sharding on its outputs,
and compile without moving its inputs: no all-gather, all-to-all or collective-permute (an all-reduce only
where a gradient is summed over the batch: attention sinks). A sequence sharded across devices is a
ValueError naming the argument and pointing to what to use. The cases run in one subprocess
(`tests/sharding_worker.py`) that sees 4 devices (on a CPU; on a GPU machine, its GPUs: the `gpu` test
below runs the same cases compiled).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OPS = ("recurrent", "chunk_gla", "chunk_kda", "recurrent_kda", "flash_attention")
CASES = ([dict(op=op, mode=mode, layout="batch+heads") for op in OPS for mode in ("shard_map", "explicit")]
         + [dict(op=op, mode="automatic", layout="batch") for op in OPS]
         + [dict(op=f"{op}:reference", mode="explicit", layout="batch+heads") for op in OPS]
         + [dict(op=f"{op}:reference", mode="automatic", layout="batch") for op in ("chunk_gla", "flash_attention")]
         # automatic mesh, the layout kept as it comes (custom calls partitioned once it is known, _partitioned.py):
         # the reference path runs them on a CPU, the compiled kernels on GPUs (the interpreter's callbacks cannot)
         + [dict(op=f"{op}:reference", mode="automatic", layout=layout) for op in OPS
            for layout in ("heads", "batch+heads") if op != "flash_attention" or layout != "heads"]
         + [dict(op="flash_attention_packed:reference", mode="automatic", layout="heads")]  # an int input: no gradient
         + [dict(op="flash_attention_packed", mode="explicit", layout="heads"),
            dict(op="flash_attention_packed", mode="automatic", layout="heads")])
# the compiled kernels on an automatic mesh with the heads split (on a CPU the interpreter keeps the batch-first
# rule, its launches being host callbacks): GPUs only
GPU_CASES = [dict(op=op, mode="automatic", layout="heads") for op in OPS]
REFUSED = [dict(op="flash_attention", mode="explicit", layout="sequence"),
           dict(op="recurrent", mode="explicit", layout="sequence")]
BENCH = [dict(op="chunk_gla", mode="data_parallel", layout="batch")]
MOVES = ("all-gather", "all-to-all", "collective-permute", "reduce-scatter")


@functools.cache
def results() -> dict[str, dict]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "sharding_worker.py")],
                          input=json.dumps(CASES + REFUSED + BENCH + (GPU_CASES if _gpus() >= 2 else [])),
                          capture_output=True, text=True, env=env,
                          timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {_id(r): r for r in json.loads(proc.stdout)}


def _gpus() -> int:
    """GPUs this machine shows (0 on a CPU-only machine: the worker then sees 4 host devices)."""
    import jax

    return sum(d.platform == "gpu" for d in jax.devices())


def _id(case) -> str:
    return f"{case['op']}-{case['mode']}-{case['layout']}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_sharded_equals_unsharded_without_moving_inputs(case):
    r = results()[_id(case)]
    assert "error" not in r, r.get("error")
    print(r)
    assert r["max_rel_diff"] <= 1e-5, r
    assert not any(r["collectives"][c] for c in MOVES), r["collectives"]
    sums = 1 if case["op"].startswith("flash_attention:") or case["op"] == "flash_attention" else 0  # dsinks: psum
    assert r["collectives"]["all-reduce"] <= sums, r["collectives"]
    assert r["out_specs"][0] == r["in_specs"][0], (r["out_specs"], r["in_specs"])  # o keeps q's sharding
    if case["mode"] != "automatic":
        assert any(axis in r["out_specs"][0] for axis in ("data", "model")), r["out_specs"]


@pytest.mark.parametrize("case", REFUSED, ids=_id)
def test_a_sharded_sequence_is_a_value_error(case):
    error = results()[_id(case)].get("error", "")
    assert error.startswith("q: dimension 1 (T") and "is sharded over ('data',)" in error, error
    if case["op"] == "flash_attention":
        assert "workbench.ring_attention" in error, error
    else:
        assert "keep T whole on each device" in error, error


def test_the_data_parallel_bench_records_both_runs_and_finds_no_collective():
    """`workbench bench --data-parallel` (its harness, on 4 host devices and a small batch): both passes timed
    sharded and on one device with a quarter of the batch, no collective in the compiled program, the
    sharded outputs and gradients equal to one device's on the whole batch."""
    record = results()[_id(BENCH[0])]["record"]
    assert record["device_count"] >= 2 and record["mesh"]["data"] == record["device_count"]
    assert [r["pass"] for r in record["results"]] == ["forward", "forward_backward"]
    for r in record["results"]:
        assert r["sharded_ms"]["median"] > 0 and r["share_ms"]["median"] > 0
        assert r["ratio"] == r["sharded_ms"]["median"] / r["share_ms"]["median"]
        assert not any(r["collectives"].values()), r["collectives"]
        assert all(e["rms_rel"] <= 1e-2 for e in r["errors"].values()), r["errors"]  # bf16, one rounding apart
    assert set(record["results"][1]["errors"]) == {"o", "final_state", "dq", "dk", "dv", "dgk"}


@pytest.mark.gpu
def test_every_case_on_gpus():
    """The same cases with the kernels compiled, on every visible GPU (a mesh of (2, 1) on two; skipped below two)."""
    import jax

    if jax.device_count() < 2:
        pytest.skip(f"needs two or more GPUs, this machine has {jax.device_count()}")
    for case in CASES + GPU_CASES:
        test_sharded_equals_unsharded_without_moving_inputs(case)
    for case in REFUSED:
        test_a_sharded_sequence_is_a_value_error(case)
    test_the_data_parallel_bench_records_both_runs_and_finds_no_collective()

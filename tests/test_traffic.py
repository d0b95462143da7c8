"""`workbench.bench.traffic`: each launch of an op's pass with the bytes of its arrays, traced abstractly."""

import workbench  # noqa: F401  (first: configures Triton's interpreter before triton loads)

import jax.numpy as jnp
import pytest

from workbench import bench, launch
from workbench.bench.spec import parse_shape
from workbench.bench.traffic import launch_bytes, pass_traffic

SHAPE = dict(B=1, T=128, H=2, K=16, V=32)


def test_each_launch_counts_its_arrays_and_outputs_once():
    """chunk_gla's first launch is the gate's cumulative sum: it reads the gate (and the chunk bounds, a few
    int32 rows) and writes float32 [T, H, K] (and a flag per chunk and head, a few int32 rows)."""
    rows = pass_traffic(bench.OPS["chunk_gla"], SHAPE, jnp.bfloat16, "forward")
    first = rows[0]
    gate = SHAPE["T"] * SHAPE["H"] * SHAPE["K"] * 2
    b = SHAPE["T"] * SHAPE["H"] * SHAPE["K"] * 4
    assert first.kernel == "chunk_b_kernel"
    assert b <= first.written < b + 1024, first
    assert gate <= first.read < gate + 1024, first
    assert [r.kernel for r in rows[-2:]] == ["chunk_a_kernel", "chunk_o_kernel"]
    o = rows[-1]
    assert o.written == SHAPE["T"] * SHAPE["H"] * SHAPE["V"] * 2  # o alone, in the inputs' dtype


def test_the_backward_forms_the_gates_cumulative_sums_again():
    """chunk_gla's forward keeps no cumulative sums for the backward (its NOTES): the backward launches the
    kernel that forms them a second time, after every forward launch."""
    op = bench.OPS["chunk_gla"]
    forward = pass_traffic(op, SHAPE, jnp.bfloat16, "forward")
    both = pass_traffic(op, SHAPE, jnp.bfloat16, "forward_backward")
    assert both[:len(forward)] == forward
    assert [r.kernel for r in both[len(forward):]].count("chunk_b_kernel") == 1


def test_a_compiled_triton_cannot_be_observed(monkeypatch):
    monkeypatch.setattr(launch, "INTERPRET", False)
    with pytest.raises(RuntimeError, match="WORKBENCH_INTERPRET=1"):
        launch_bytes(lambda: None)


def test_a_bad_pass_or_shape_is_a_value_error():
    with pytest.raises(ValueError, match="pass_: expected one of forward, forward_backward, got 'backward'"):
        pass_traffic(bench.OPS["chunk_gla"], SHAPE, jnp.bfloat16, "backward")
    assert parse_shape("B=1,T=64") == {"B": 1, "T": 64}
    with pytest.raises(ValueError, match="--shape: expected NAME=INT pairs, got 'T' in 'B=1,T'"):
        parse_shape("B=1,T")


def test_the_script_prints_the_same_launches_as_json():
    """`scripts/kernel_traffic.py --json` (what the benchmarks notebook runs in a child on a GPU machine, with
    the interpreter forced) gives the launches `pass_traffic` gives here."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    text = ",".join(f"{k}={v}" for k, v in SHAPE.items())
    out = subprocess.run([sys.executable, str(root / "scripts" / "kernel_traffic.py"), "--op", "chunk_gla",
                          "--shape", text, "--json", "--passes", "forward"],
                         env={**os.environ, "WORKBENCH_INTERPRET": "1"}, capture_output=True, text=True, check=True)
    found = json.loads(out.stdout.strip().splitlines()[-1])
    here = pass_traffic(bench.OPS["chunk_gla"], SHAPE, jnp.bfloat16, "forward")
    assert [(r["kernel"], r["read"], r["written"]) for r in found["launches"]["forward"]] == \
        [(r.kernel, r.read, r.written) for r in here]
    assert found["least"]["forward"] == bench.OPS["chunk_gla"].bytes(SHAPE, "bfloat16")[0]

"""`workbench.bench.traffic`: each launch of an op's pass with the bytes of its arrays, traced abstractly."""

import workbench  # noqa: F401  (first: configures Triton's interpreter before triton loads)

import jax.numpy as jnp
import pytest

from workbench import bench, launch
from workbench.bench.spec import parse_shape
from workbench.bench.traffic import launch_bytes, pass_traffic

SHAPE = dict(B=1, T=128, H=2, K=16, V=32)


def _sizes():
    T, H, K, V = SHAPE["T"], SHAPE["H"], SHAPE["K"], SHAPE["V"]
    chunks = T // 64 + SHAPE["B"] + 1  # chunk slots (chunk_size 64, one sequence: workbench._bounds.chunk_slots)
    return dict(gate=T * H * K * 2, k=T * H * K * 2, v=T * H * V * 2, b=T * H * K * 4, state=H * K * V * 4,
                states=chunks * H * K * V * 4, states_bf16=chunks * H * K * V * 2, b_L=chunks * H * K * 4)


def test_each_launch_counts_its_arrays_and_outputs_once():
    """chunk_gla's first launch is the forward state sweep: it reads k, v, the gate and the initial state (and the
    sequence bounds, a few int32 rows) and writes the final state (float32), the state at each chunk slot (in
    bfloat16, as the o kernel rounds them: no backward follows) and, of the bfloat16 gate's cumulative sums b, only
    each chunk's last row b_L, float32 [slots, H, K]: the o kernel reads q, k, v, the gate (forming b itself), the
    states, A and b_L, not b."""
    rows = pass_traffic(bench.OPS["chunk_gla"], SHAPE, jnp.bfloat16, "forward")
    first, size = rows[0], _sizes()
    assert first.kernel == "chunk_h_kernel"
    assert first.written == size["state"] + size["states_bf16"] + size["b_L"], first
    read = size["k"] + size["v"] + size["gate"] + size["state"]
    assert read <= first.read < read + 1024, first
    assert [r.kernel for r in rows[-2:]] == ["chunk_a_kernel", "chunk_o_kernel"]
    o = rows[-1]
    # o alone, in the inputs' dtype (and a one-element placeholder for the states it stores in the two-level pass)
    assert 0 <= o.written - SHAPE["T"] * SHAPE["H"] * SHAPE["V"] * 2 <= 2, o
    A = SHAPE["T"] * SHAPE["H"] * 64 * 2
    read = 2 * size["k"] + size["v"] + size["gate"] + size["states_bf16"] + A + size["b_L"]
    assert read <= o.read < read + 1024, o


def test_the_two_level_forward_fixes_its_states_in_the_o_kernel():
    """In the two-level pass (gla.13) the o kernel reads the segment sweep's float32 local states, the segments'
    entering states, the decays D_c and segment rows, and fixes each chunk's state where it reads it: the forward
    launches no fix-up kernel, and stores the fixed states (in v's dtype) only when a backward follows, from the o
    kernel. The backward's dv kernel fixes dH so and stores it back (float32, in place) for the dqkg kernel."""
    from workbench.chunk_gla import Tuning

    op, size = bench.OPS["chunk_gla"], _sizes()
    options = dict(tuning=Tuning(segments=2))
    forward = pass_traffic(op, SHAPE, jnp.bfloat16, "forward", options)
    both = pass_traffic(op, SHAPE, jnp.bfloat16, "forward_backward", options)
    names = [r.kernel for r in forward]
    assert names[0] == "chunk_segment_sweep_kernel" and "chunk_state_pass_kernel" in names, names
    assert "chunk_state_fixup_kernel" not in names and names[-1] == "chunk_o_kernel", names
    o_alone, o_saving = forward[-1], both[len(forward) - 1]
    assert o_saving.kernel == "chunk_o_kernel"
    out = SHAPE["T"] * SHAPE["H"] * SHAPE["V"] * 2
    assert 0 <= o_alone.written - out <= 2, o_alone
    assert o_saving.written == out + size["states_bf16"], o_saving
    # local states in float32 (not the fixed ones in bfloat16), S_j of the 2 segments, D_c, a segment row per slot
    slots = size["states"] // (SHAPE["H"] * SHAPE["K"] * SHAPE["V"] * 4)
    extra = size["states"] + 2 * size["state"] + size["b_L"] + slots * 4
    A = SHAPE["T"] * SHAPE["H"] * 64 * 2
    read = 2 * size["k"] + size["v"] + size["gate"] + A + size["b_L"] + extra
    assert read <= o_alone.read < read + 1024, o_alone
    backward = both[len(forward):]
    assert "chunk_state_fixup_kernel" not in [r.kernel for r in backward]
    dv = next(r for r in backward if r.kernel == "chunk_dv_kernel")
    assert dv.written == SHAPE["T"] * SHAPE["H"] * SHAPE["V"] * 2 + size["states"], dv


def test_the_backward_forms_the_gates_cumulative_sums_from_the_gate():
    """chunk_gla's forward keeps no cumulative sums for the backward (its NOTES) and stores its states as the o
    kernel reads them whether a backward follows or not: the forward of forward+backward moves the forward alone's
    bytes, launch for launch. The backward's state sweep writes dS_0, dH at each chunk slot (float32) and, of the
    bfloat16 gate's cumulative sums, b_L again; the dv kernel reads the gate and b_L, not b."""
    op = bench.OPS["chunk_gla"]
    forward = pass_traffic(op, SHAPE, jnp.bfloat16, "forward")
    both = pass_traffic(op, SHAPE, jnp.bfloat16, "forward_backward")
    size = _sizes()
    assert both[:len(forward)] == forward
    backward = both[len(forward):]
    assert backward[0].kernel == "chunk_dh_kernel"
    assert backward[0].written == size["state"] + size["states"] + size["b_L"], backward[0]
    assert "chunk_h_kernel" not in [r.kernel for r in backward]
    dv = next(r for r in backward if r.kernel == "chunk_dv_kernel")
    A = SHAPE["T"] * SHAPE["H"] * 64 * 2
    read = 2 * size["k"] + size["v"] + size["gate"] + size["b_L"] + A + size["states"]  # q, k, do, the gate, ...
    assert read <= dv.read < read + 1024, dv


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

"""`workbench bench --op ring_attention` on the tiny shape set (interpreted on CPU, this process's one
device): the record, the refusal of the target on CPU, and the reading of the compiled schedule."""

import json
import math

import pytest

import workbench  # noqa: F401  (first: interpreted Triton on CPU)
from workbench import cli, launch
from workbench.bench import ring as bench_ring

RESULT_KEYS = {"devices", "layout", "pass", "shape", "ring_ms", "single_ms", "share_ms", "efficiency",
               "meets_target", "errors", "overlap"}


def test_tiny_run_writes_a_record(tmp_path, capsys):
    assert cli.main(["bench", "--op", "ring_attention", "--shapes", "tiny", "--iters", "1",
                     "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("ring_attention-*.json")
    record = json.loads(path.read_text())
    assert record["op"] == "ring_attention" and record["shape_set"] == "tiny" and record["dtype"] == "bfloat16"
    assert record["interpreted"] is launch.INTERPRET and record["device_count"] >= 1
    assert {"name", "kind", "platform"} <= set(record["device"]) and "jax" in record["versions"]
    assert set(record["definitions"]) == {"ring_ms", "single_ms", "share_ms", "efficiency"}
    rows = record["results"]
    assert {(r["devices"], r["layout"], r["pass"]) for r in rows} == {
        (m, layout, p) for m in bench_ring.ring_sizes(record["device_count"]) for layout in ("contiguous", "zigzag")
        for p in ("forward", "forward_backward")}
    for r in rows:
        assert RESULT_KEYS <= set(r)
        assert math.isclose(r["share_ms"], r["single_ms"]["median"] / r["devices"])
        assert math.isclose(r["efficiency"], r["share_ms"] / r["ring_ms"]["median"])
        assert set(r["errors"]) == ({"o"} if r["pass"] == "forward" else {"o", "dq", "dk", "dv"})
        assert all(e["rms_rel"] < 2e-2 for e in r["errors"].values()), r["errors"]  # bf16 vs the single run
    out = capsys.readouterr().out
    assert "efficiency" in out and "INTERPRETED" in out


def test_target_is_refused_on_cpu():
    if not launch.INTERPRET:
        pytest.skip("on a GPU the target runs")
    with pytest.raises(Exception, match="interpreter"):
        bench_ring.run("target")


def test_ring_sizes():
    assert bench_ring.ring_sizes(1) == [1]
    assert bench_ring.ring_sizes(2) == [1, 2]
    assert bench_ring.ring_sizes(6) == [1, 2, 4, 6]
    assert bench_ring.ring_sizes(8) == [1, 2, 4, 8]


SCHEDULED = """HloModule ring, is_scheduled=true

%branch (p: bf16[1,8,2,16]) -> f32[1,8,2,16] {
  %cc = f32[1,8,2,16] custom-call(%p), custom_call_target="triton_kernel_call"
}

ENTRY %main (a: bf16[1,8,2,16]) -> f32[1,8,2,16] {
  %collective-permute-start = (bf16[1,8,2,16], bf16[1,8,2,16]) collective-permute-start(%a), channel_id=1
  %custom-call.1 = f32[1,8,2,16] custom-call(%a), custom_call_target="triton_kernel_call"
  %collective-permute-done = bf16[1,8,2,16] collective-permute-done(%collective-permute-start)
  %collective-permute-start.1 = (bf16[1,8,2,16], bf16[1,8,2,16]) collective-permute-start(%collective-permute-done)
  %conditional = f32[1,8,2,16] conditional(%pred, %collective-permute-done, %a), branch_computations={%branch, %branch}
  %conditional.2 = f32[1,8,2,16] conditional(%pred, %collective-permute-done, %a), branch_computations={%branch, %branch}
  %collective-permute-done.1 = bf16[1,8,2,16] collective-permute-done(%collective-permute-start.1)
  %collective-permute-start.2 = (bf16[1,8,2,16], bf16[1,8,2,16]) collective-permute-start(%a)
  %collective-permute-done.2 = bf16[1,8,2,16] collective-permute-done(%collective-permute-start.2)
  ROOT %custom-call.3 = f32[1,8,2,16] custom-call(%collective-permute-done.2), custom_call_target="x"
}
"""


def test_overlap_report_reads_the_schedule():
    """Kernels between each start and its done, in the ENTRY computation only; a done right after its
    start (the last pair) overlaps nothing."""
    report = bench_ring.overlap_report(SCHEDULED)
    assert report == {"async_permutes": 3, "overlapped": 2, "kernels_between": [1, 2, 0]}
    assert bench_ring.overlap_report("HloModule m\n") == {"async_permutes": 0, "overlapped": 0,
                                                          "kernels_between": []}

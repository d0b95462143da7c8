"""`workbench bench` end to end on the tiny shape set (interpreted on CPU): records, refusals, WRONG."""

import json
import math
import sys

import pytest

import workbench
from workbench import bench, cli, launch

RECORD_KEYS = {"op", "harness", "command", "interpreted", "date", "device", "versions", "git", "shape_set",
               "shapes", "dtype", "iters", "warmup", "implementations", "peers", "results"}
RESULT_KEYS = {"shape", "implementation", "kind", "pass", "ms", "bytes", "gb_per_s", "fraction_of_peak",
               "ratio_to_best_peer", "errors", "status"}


def _records(out):
    return sorted(out.glob("recurrent-*.json"))


def _bench(out, *extra):
    return cli.main(["bench", "--op", "recurrent", "--shapes", "tiny", "--iters", "2", "--out", str(out), *extra])


@pytest.fixture
def no_fla(monkeypatch):
    monkeypatch.setitem(sys.modules, "fla", None)  # import fla → ImportError, whatever is installed


def test_tiny_run_writes_one_record_and_a_second_run_another(tmp_path, capsys, no_fla):
    assert _bench(tmp_path, "--peers") == 0
    captured = capsys.readouterr()
    (first,) = _records(tmp_path)
    record = json.loads(first.read_text())
    assert RECORD_KEYS <= set(record)
    assert record["op"] == "recurrent" and record["dtype"] == "bfloat16" and record["shape_set"] == "tiny"
    assert record["interpreted"] is launch.INTERPRET
    assert {"name", "kind", "platform", "driver", "peak_bytes_per_s"} <= set(record["device"])
    assert {"python", "jax", "jaxlib", "triton"} <= set(record["versions"])
    assert record["peers"] == [{"peer": "fla.ops.gla.fused_recurrent_gla", "status": "not installed"}]
    results = record["results"]
    assert {(r["implementation"], r["pass"]) for r in results} == {
        (impl, p) for impl in ("triton", "reference") for p in ("forward", "forward_backward")}
    for r in results:
        assert RESULT_KEYS <= set(r)
        assert all(math.isfinite(r["ms"][s]) and r["ms"][s] > 0 for s in ("median", "min", "p90"))
        assert r["ms"]["min"] <= r["ms"]["median"] <= r["ms"]["p90"]
        assert r["status"] == "ok" and r["ratio_to_best_peer"] is None  # no peer measured
    grads = next(r for r in results if r["implementation"] == "triton" and r["pass"] == "forward_backward")
    assert set(grads["errors"]) == {"o", "final_state", "dq", "dk", "dv", "dgk"}
    assert "triton" in captured.out and "not installed" in captured.out
    assert captured.err.count("recurrent B=1 T=16") == 2  # one progress line per (shape, implementation)
    if launch.INTERPRET:
        assert "meaningless" in captured.err

    assert _bench(tmp_path, "--implementations", "reference") == 0
    records = _records(tmp_path)
    assert len(records) == 2 and first in records
    assert json.loads(first.read_text()) == record  # untouched
    second = json.loads(next(p for p in records if p != first).read_text())
    assert {r["implementation"] for r in second["results"]} == {"reference"}


def test_a_record_is_never_overwritten(tmp_path):
    path = bench.write({"op": "recurrent"}, tmp_path, stamp="20260101T000000Z")
    with pytest.raises(bench.Refused, match="never overwritten"):
        bench.write({"op": "recurrent", "other": 1}, tmp_path, stamp="20260101T000000Z")
    assert json.loads(path.read_text()) == {"op": "recurrent"}


@pytest.mark.skipif(not launch.INTERPRET, reason="the refusal is for CPU-only machines")
def test_large_shapes_are_refused_on_cpu(tmp_path, capsys):
    status = cli.main(["bench", "--shapes", "target", "--out", str(tmp_path)])
    assert status == 2
    err = capsys.readouterr().err
    assert "refused" in err and "interpreter" in err and "--shapes tiny" in err
    assert not list(tmp_path.iterdir())


def test_a_wrong_kernel_is_marked_and_not_ranked(tmp_path, capsys, monkeypatch):
    correct = workbench.recurrent

    def off(*args, implementation=None, **kwargs):  # the reference underneath: fast in the interpreter
        o, state = correct(*args, implementation="reference", **kwargs)
        return (o + 0.5 if implementation != "reference" else o), state

    monkeypatch.setattr(workbench, "recurrent", off)
    assert _bench(tmp_path) == 0
    (path,) = _records(tmp_path)
    results = json.loads(path.read_text())["results"]
    status = {(r["implementation"], r["pass"]): r["status"] for r in results}
    assert status == {("triton", "forward"): "WRONG", ("triton", "forward_backward"): "WRONG",
                      ("reference", "forward"): "ok", ("reference", "forward_backward"): "ok"}
    wrong = next(r for r in results if r["implementation"] == "triton" and r["pass"] == "forward")
    assert wrong["errors"]["o"]["rms_rel"] > bench.WRONG_RMS_REL["bfloat16"]
    assert wrong["errors"]["final_state"]["rms_rel"] == 0.0 and wrong["ratio_to_best_peer"] is None
    assert "WRONG" in capsys.readouterr().out


@pytest.mark.gpu
def test_target_on_gpu_times_the_kernel_faster_than_the_reference(tmp_path):
    status = cli.main(["bench", "--op", "recurrent", "--shapes", "target", "--iters", "5", "--peers",
                       "--out", str(tmp_path)])
    assert status == 0
    (path,) = _records(tmp_path)
    record = json.loads(path.read_text())
    assert not record["interpreted"] and record["device"]["platform"] == "gpu"
    ms = {(r["implementation"], r["pass"]): r for r in record["results"]}
    for p in ("forward", "forward_backward"):
        assert ms[("triton", p)]["status"] == "ok"
        assert ms[("triton", p)]["ms"]["median"] < ms[("reference", p)]["ms"]["median"]
        assert ms[("triton", p)]["gb_per_s"] > 0
    if record["device"]["peak_bytes_per_s"]:
        assert 0 < ms[("triton", "forward")]["fraction_of_peak"] < 1
    assert all(p["status"] in ("measured", "not installed") for p in record["peers"])


def test_flash_attention_tiny_run_records_flops_and_the_xla_peer(tmp_path, capsys):
    """Attention rows carry FLOPs and TFLOP/s; the XLA peer runs anywhere, cuDNN is skipped with a reason off-GPU."""
    assert cli.main(["bench", "--op", "flash_attention", "--shapes", "tiny", "--iters", "1", "--peers",
                     "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("flash_attention-*.json")
    record = json.loads(path.read_text())
    rows = record["results"]
    names = {r["implementation"] for r in rows}
    assert {"triton", "reference", "jax.nn.dot_product_attention[xla]"} <= names
    B, T, H, D = 1, 32, 2, 16
    forward = next(r for r in rows if r["implementation"] == "triton" and r["pass"] == "forward")
    assert forward["flops"] == 4 * B * H * T * T * D * 0.5  # causal: half the score matrix
    assert forward["tflops_per_s"] == pytest.approx(forward["flops"] / (forward["ms"]["median"] / 1e3) / 1e12)
    assert all(r["status"] == "ok" for r in rows)  # the kernel agrees with the reference and with XLA
    statuses = {p["peer"]: p["status"] for p in record["peers"]}
    if launch.INTERPRET:
        assert statuses["jax.nn.dot_product_attention[cudnn]"].startswith("skipped")
    assert set(next(r for r in rows if r["pass"] == "forward_backward")["errors"]) == {"o", "dq", "dk", "dv"}


def test_chunk_gla_tiny_run_compares_with_the_reference(tmp_path, no_fla):
    """chunk_gla rows: triton and reference agree, every gradient is compared, the fla peer is reported."""
    assert cli.main(["bench", "--op", "chunk_gla", "--shapes", "tiny", "--iters", "1", "--peers",
                     "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("chunk_gla-*.json")
    record = json.loads(path.read_text())
    assert record["op"] == "chunk_gla" and record["targets_ms"]["target"] == {"forward": 0.72, "forward_backward": 3.0}
    assert record["peers"] == [{"peer": "fla.ops.gla.chunk_gla", "status": "not installed"}]
    rows = record["results"]
    assert {(r["implementation"], r["pass"]) for r in rows} == {
        (impl, p) for impl in ("triton", "reference") for p in ("forward", "forward_backward")}
    assert all(r["status"] == "ok" for r in rows)
    grads = next(r for r in rows if r["implementation"] == "triton" and r["pass"] == "forward_backward")
    assert set(grads["errors"]) == {"o", "final_state", "dq", "dk", "dv", "dgk"}
    assert 0 < grads["errors"]["dq"]["rms_rel"] < bench.WRONG_RMS_REL["bfloat16"]

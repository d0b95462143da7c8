"""`workbench bench` end to end on the tiny shape set (interpreted on CPU): records, refusals, WRONG."""

import dataclasses
import importlib.util
import json
import math
import os
import sys

import jax
import numpy as np
import pytest

import workbench
from workbench import bench, cli, launch

RECORD_KEYS = {"op", "harness", "command", "interpreted", "date", "device", "versions", "git", "shape_set",
               "shapes", "tokens", "dtype", "iters", "reps", "timer", "warmup", "implementations", "peers", "limits", "error_sources",
               "skipped", "results", "errors_from", "complete"}
RESULT_KEYS = {"shape", "implementation", "kind", "pass", "ms", "timer", "copies", "bytes", "gb_per_s", "fraction_of_peak",
               "ratio_to_best_peer", "error_source", "errors", "status"}


def _records(out):
    return sorted(out.glob("recurrent-*.json"))


def _bench(out, *extra):
    return cli.main(["bench", "--op", "recurrent", "--shapes", "tiny", "--iters", "1", "--out", str(out), *extra])


@pytest.fixture
def no_fla(monkeypatch):
    monkeypatch.setitem(sys.modules, "fla", None)  # import fla → ImportError, whatever is installed


@pytest.fixture
def no_ejkernel(monkeypatch):
    monkeypatch.setitem(sys.modules, "ejkernel", None)


def test_tiny_run_writes_one_record_and_a_second_run_another(tmp_path, capsys, no_fla, no_ejkernel):
    assert _bench(tmp_path, "--peers") == 0
    captured = capsys.readouterr()
    (first,) = _records(tmp_path)
    record = json.loads(first.read_text())
    assert RECORD_KEYS <= set(record)
    assert record["op"] == "recurrent" and record["dtype"] == "bfloat16" and record["shape_set"] == "tiny"
    assert record["interpreted"] is launch.INTERPRET
    assert {"name", "kind", "platform", "driver", "peak_bytes_per_s"} <= set(record["device"])
    assert {"python", "jax", "jaxlib", "triton"} <= set(record["versions"])
    assert record["autotune"]["mode"] == (os.environ.get("WORKBENCH_AUTOTUNE", "").strip().lower() or "table")
    assert isinstance(record["autotune"]["stats"], dict)
    assert [(p["peer"], p["status"]) for p in record["peers"]] == [
        ("fla.ops.gla.fused_recurrent_gla", "not installed"), ("ejkernel.recurrent[triton]", "not installed")]
    assert all(p["reason"] for p in record["peers"])  # the ImportError's text
    assert record["skipped"] == [] and record["limits"]["reference"]["max_T"] == 32768
    results = record["results"]
    assert {(r["implementation"], r["pass"]) for r in results} == {
        (impl, p) for impl in ("triton", "reference") for p in ("forward", "forward_backward")}
    for r in results:
        assert RESULT_KEYS <= set(r)
        assert all(math.isfinite(r["ms"][s]) and r["ms"][s] > 0 for s in ("median", "min", "p90"))
        assert r["ms"]["min"] <= r["ms"]["median"] <= r["ms"]["p90"]
        assert r["status"] == "ok" and r["ratio_to_best_peer"] is None  # no peer measured
        assert r["error_source"] == "reference"
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


def test_flash_attention_tiny_run_records_flops_and_the_xla_peer(tmp_path, capsys, no_ejkernel):
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
    # what each forward keeps for its backward: the kernel at least q, k, v; the reference its T × T
    # probabilities too (here T = 32 > D = 16), so more; no such field on the forward rows
    kept = {r["implementation"]: r for r in rows if r["pass"] == "forward_backward" and "residual_bytes" in r}
    itemsize = np.dtype(record["dtype"]).itemsize
    assert kept["triton"]["residual_bytes"] >= 3 * B * T * H * D * itemsize
    assert kept["reference"]["residual_bytes"] > kept["triton"]["residual_bytes"]
    assert 0.5 < kept["triton"]["residual_ratio"] < kept["reference"]["residual_ratio"]
    assert not any("residual_bytes" in r for r in rows if r["pass"] == "forward")


def test_chunk_gla_tiny_run_compares_with_the_reference(tmp_path, no_fla):
    """chunk_gla rows: triton and reference agree, every gradient is compared, the fla peer is reported."""
    assert cli.main(["bench", "--op", "chunk_gla", "--shapes", "tiny", "--iters", "1", "--peers", "--no-variants",
                     "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("chunk_gla-*.json")
    record = json.loads(path.read_text())
    assert record["op"] == "chunk_gla" and record["targets_ms"]["target"] == {"forward": 0.72, "forward_backward": 3.0}
    assert [(p["peer"], p["status"]) for p in record["peers"]] == [("fla.ops.gla.chunk_gla", "not installed")]
    rows = record["results"]
    assert {(r["implementation"], r["pass"]) for r in rows} == {
        (impl, p) for impl in ("triton", "reference") for p in ("forward", "forward_backward")}
    assert all(r["status"] == "ok" for r in rows)
    grads = next(r for r in rows if r["implementation"] == "triton" and r["pass"] == "forward_backward")
    assert set(grads["errors"]) == {"o", "final_state", "dq", "dk", "dv", "dgk"}
    assert 0 < grads["errors"]["dq"]["rms_rel"] < bench.WRONG_RMS_REL["bfloat16"]


def test_no_variants_times_the_triton_path_alone(tmp_path, monkeypatch, no_fla, no_ejkernel):
    """An op's variants are timed beside the Triton path as `triton[name]` rows and listed in the record;
    `--no-variants` leaves them out, `--variants` keeps only those named (and the record says so). The variants
    here are the Triton path again."""
    monkeypatch.setitem(bench.OPS, "recurrent", dataclasses.replace(bench.OPS["recurrent"],
                                                                    variants={"again": {}, "once more": {}}))
    for extra, variants in ((("--variants", "once more"), ["once more"]), (("--no-variants",), [])):
        out = tmp_path / str(len(extra))
        assert _bench(out, "--implementations", "triton", *extra) == 0
        (path,) = _records(out)
        record = json.loads(path.read_text())
        assert record["variants"] == variants
        assert {r["implementation"] for r in record["results"]} == {"triton", *(f"triton[{v}]" for v in variants)}
    assert list(bench.chosen_variants("recurrent", True)) == ["again", "once more"]
    assert list(bench.chosen_variants("recurrent", ["once more", "again"])) == ["once more", "again"]
    with pytest.raises(ValueError, match="--variants: recurrent has no variant 'twice'"):
        bench.run("recurrent", "tiny", iters=1, implementations=("triton",), variants=["twice"])


def test_a_variant_this_machine_cannot_run_is_skipped_with_its_reason(tmp_path, monkeypatch, no_fla, no_ejkernel):
    """`OpBench.variant_needs`: a variant whose `needs()` gives a reason is not attempted; the record lists it
    under "skipped" with that reason and the run goes on (flash attention's "triton backward" where the
    default backward is already the Triton one). A variant whose `needs()` gives None runs."""
    monkeypatch.setitem(bench.OPS, "recurrent", dataclasses.replace(
        bench.OPS["recurrent"], variants={"here": {}, "elsewhere": {}},
        variant_needs={"here": lambda: None, "elsewhere": lambda: "a GPU this machine lacks"}))
    assert _bench(tmp_path, "--implementations", "triton") == 0
    (path,) = _records(tmp_path)
    record = json.loads(path.read_text())
    assert {r["implementation"] for r in record["results"]} == {"triton", "triton[here]"}
    assert {(s["implementation"], s["reason"]) for s in record["skipped"]} == {
        ("triton[elsewhere]", "a GPU this machine lacks")}


def test_flash_attentions_triton_backward_variant_says_why_not_here():
    """Without a GPU the Gluon kernels do not run, so the default backward is the Triton one and the variant
    would time it twice: its need says so, and why."""
    reason = bench.OPS["flash_attention"].variant_needs["triton backward"]()
    assert reason is not None and "default backward is the Triton one" in reason, reason
    assert "interpreter" in reason or "Gluon kernels need 3.9" in reason, reason


# ----------------------------------------------------------------------------- --timer copies


class _Clock:
    """`timing.time` for a test: a clock that moves only when a fake call says it took so long."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now

    def spend(self, ms):
        self.now += ms / 1e3


def test_copies_time_the_device_per_copy_where_calls_time_the_host(monkeypatch):
    """A pass whose device work (0.25 ms) is shorter than the host's dispatch (0.5 ms): timed by calls it
    measures the host; as n = ⌈CHAIN_MS / 0.75⌉ = 3 copies in one program they share one dispatch (1.25 ms,
    0.417 ms per copy), and sized again from that, n = ⌈2 / 0.417⌉ = 5 copies bring the time per copy
    down to 0.25 + 0.5 / 5. The n the program could hold is the one divided by. The plain call's result
    is what the row is checked with."""
    from workbench import device_time
    from workbench.bench import timing

    clock = _Clock()
    monkeypatch.setattr(timing, "time", clock)
    monkeypatch.setattr(device_time, "CHAIN_MS", 2.0)
    asked = []

    def plain():
        clock.spend(0.5 + 0.25)
        return "plain"

    def copies(n, cap=99):
        asked.append(n)
        n = min(n, cap)
        return (lambda: clock.spend(0.5 + 0.25 * n) or "copies"), n

    calls_ms, _ = bench.time_ms(plain, lambda out: None, iters=4, reps=2)
    ms, out, n = bench.time_copies_ms(copies, plain, lambda out: None, iters=4, reps=2)
    assert calls_ms["median"] == pytest.approx(0.75)
    assert (n, asked, out) == (5, [3, 5], "plain")
    assert [ms[k] for k in ("median", "min", "p90")] == pytest.approx([0.25 + 0.5 / 5] * 3)
    ms, _, n = bench.time_copies_ms(lambda n: copies(n, cap=2), plain, lambda out: None, iters=1)
    assert n == 2 and ms["median"] == pytest.approx(0.25 + 0.5 / 2)  # memory allowed only 2
    monkeypatch.setattr(device_time, "MAX_CHAIN", 4)
    asked.clear()
    assert bench.time_copies_ms(copies, plain, lambda out: None, iters=1)[2] == 4 and asked == [3, 4]
    monkeypatch.setattr(device_time, "MAX_CHAIN", 2)
    assert bench.time_copies_ms(copies, plain, lambda out: None, iters=1)[2] == 2
    monkeypatch.setattr(device_time, "CHAIN_MS", 0.1)  # a call longer than CHAIN_MS: one copy
    assert bench.time_copies_ms(copies, plain, lambda out: None, iters=1)[2] == 1


class _Kernels:
    """Three host callbacks (as opaque to XLA as Triton launches) that count their runs: a forward kernel
    that reads only x, one that reads only y, and a backward one whose output is a gradient alone."""

    def __init__(self):
        self.runs = {"of x": 0, "of y": 0, "backward": 0}

    def launch(self, name, *args):
        def host(*a):
            self.runs[name] += 1
            return np.asarray(a[0]) * 2
        return jax.pure_callback(host, jax.ShapeDtypeStruct(args[0].shape, args[0].dtype), *args)

    def passes(self):
        def forward(p):
            return self.launch("of x", p["x"]), self.launch("of y", p["y"])

        def forward_backward(p, cts):
            return (*forward(p), self.launch("backward", cts[0], p["x"]))

        return jax.jit(forward), jax.jit(forward_backward)


@pytest.mark.parametrize("pass_", ["forward", "forward_backward"])
def test_copies_run_every_kernel_of_a_pass_once_per_copy(pass_):
    """n copies in one program run every kernel n times: none merged (a kernel that does not read the first
    input, as a state pass does not read q), none dropped (a backward kernel whose outputs are gradients
    only). A chain linked through the first input and output (`device_time.chained`) runs them once."""
    from workbench import device_time
    from workbench.bench import timing

    kernels = _Kernels()
    fwd, fwd_bwd = kernels.passes()
    primals = {"x": jax.numpy.ones((4, 8)), "y": jax.numpy.full((3,), 2.0)}
    cts = (jax.numpy.ones((4, 8)),)
    call, n = timing.pass_copies(fwd, fwd_bwd, primals, cts)(pass_, 5)
    out = jax.block_until_ready(call())
    assert n == 5 and len(out) == 5
    want = {"of x": 5, "of y": 5, "backward": 5 if pass_ == "forward_backward" else 0}
    assert kernels.runs == want
    np.testing.assert_array_equal(out[-1][1], np.full((3,), 4.0))
    # the single-launch chain is not enough for a pass of several kernels
    kernels.runs = dict.fromkeys(kernels.runs, 0)
    args = [primals["x"], primals["y"], *(cts if pass_ == "forward_backward" else ())]
    run = ((lambda xs: fwd({"x": xs[0], "y": xs[1]})) if pass_ == "forward" else
           (lambda xs: fwd_bwd({"x": xs[0], "y": xs[1]}, (xs[2],))))
    program, arrays = device_time.chained(run, args, 5)
    jax.block_until_ready(program(arrays))
    assert kernels.runs["of x"] == 5 and kernels.runs["of y"] == 1
    assert kernels.runs["backward"] == (1 if pass_ == "forward_backward" else 0)


def test_copies_stay_within_the_memory_bound(monkeypatch):
    """n is lowered so that every copy's arguments and outputs fit COPIES_BYTES, never below one."""
    from workbench.bench import timing

    kernels = _Kernels()
    fwd, fwd_bwd = kernels.passes()
    f32 = jax.numpy.float32
    primals = {"x": jax.numpy.ones((4, 8), f32), "y": jax.numpy.ones((3,), f32)}
    cts = (jax.numpy.ones((4, 8), f32),)
    per_copy = 2 * (32 + 3) * 4  # arguments and outputs of a forward
    monkeypatch.setattr(timing, "COPIES_BYTES", 3 * per_copy + 1)
    assert timing.pass_copies(fwd, fwd_bwd, primals, cts)("forward", 10)[1] == 3
    assert timing.pass_copies(fwd, fwd_bwd, primals, cts)("forward", 2)[1] == 2
    monkeypatch.setattr(timing, "COPIES_BYTES", 1)
    assert timing.pass_copies(fwd, fwd_bwd, primals, cts)("forward", 10)[1] == 1


def test_timer_copies_runs_every_row_as_copies_and_checks_them(tmp_path, monkeypatch, no_fla, no_ejkernel):
    """End to end in the interpreter: every row says it was timed as copies and how many, one program of
    copies was made per row, rows still pass their error check, and an unknown timer is refused."""
    from workbench import device_time
    from workbench.bench import timing

    monkeypatch.setattr(device_time, "CHAIN_MS", 1e9)
    monkeypatch.setattr(device_time, "MAX_CHAIN", 2)
    made = []
    pass_copies = timing.pass_copies

    def counted(*args):
        copies = pass_copies(*args)
        return lambda pass_, n: made.append((pass_, n)) or copies(pass_, n)

    monkeypatch.setattr(timing, "pass_copies", counted)
    assert _bench(tmp_path, "--timer", "copies") == 0
    (path,) = _records(tmp_path)
    record = json.loads(path.read_text())
    assert record["timer"] == "copies"
    assert {(r["implementation"], r["pass"], r["timer"], r["copies"], r["status"]) for r in record["results"]} == {
        (impl, p, "copies", 2, "ok") for impl in ("triton", "reference") for p in ("forward", "forward_backward")}
    assert sorted(made) == sorted([("forward", 2), ("forward_backward", 2)] * 2)
    with pytest.raises(ValueError, match="--timer: expected calls or copies or device, got 'host'"):
        bench.run("recurrent", "tiny", iters=1, timer="host")


def test_ratios_compare_rows_with_peers_timed_the_same_way():
    """Under --timer copies a torch peer is still timed by calls: the kernel's ratio is to the best peer
    timed as it was, never across timers."""
    from workbench.bench.harness import _finish

    op = bench.OPS["recurrent"]
    same = [jax.numpy.ones(3)]

    def row(name, kind, ms, timer):
        return {"shape": {"T": 16}, "implementation": name, "kind": kind, "pass": "forward", "ms": {"median": ms},
                "timer": timer, "copies": None if timer == "calls" else 4, "bytes": 1.0, "flops": None,
                "_got": same}

    rows = [row("triton", "kernel", 1.0, "copies"), row("torch peer", "peer", 0.5, "calls"),
            row("jax peer", "peer", 2.0, "copies"), row("slow torch peer", "peer", 0.8, "calls")]
    done = _finish(rows, {"reference": {"forward": same}}, "reference", op, 1e-3,
                   {"peak_bytes_per_s": None})
    ratio = {r["implementation"]: r["ratio_to_best_peer"] for r in done}
    assert ratio == {"triton": 0.5, "torch peer": 1.0, "jax peer": 1.0, "slow torch peer": pytest.approx(1.6)}


# ----------------------------------------------------------------------------- sequence-length limits


def test_every_sweep_runs_1k_to_64k_and_skips_only_the_dense_and_memory_bound_rows():
    """The issue's sweep: 2^10 … 2^16 tokens for every op. Past an implementation's max_T it is skipped (and
    an error source stands in for the reference); the Triton kernels and the peers that are not dense always run."""
    for name, op in bench.OPS.items():
        shapes = op.shape_sets["sweep"]
        assert sorted({s["T"] for s in shapes}) == [2 ** e for e in range(10, 17)], name
        contenders = ("triton", "reference", *(p.name for p in op.peers))
        for shape in shapes:
            skipped = {c for c in contenders if op.skip_reason(c, shape)}
            assert skipped <= {"reference", "jax.nn.dot_product_attention[xla]"}, (name, shape, skipped)
            if "reference" in skipped:
                assert set(op.error_sources) <= {p.name for p in op.peers} and op.error_sources, name
    flash = bench.OPS["flash_attention"]
    longest = [s for s in flash.shape_sets["sweep"] if s["T"] == 65536]
    assert {(s["B"], s["H"], s["D"]) for s in longest} == {(1, 16, 128)} and {s["causal"] for s in longest} == {0, 1}
    dense = {"reference", "jax.nn.dot_product_attention[xla]"}
    assert {c for c in dense if flash.skip_reason(c, longest[0])} == dense
    assert not any(flash.skip_reason(c, dict(longest[0], T=8192)) for c in dense)
    assert flash.skip_reason("reference", longest[0]).startswith("T=65536 > 8192: dense attention")


@pytest.fixture
def triton_off_by_half(monkeypatch):
    """workbench.flash_attention whose "triton" path is the reference + 0.5: wrong, and fast in the interpreter."""
    correct = workbench.flash_attention

    def off(q, k, v, *, implementation=None, **kwargs):
        o = correct(q, k, v, implementation="reference", **kwargs)
        return o + 0.5 if implementation == "triton" else o

    monkeypatch.setattr(workbench, "flash_attention", off)


def _with_limits(monkeypatch, op_name, **changes):
    monkeypatch.setitem(bench.OPS, op_name, dataclasses.replace(bench.OPS[op_name], **changes))


def test_past_max_T_the_reference_is_skipped_and_errors_come_from_the_error_source(monkeypatch, triton_off_by_half,
                                                                                     no_ejkernel):
    _with_limits(monkeypatch, "flash_attention", max_T={"reference": (16, "a test limit")},
                 error_sources=("jax.nn.dot_product_attention[xla]",))
    record = bench.run("flash_attention", "tiny", iters=1, peers=True, tokens=[32], variants=False)
    shape = {"B": 1, "T": 32, "H": 2, "D": 16, "causal": 1}
    assert record["limits"] == {"reference": {"max_T": 16, "why": "a test limit"}}
    assert record["skipped"] == [{"shape": shape, "implementation": "reference", "reason": "T=32 > 16: a test limit"}]
    assert record["tokens"] == [32]
    rows = {(r["implementation"], r["pass"]): r for r in record["results"]}
    assert {i for i, _ in rows} == {"triton", "jax.nn.dot_product_attention[xla]"}  # no reference row
    for p in ("forward", "forward_backward"):
        xla, triton = rows[("jax.nn.dot_product_attention[xla]", p)], rows[("triton", p)]
        assert xla["error_source"] == triton["error_source"] == "jax.nn.dot_product_attention[xla]"
        assert xla["status"] == "ok" and xla["ratio_to_best_peer"] == 1.0
        assert all(e["rms_rel"] == 0.0 for e in xla["errors"].values())
        assert triton["status"] == "WRONG" and triton["ratio_to_best_peer"] is None  # the +0.5 is caught by XLA
    assert "errors against jax.nn.dot_product_attention[xla]" in bench.table(record)


def test_errors_from_peers_measures_against_the_peer_and_times_no_reference(triton_off_by_half, no_ejkernel):
    record = bench.run("flash_attention", "tiny", iters=1, peers=True, implementations=["triton"],
                       errors_from="peers")
    assert record["errors_from"] == "peers" and record["complete"] is True
    rows = {(r["implementation"], r["pass"]): r for r in record["results"]}
    assert "reference" not in {i for i, _ in rows}
    for p in ("forward", "forward_backward"):
        triton = rows[("triton", p)]
        assert triton["error_source"] == "jax.nn.dot_product_attention[xla]"  # the first error source measured
        assert triton["status"] == "WRONG"  # the +0.5 is caught without the reference
    default = bench.run("flash_attention", "tiny", iters=1, peers=True, implementations=["triton"])
    assert {r["error_source"] for r in default["results"]} == {"reference"}


def test_a_run_cut_short_leaves_a_partial_record(tmp_path, monkeypatch, no_fla, no_ejkernel):
    """The kernel's rows are written as soon as they are timed; the reference (timed last) then fails
    the way a time limit would cut it, and what was measured stays on disk, marked incomplete."""
    real = bench.jax_calls

    def failing_reference(op, implementation, *args, **kwargs):
        calls = real(op, implementation, *args, **kwargs)
        if implementation == "reference" and args[1]:  # the timed reference (built with cotangents)
            return dataclasses.replace(calls, forward=lambda: (_ for _ in ()).throw(KeyboardInterrupt()))
        return calls

    monkeypatch.setattr(bench.harness, "jax_calls", failing_reference)
    with pytest.raises(KeyboardInterrupt):
        _bench(tmp_path)
    assert _records(tmp_path) == []
    (partial,) = tmp_path.glob("recurrent-*.json.partial")
    record = json.loads(partial.read_text())
    assert record["complete"] is False
    assert {r["implementation"] for r in record["results"]} == {"triton"}

    monkeypatch.setattr(bench.harness, "jax_calls", real)
    assert _bench(tmp_path) == 0
    (done,) = _records(tmp_path)
    assert json.loads(done.read_text())["complete"] is True
    assert sorted(p.name for p in tmp_path.glob("*.partial")) == [partial.name]  # only the cut run's


def test_runs_in_the_same_second_keep_separate_records(tmp_path, monkeypatch, no_fla, no_ejkernel):
    """A run cut short and the next run started within the same second must not share a record name: the second
    would overwrite the first's partial record and then remove it when it completes."""
    monkeypatch.setattr(bench.records, "stamp_now", lambda: "20261125T000000Z")
    real = bench.jax_calls

    def failing_reference(op, implementation, *args, **kwargs):
        calls = real(op, implementation, *args, **kwargs)
        if implementation == "reference" and args[1]:
            return dataclasses.replace(calls, forward=lambda: (_ for _ in ()).throw(KeyboardInterrupt()))
        return calls

    monkeypatch.setattr(bench.harness, "jax_calls", failing_reference)
    with pytest.raises(KeyboardInterrupt):
        _bench(tmp_path)
    monkeypatch.setattr(bench.harness, "jax_calls", real)
    assert _bench(tmp_path) == 0
    assert _bench(tmp_path) == 0
    assert [p.name for p in _records(tmp_path)] == ["recurrent-20261125T000000Z-2.json",
                                                   "recurrent-20261125T000000Z-3.json"]
    (partial,) = tmp_path.glob("*.partial")
    assert partial.name == "recurrent-20261125T000000Z.json.partial"
    assert {r["implementation"] for r in json.loads(partial.read_text())["results"]} == {"triton"}


def test_a_run_failing_before_any_row_leaves_no_partial_record(tmp_path, monkeypatch, no_fla, no_ejkernel):
    def refuse(*args, **kwargs):
        raise bench.Refused("no rows")

    monkeypatch.setattr(bench, "run", refuse)
    assert _bench(tmp_path) == 2
    assert list(tmp_path.iterdir()) == []


def test_T_filter_refuses_lengths_the_set_does_not_have():
    with pytest.raises(ValueError, match="--T: expected sequence lengths of shape set 'tiny' \\(32\\)"):
        bench.run("flash_attention", "tiny", tokens=[64])


def test_running_out_of_memory_is_recorded_and_the_run_goes_on(monkeypatch, no_fla, no_ejkernel):
    """An XLA RESOURCE_EXHAUSTED from a kernel row skips that row with the reason; any other error still stops the
    run. Without the reference and with no error source measured, the other rows are "unchecked" and unranked."""
    correct = workbench.recurrent
    monkeypatch.setattr(workbench, "recurrent",  # the reference underneath "triton": fast in the interpreter
                        lambda *args, implementation=None, **kwargs: correct(*args, implementation="reference", **kwargs))
    real = bench.jax_calls
    message = {"text": "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 68719476736 bytes."}

    def jax_calls(op, implementation, inputs, cotangents, **options):
        calls = real(op, implementation, inputs, cotangents, **options)
        if implementation != "reference":
            return calls

        def fails():
            raise RuntimeError(message["text"])

        return dataclasses.replace(calls, forward_backward=fails)

    monkeypatch.setattr(bench.harness, "jax_calls", jax_calls)
    record = bench.run("recurrent", "tiny", iters=1, peers=True)
    (skip,) = record["skipped"]
    assert skip["implementation"] == "reference" and skip["reason"].startswith("out of memory: RuntimeError: RESOURCE")
    assert {(r["implementation"], r["status"]) for r in record["results"]} == {("triton", "unchecked")}
    assert all(r["errors"] == {} and r["ratio_to_best_peer"] is None and r["error_source"] is None
               for r in record["results"])
    assert "errors against nothing (unchecked)" in bench.table(record)
    message["text"] = "INTERNAL: something else"
    with pytest.raises(RuntimeError, match="something else"):
        bench.run("recurrent", "tiny", iters=1, implementations=["reference"])


# ----------------------------------------------------------------------------- peers


def test_a_peer_that_is_absent_or_fails_to_import_is_recorded_with_the_reason(tmp_path, monkeypatch):
    """Neither crashes the run; what a failing import changed for the process (JAX's compilation cache dir,
    environment variables, as ejkernel's import does) is undone."""
    (tmp_path / "workbench_test_broken_peer.py").write_text(
        "import os, jax\n"
        "os.environ['WORKBENCH_TEST_PEER_ENV'] = '1'\n"
        "jax.config.update('jax_compilation_cache_dir', '/nonexistent/peer-cache')\n"
        "raise RuntimeError('built for another jax')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    never = lambda inputs, cotangents: pytest.fail("an absent peer was set up")  # noqa: E731
    _with_limits(monkeypatch, "recurrent", peers=(
        bench.Peer("absent", "workbench_test_no_such_module", never, needs_cuda=False),
        bench.Peer("broken", "workbench_test_broken_peer", never, needs_cuda=False)))
    cache_dir = jax.config.jax_compilation_cache_dir
    record = bench.run("recurrent", "tiny", iters=1, implementations=["reference"], peers=True)
    assert record["peers"] == [
        {"peer": "absent", "status": "not installed", "reason": "No module named 'workbench_test_no_such_module'"},
        {"peer": "broken", "status": "import failed", "reason": "RuntimeError: built for another jax"}]
    assert {r["implementation"] for r in record["results"]} == {"reference"}
    assert jax.config.jax_compilation_cache_dir == cache_dir and "WORKBENCH_TEST_PEER_ENV" not in os.environ
    assert "peer broken: import failed (RuntimeError: built for another jax)" in bench.table(record)


needs_ejkernel = pytest.mark.skipif(importlib.util.find_spec("ejkernel") is None,
                                    reason="ejkernel not installed (README: the peer bundle, or pip install ejkernel)")


def _peer_against_reference(op_name, peer, shape):
    """Forward+backward errors of a peer setup against the reference on the harness's inputs and cotangents."""
    bench.peers.import_peer("ejkernel")
    op = bench.OPS[op_name]
    inputs = op.inputs(shape, jax.numpy.dtype(op.dtype), 0)
    outputs = jax.eval_shape(bench.jax_calls(op, "reference", inputs, []).forward)
    cotangents = workbench.testing.random_cotangents(1000, outputs)
    reference = bench.jax_calls(op, "reference", inputs, cotangents)
    want = reference.to_numpy(reference.forward_backward())
    calls = (next(p for p in op.peers if p.name == peer).setup if isinstance(peer, str) else peer)(inputs, cotangents)
    got = calls.to_numpy(calls.forward_backward())
    return bench.output_errors(op.names, got, want)


@needs_ejkernel
@pytest.mark.parametrize("op_name, peer, shape", [
    ("recurrent", "ejkernel.recurrent[triton]", dict(B=1, T=16, H=2, K=8, V=8)),
    ("flash_attention", "ejkernel.flash_attention[triton]", dict(B=1, T=32, H=2, D=16, causal=1)),
    ("flash_attention", "ejkernel.flash_attention[triton]", dict(B=1, T=32, H=2, D=16, causal=0)),
    ("flash_attention", "ejkernel.flash_attention[triton,heuristic_cfg_gpu]", dict(B=1, T=32, H=2, D=16, causal=1)),
])
def test_ejkernel_peer_maps_our_inputs(op_name, peer, shape):
    """ejkernel's own Triton kernels, launched in the interpreter, agree with our reference to bf16 rounding:
    layouts, gate, scale and causal alignment are mapped right (WRONG would be 5e-2)."""
    errors = _peer_against_reference(op_name, peer, shape)
    assert set(errors) == set(bench.OPS[op_name].names)
    assert max(e["rms_rel"] for e in errors.values()) < 1e-2, errors


@needs_ejkernel
def test_ejkernel_recurrent_needs_the_scale_passed():
    """The trap the mapping avoids: with softmax_scale=None, ejkernel's recurrent under jax.vjp runs at scale 1,
    so a peer left at its default would be marked WRONG; the comparison sees it."""
    def unscaled(inputs, cotangents):
        from ejkernel.kernels._triton.recurrent import recurrent

        return bench.peers.jax_peer_calls(lambda p: tuple(recurrent(p["q"], p["k"], p["v"], gk=p["gk"])),
                                     {n: inputs[n] for n in ("q", "k", "v", "gk")}, cotangents,
                                     bench.peers.EJKERNEL_RECURRENT_LAUNCH)

    errors = _peer_against_reference("recurrent", unscaled, dict(B=1, T=16, H=2, K=8, V=8))
    assert errors["o"]["rms_rel"] > bench.WRONG_RMS_REL["bfloat16"]


# ----------------------------------------------------------------------------- --first-call

FIRST_CALL_KEYS = {"op", "harness", "command", "interpreted", "date", "device", "versions", "git", "shape_set",
                   "shapes", "dtype", "first_call", "complete"}

# A stand-in for the measured process: it speaks the protocol, sleeps longer with an empty cache, leaves a
# file in WORKBENCH_CACHE_DIR and reports whether it found one (so the second run must see the first's).
STUB_CHILD = """
import json, os, pathlib, sys, time
mark = "workbench-first-call "
cache = pathlib.Path(os.environ["WORKBENCH_CACHE_DIR"])
found = (cache / "autotune" / "entry.json").exists()
print(mark + json.dumps({"ready": True}), flush=True)
print("other output", flush=True)
time.sleep(0.05 if found else 0.4)
(cache / "autotune").mkdir(exist_ok=True)
(cache / "autotune" / "entry.json").write_text("{}")
assert os.environ["JAX_COMPILATION_CACHE_DIR"] == str(cache / "jax") and os.environ["WORKBENCH_AUTOTUNE"] == sys.argv[2]
assert os.environ["TRITON_CACHE_DIR"] == str(cache / "triton")
for i in range(int(sys.argv[1])):
    print(mark + json.dumps({"shape": i}), flush=True)
print(mark + json.dumps({"done": True, "stats": {"chosen_disk" if found else "chosen_tuned": 3}}), flush=True)
"""


def test_first_call_times_a_cold_then_a_cached_process_sharing_one_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("WORKBENCH_AUTOTUNE", raising=False)  # the children get the default, the table
    monkeypatch.setenv("WORKBENCH_TUNING_TABLE", str(tmp_path))  # an empty table folder: 0 entries recorded
    n = len(bench.OPS["flash_attention"].shape_sets["tiny"])
    record = bench.first_call("flash_attention", "tiny", command="x",
                              child=[sys.executable, "-c", STUB_CHILD, str(n), "table"])
    assert FIRST_CALL_KEYS <= set(record) and record["op"] == "flash_attention" and record["shape_set"] == "tiny"
    assert {"name", "kind", "platform"} <= set(record["device"]) and "commit" in record["git"]
    fc = record["first_call"]
    cold, cached = fc["runs"]["cold"], fc["runs"]["cached"]
    assert cold["stats"] == {"chosen_tuned": 3} and cached["stats"] == {"chosen_disk": 3}  # saw the first's file
    assert fc["cold_s"] == cold["first_result_s"] == cold["result_s"][-1] and len(cold["result_s"]) == n
    assert 0 < cold["startup_s"] < cold["first_result_s"] <= cold["exit_s"]
    assert fc["cold_s"] > 0.4 > fc["cached_s"] > 0.05 and math.isclose(fc["ratio"], fc["cached_s"] / fc["cold_s"])
    assert fc["met"] == (fc["ratio"] <= 0.25) and fc["goal_ratio"] == 0.25
    assert fc["cache_left"] == {"autotune_files": 1, "kernel_files": 0, "jax_files": 0, "triton_files": 0}
    assert fc["environment"]["JAX_COMPILATION_CACHE_DIR"] == "<that folder>/jax"
    assert fc["environment"]["WORKBENCH_AUTOTUNE"] == "table"
    assert fc["table"] == {"folder": str(tmp_path), "device_entries": 0}
    table = bench.first_call_table(record)
    assert f"ratio {fc['ratio']:.3f}" in table and ("NOT met" in table) != fc["met"]
    assert "WORKBENCH_AUTOTUNE=table" in table and "0 entries" in table


def test_first_call_passes_the_callers_autotune_mode_and_rejects_a_bad_one(monkeypatch):
    n = len(bench.OPS["recurrent"].shape_sets["tiny"])
    monkeypatch.setenv("WORKBENCH_AUTOTUNE", "on")  # as a machine without a table: every config timed
    record = bench.first_call("recurrent", "tiny", child=[sys.executable, "-c", STUB_CHILD, str(n), "on"])
    assert record["first_call"]["environment"]["WORKBENCH_AUTOTUNE"] == "on"
    monkeypatch.setenv("WORKBENCH_AUTOTUNE", "sometimes")
    with pytest.raises(ValueError, match="WORKBENCH_AUTOTUNE"):
        bench.first_call("recurrent", "tiny", child=[sys.executable, "-c", STUB_CHILD, str(n), "sometimes"])


def test_first_call_fails_loudly_when_the_child_does():
    with pytest.raises(RuntimeError, match="exited with 3 after 0 of 1 results.*boom"):
        bench.first_call("recurrent", "tiny", child=[sys.executable, "-c", "print('boom'); raise SystemExit(3)"])


@pytest.mark.slow
def test_first_call_from_the_command_line(tmp_path, capsys):
    """The real child, at the tiny shape (interpreted here: no cache applies, the record says so)."""
    assert cli.main(["bench", "--op", "recurrent", "--shapes", "tiny", "--first-call", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("recurrent-*.json")
    record = json.loads(path.read_text())
    assert FIRST_CALL_KEYS <= set(record) and "results" not in record
    assert record["interpreted"] is launch.INTERPRET and record["command"].endswith("--first-call --out " + str(tmp_path))
    fc = record["first_call"]
    assert fc["cold_s"] > 0 and fc["cached_s"] > 0 and fc["child"] == ["-m", "workbench.bench", "--first-call-child",
                                                                        "recurrent", "tiny"]
    assert "first forward+backward result" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["bench", "--op", "ring_attention", "--first-call"])
    assert bench.FIRST_CALL_OUT == bench.DEFAULT_OUT / "first_call"


# ----------------------------------------------------------------------------- paired rounds


def test_paired_samples_alternate_the_order_and_time_per_copy(monkeypatch):
    """Each round samples every program once, the order reversed every other round; a sample is its program's
    time over the copies it runs. The clock here advances by the program's cost, so the per-copy times are exact."""
    from workbench.bench import timing

    now = [0.0]
    monkeypatch.setattr(timing.time, "perf_counter", lambda: now[0])
    calls = []

    def program(name, seconds):
        def call():
            calls.append(name)
            now[0] += seconds
        return call

    samples = timing.paired_samples([(program("a", 0.004), 2), (program("b", 0.009), 3)], lambda out: out, 4)
    assert calls == ["a", "b"] + ["a", "b", "b", "a", "a", "b", "b", "a"]  # one warm call each, then the rounds
    assert samples == [[pytest.approx(2.0)] * 4, [pytest.approx(3.0)] * 4]


def test_paired_rounds_ratio_the_kernel_to_the_best_peer_of_the_same_run(tmp_path, capsys, no_ejkernel):
    """`--paired N` with `--timer copies`: the kernel's rows record the peer timed beside it (the fastest peer by
    median of the run's own rows), N rounds, and the median of the rounds' ratios within their range; the table
    prints them. Without it no row has `paired`."""
    assert cli.main(["bench", "--op", "flash_attention", "--shapes", "tiny", "--iters", "1", "--peers",
                     "--timer", "copies", "--paired", "3", "--implementations", "triton", "--no-variants",
                     "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("flash_attention-*.json")
    record = json.loads(path.read_text())
    assert record["paired"] == 3
    for pass_ in ("forward", "forward_backward"):
        rows = [r for r in record["results"] if r["pass"] == pass_]
        peers = [r for r in rows if r["kind"] == "peer" and r["timer"] == "copies"]
        kernel = next(r for r in rows if r["implementation"] == "triton")
        paired = kernel["paired"]
        assert paired["peer"] == min(peers, key=lambda r: r["ms"]["median"])["implementation"]
        assert paired["rounds"] == 3 and paired["ms"] > 0 and paired["peer_ms"] > 0
        assert paired["ratio_min"] <= paired["ratio"] <= paired["ratio_max"]
        assert not any("paired" in r for r in rows if r is not kernel)
    assert "paired: B=1 T=32" in capsys.readouterr().out
    plain = bench.run("flash_attention", "tiny", iters=1, peers=True, implementations=["triton"], variants=False,
                      timer="copies")
    assert plain["paired"] == 0 and not any("paired" in r for r in plain["results"])


@pytest.mark.parametrize("options", [dict(timer="calls", paired=3), dict(timer="copies", paired=-1),
                                     dict(timer="copies", paired=2, implementations=["reference"])])
def test_paired_needs_copies_rounds_and_the_kernel(options):
    with pytest.raises(ValueError, match=r"paired: a number of rounds ≥ 1 with timer 'copies' or 'device'"):
        bench.run("recurrent", "tiny", iters=1, **options)


# ----------------------------------------------------------------------------- settling before the samples


def test_settle_runs_the_program_until_the_seconds_pass_before_any_sample(monkeypatch):
    """`timing.settle` calls the program back to back (each waited for) until its seconds have passed on the
    clock; `time_ms` does that after its warm-up and before its samples, so the samples are the last calls. The
    clock here advances by the program's cost."""
    from workbench.bench import timing

    now = [0.0]
    monkeypatch.setattr(timing.time, "perf_counter", lambda: now[0])
    log = []

    def call():
        now[0] += 0.25
        log.append(now[0])
        return len(log)

    assert timing.settle(call, lambda out: out, 1.0) == 4 and now[0] == pytest.approx(1.0)
    assert timing.settle(call, lambda out: out, 0.0) == 0
    log.clear()
    ms, last = timing.time_ms(call, lambda out: out, iters=3, warmup=2, settle_s=0.6)
    assert len(log) == 2 + 3 + 3  # warm-up, 0.6 s of 0.25 s calls, the samples
    assert last == 8 and ms["median"] == pytest.approx(250.0)


def test_settle_is_recorded_printed_and_refused_below_zero(tmp_path, capsys, no_ejkernel):
    """`--settle S` reaches the record (`settle_s`) and the table's note; the paired rounds settle too; a negative
    S is a ValueError naming it."""
    assert cli.main(["bench", "--op", "flash_attention", "--shapes", "tiny", "--iters", "1", "--peers",
                     "--timer", "copies", "--paired", "2", "--settle", "0.05", "--implementations", "triton",
                     "--no-variants", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("flash_attention-*.json")
    record = json.loads(path.read_text())
    assert record["settle_s"] == 0.05
    assert "and 0.05 s of calls" in capsys.readouterr().out
    assert bench.run("recurrent", "tiny", iters=1, implementations=["reference"])["settle_s"] == 0.0
    with pytest.raises(ValueError, match=r"settle: seconds ≥ 0, got -1"):
        bench.run("recurrent", "tiny", iters=1, settle=-1)

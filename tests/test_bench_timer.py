"""`--timer device`: the program of n copies timed by the span of its kernels in a profiler trace."""

import gzip
import json
import sys

import jax
import jax.numpy as jnp
import pytest

from workbench import bench, device_time
from workbench.bench import timing


def _write_trace(folder, events):
    """A perfetto trace as JAX's profiler writes it: process names in metadata events, then complete ("X")
    events with microsecond start and duration."""
    meta = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/host:CPU"}},
            {"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "/device:GPU:0 (pid 7)"}}]
    path = folder / "plugins" / "profile" / "run" / "perfetto_trace.json.gz"
    path.parent.mkdir(parents=True)
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": meta + events}, f)


def test_device_events_are_the_gpus_complete_events_by_start_in_ms(tmp_path):
    _write_trace(tmp_path, [
        {"ph": "X", "pid": 7, "ts": 2500.0, "dur": 40.0, "name": "second"},
        {"ph": "X", "pid": 1, "ts": 100.0, "dur": 900.0, "name": "PjRt execute"},  # the host's: left out
        {"ph": "X", "pid": 7, "ts": 1000.0, "dur": 250.0, "name": "first"},
        {"ph": "i", "pid": 7, "ts": 1100.0, "name": "an instant"},  # no duration: left out
    ])
    assert timing.device_events(str(tmp_path)) == [(1.0, 0.25, "first"), (2.5, 0.04, "second")]


def _events(calls):
    """(start, duration, name) of calls made one after the other: (name, start offset, duration) per kernel,
    each call's kernels starting 0.7 ms after the previous call's last (the host's wait and dispatch)."""
    out, now = [], 0.0
    for call in calls:
        for name, offset, dur in call:
            out.append((now + offset, dur, name))
        now += max(offset + dur for _, offset, dur in call) + 0.7
    return out


A = [("h", 0.0, 0.1), ("o", 0.12, 0.2)]  # a program of two kernels with a 0.02 ms gap: span 0.32
B = [("k", 0.0, 0.5)]


def test_split_calls_spans_each_call_gaps_included_and_refuses_a_trace_that_is_not_its_calls():
    names = [["h", "o"], ["k"]]
    assert timing.split_calls(_events([A, B, B, A]), [0, 1, 1, 0], names) == pytest.approx([0.32, 0.5, 0.5, 0.32])
    with pytest.raises(RuntimeError, match="call 1 of program 1"):  # the second call ran another kernel
        timing.split_calls(_events([A, [("x", 0.0, 0.1)], B, A]), [0, 1, 1, 0], names)
    with pytest.raises(RuntimeError, match="call 3 of program 0"):  # the last call's second kernel missing
        timing.split_calls(_events([A, B, B, A[:1]]), [0, 1, 1, 0], names)
    with pytest.raises(RuntimeError, match="1 GPU events beyond"):
        timing.split_calls(_events([A, B, B, A, B]), [0, 1, 1, 0], names)
    with pytest.raises(RuntimeError, match="call 0 of program 0"):  # out of order
        timing.split_calls(_events([[("o", 0.0, 0.1), ("h", 0.12, 0.2)]]), [0], names)


class _FakeTrace:
    """`timing.traced_events` for a test: each call returns the kernels it 'ran' as `_events` lays them out."""

    def __init__(self):
        self.traces = []

    def __call__(self, calls, block):
        ran = [block(call()) for call in calls]
        self.traces.append(len(calls))
        return _events(ran)


def test_device_timer_divides_each_calls_span_by_its_copies(monkeypatch):
    """n is sized as `--timer copies` sizes it from the plain call; each sample is one call's span over n: the
    0.7 ms between calls (the host's) is not in it, the gap between a copy's kernels is."""
    fake = _FakeTrace()
    monkeypatch.setattr(timing, "traced_events", fake)
    monkeypatch.setattr(device_time, "CHAIN_MS", 2.0)
    asked = []

    def copies(n):
        asked.append(n)
        kernels = [(name, i * 0.4 + offset, dur) for i in range(n) for name, offset, dur in A]
        return (lambda: kernels), n

    plain_ms = 0.9  # the wall clock of a plain call: n = ⌈2 / 0.9⌉ = 3
    monkeypatch.setattr(timing, "time_ms", lambda fn, block, iters, warmup=2, reps=1: (
        {"median": plain_ms, "min": plain_ms, "p90": plain_ms}, "plain"))
    ms, out, n = timing.time_device_ms(copies, lambda: None, lambda out: out, iters=5)
    assert (n, asked, out) == (3, [3], "plain")
    assert [ms[k] for k in ("median", "min", "p90")] == pytest.approx([(0.8 + 0.32) / 3] * 3)
    assert fake.traces == [1, 5]  # one call to name its events, then the samples under one trace


def test_paired_device_samples_alternate_the_order_and_time_per_copy(monkeypatch):
    fake = _FakeTrace()
    monkeypatch.setattr(timing, "traced_events", fake)
    order = []

    def program(name, kernels):
        return lambda: order.append(name) or kernels

    samples = timing.paired_device_samples([(program("a", A), 2), (program("b", B), 5)], lambda out: out, 3)
    assert order == ["a", "b"] + ["a", "b"] + ["a", "b", "b", "a", "a", "b"]  # warm, name, then the rounds
    assert samples == [[pytest.approx(0.16)] * 3, [pytest.approx(0.1)] * 3]


def test_without_gpu_events_the_device_timer_says_it_needs_a_gpu():
    """On a CPU the profiler records no GPU events: an error, never a time of nothing."""
    if any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("this machine has a GPU: its trace has GPU events")
    f = jax.jit(lambda x: x * 2)
    x = jnp.ones(8)
    with pytest.raises(RuntimeError, match="left no GPU events"):
        timing.time_device_ms(lambda n: ((lambda: f(x)), 1), lambda: f(x), jax.block_until_ready, iters=2)


def test_without_a_gpu_the_bench_refuses_the_device_timer_before_any_work(tmp_path, capsys):
    if timing.device_timer_available():
        pytest.skip("this machine has a GPU")
    from workbench import cli

    assert cli.main(["bench", "--op", "recurrent", "--shapes", "tiny", "--iters", "1", "--timer", "device",
                     "--out", str(tmp_path)]) == 2
    assert "--timer device times kernels by their events on a GPU" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # no record, no partial record


def test_rows_timed_by_the_device_say_so(tmp_path, monkeypatch, capsys):
    """Through the harness: the JAX contenders' rows carry timer 'device' and their copies, the record and the
    table say how they were timed, and the paired rounds take the device's samples."""
    monkeypatch.setitem(sys.modules, "ejkernel", None)  # the JAX peers alone
    monkeypatch.setattr("workbench.bench.harness.device_timer_available", lambda: True)  # timed by the fakes below
    monkeypatch.setattr("workbench.bench.harness.time_device_ms",
                        lambda copies, plain, block, iters, warmup, settle: ({"median": 1.0, "min": 1.0, "p90": 1.0},
                                                                            plain(), 2))
    paired = []
    monkeypatch.setattr("workbench.bench.harness.paired_device_samples",
                        lambda programs, block, rounds, settle: paired.append(rounds) or [[1.0] * rounds] * 2)
    from workbench import cli

    assert cli.main(["bench", "--op", "flash_attention", "--shapes", "tiny", "--iters", "1", "--peers",
                     "--timer", "device", "--paired", "2", "--implementations", "triton", "--no-variants",
                     "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("flash_attention-*.json")
    record = json.loads(path.read_text())
    assert record["timer"] == "device"
    assert {(r["timer"], r["copies"]) for r in record["results"]} == {("device", 2)}
    assert {r["implementation"] for r in record["results"]} >= {"triton", "jax.nn.dot_product_attention[xla]"}
    assert paired == [2, 2]  # forward and forward+backward
    assert all(r["paired"]["rounds"] == 2 for r in record["results"] if r["implementation"] == "triton")
    assert "by the span of its kernels on the device" in capsys.readouterr().out

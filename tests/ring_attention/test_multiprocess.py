"""The ring across processes: two processes on this machine, two host devices each, joined by
`jax.distributed.initialize` into one mesh of four, run `sharded_ring_attention` on global arrays
(`multiprocess_worker.py`). The ring's forward and gradients (random cotangent), gathered to every
process, are held to the budget of the single-process ring tests (`test_ring.py`): the float64
oracle on the gathered sequence within 1.5× the error of `flash_attention` in the same dtype on one
device, and close to `flash_attention` with the ring's implementation.

The workers run once per pytest process for all cases (cached; tests/conftest.py, SAME_WORKER) under
a time limit: a worker that fails stops the other one at once, a run past the limit stops both, and
either fails every test with the workers' output. No worker outlives the run.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("multiprocess_worker.py")
ROOT = WORKER.parents[2]
PROCESSES = 2
DEVICES_PER_PROCESS = 2
TIMEOUT_S = 240  # the run takes 25–40 s on a 2-core machine


def case(implementation, dtype, causal, layout, T, H=2, Hkv=2, B=1, D=16, seed=0):
    """T is the local length per device; n is every process's devices together."""
    return dict(n=PROCESSES * DEVICES_PER_PROCESS, implementation=implementation, dtype=dtype, causal=causal,
                layout=layout, B=B, T=T, H=H, Hkv=Hkv, D=D, seed=seed)


CASES = [case("triton", "float32", True, "zigzag", 16, H=4, Hkv=2, seed=11),
         case("triton", "float32", False, "contiguous", 16, B=2, D=32, seed=12)]


def case_id(c):
    gqa = f"-gqa{c['H']}:{c['Hkv']}" if c["H"] != c["Hkv"] else ""
    return (f"n{c['n']}-{c['implementation']}-{c['dtype']}-{'causal' if c['causal'] else 'full'}-{c['layout']}"
            f"-T{c['T']}-D{c['D']}{gqa}")


@dataclasses.dataclass(frozen=True)
class Run:
    reports: list[dict] | None   # one per process, in process order; None when the run failed
    failure: str | None
    seconds: float


def reports() -> list[dict]:
    run = _run()
    if run.failure is not None:
        raise AssertionError(run.failure)
    return run.reports


def results(c) -> list[dict]:
    """The case's result from every process, in process order."""
    return [next(r for r in report["results"] if case_id(r["case"]) == case_id(c)) for report in reports()]


@functools.cache
def _run() -> Run:
    """Both workers, once for every case (their failure too: every test reports it)."""
    with tempfile.TemporaryDirectory(prefix="ring-multiprocess-") as tmp:
        tmp = Path(tmp)
        (tmp / "cases.json").write_text(json.dumps(CASES))
        flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={DEVICES_PER_PROCESS}"
        env = dict(os.environ, XLA_FLAGS=flags.strip(), JAX_PLATFORMS="cpu", WORKBENCH_INTERPRET="1",
                   PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        port = _free_port()
        start = time.monotonic()
        procs, logs = [], []
        try:
            for i in range(PROCESSES):
                logs.append(open(tmp / f"log{i}.txt", "w"))
                argv = [sys.executable, str(WORKER), str(i), str(PROCESSES), str(port), str(tmp / "cases.json"),
                        str(tmp / f"result{i}.json")]
                procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logs[i],
                                              stderr=subprocess.STDOUT, env=env, cwd=ROOT))
            problem = _wait(procs, start + TIMEOUT_S)
        finally:
            for p in procs:  # a failed or late run leaves workers behind: end them here
                if p.poll() is None:
                    p.kill()
                p.wait()
            for log in logs:
                log.close()
        seconds = time.monotonic() - start
        if problem is not None:
            return Run(None, _failure(problem, procs, tmp), seconds)
        return Run([json.loads((tmp / f"result{i}.json").read_text()) for i in range(PROCESSES)], None, seconds)


def _free_port() -> int:
    """A TCP port free on loopback now (the coordinator binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(procs, deadline: float) -> str | None:
    """None once every worker has exited 0; otherwise what went wrong, as soon as it does (a worker
    exiting non-zero leaves the others waiting in a collective)."""
    while True:
        codes = [p.poll() for p in procs]
        failed = [i for i, code in enumerate(codes) if code not in (None, 0)]
        if failed:
            return f"worker {failed[0]} exited with {codes[failed[0]]}"
        if all(code == 0 for code in codes):
            return None
        if time.monotonic() > deadline:
            return f"workers still running after {TIMEOUT_S} s (exit codes {codes}); stopped"
        time.sleep(0.1)


def _failure(problem: str, procs, tmp: Path) -> str:
    parts = [f"{WORKER.name}: {problem}"]
    for i, p in enumerate(procs):
        result = tmp / f"result{i}.json"
        error = json.loads(result.read_text()).get("error") if result.exists() else None
        log = (tmp / f"log{i}.txt").read_text()[-4000:]
        parts.append(f"--- worker {i} (exit {p.returncode})\n{error or ''}{log}")
    return "\n".join(parts)


def test_workers_end_by_themselves():
    """Every worker exits 0 within the limit and reports on every case."""
    rs = reports()
    assert [r["process_id"] for r in rs] == list(range(PROCESSES))
    for r in rs:
        assert sorted(case_id(x["case"]) for x in r["results"]) == sorted(map(case_id, CASES))


@pytest.mark.parametrize("c", CASES, ids=[case_id(c) for c in CASES])
def test_ring_across_processes_matches_full_sequence(c):
    first = results(c)[0]
    table = "\n".join(x["line"] for x in first["comparisons"])
    assert all(x["ok"] for x in first["comparisons"]), f"over budget:\n{table}"
    worst = max(x["tolerance"] for x in first["comparisons"])  # and the same as flash_attention
    assert max(first["rms_rel_to_flash"].values()) <= 2 * worst, (first["rms_rel_to_flash"], table)


@pytest.mark.parametrize("c", CASES, ids=[case_id(c) for c in CASES])
def test_mesh_spans_every_process(c):
    """The ring's output lies on all n devices, DEVICES_PER_PROCESS of them in each process, and every
    process built the same inputs from the seed and gathered the same results."""
    per_process = results(c)
    for r in per_process:
        assert (r["devices"], r["local_devices"]) == (c["n"], DEVICES_PER_PROCESS), r
        assert r["input_digests"] == per_process[0]["input_digests"], [x["input_digests"] for x in per_process]
        assert r["output_digests"] == per_process[0]["output_digests"], [x["output_digests"] for x in per_process]

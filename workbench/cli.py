"""The `workbench` command: `workbench verify` (every kernel against its float64 oracle) and
`workbench bench` (timings appended to data/bench/).

Subcommands are argparse subparsers, each a `_<name>_parser` that registers its options and a
`_<name>` that runs it and returns the exit status.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")  # reports are written headless

# noqa: E402 below: these import workbench first (compiled vs interpreted Triton), after MPLBACKEND is set
from . import autotune, bench, verify, verify_report  # noqa: E402
from .bench import data_parallel as bench_data_parallel  # noqa: E402
from .bench import ring as bench_ring  # noqa: E402


def _verify_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "verify", help="check every kernel against its float64 oracle over a fixed case matrix",
        description="Run each op's case matrix in float32 and bfloat16 with random cotangents and hold "
                    "every output and gradient to 1.5 × the reference's own error + atol against a float64 "
                    "oracle. Prints a table, writes a report, exits 1 on any FAIL.")
    p.add_argument("--op", action="append", choices=sorted(verify.OPS), metavar="NAME",
                   help=f"op to verify (repeatable; default all: {', '.join(verify.OPS)})")
    p.add_argument("--implementation", choices=verify.IMPLEMENTATIONS, default="triton",
                   help="what is checked: the Triton kernels (default) or the reference itself")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="report directory (default reports/verify-<date>)")
    p.add_argument("--quick", action="store_true", help="one or two tiny cases per op (smoke test)")
    p.add_argument("--case", action="append", metavar="NAME", help="only this case (repeatable)")
    p.add_argument("--dtype", action="append", choices=verify.DTYPES, help="only this dtype (repeatable)")
    p.add_argument("--module", action="append", default=[], metavar="MODULE",
                   help="also run the VERIFY_CASES (workbench.verify.CheckCase) of this importable module, e.g. "
                        "my_pkg.my_op (repeatable; with --module and no --op, only the modules run)")
    p.add_argument("--jobs", type=int, metavar="N",
                   help="worker processes sharing the cases (default: 1 in the interpreter, else one per CPU "
                        "core up to 16; on a GPU most of a case's time is compiling its kernels on the CPU)")
    p.set_defaults(run=_verify)


def _verify(args: argparse.Namespace, command: str) -> int:
    # tiny shapes: a config timed there says nothing about yours, and timing every candidate is most of a cold
    # run; each autotuned kernel runs its first candidate unless WORKBENCH_AUTOTUNE says otherwise
    os.environ.setdefault(autotune.MODE_VAR, "off")
    report = verify.run(args.op, implementation=args.implementation, dtypes=args.dtype or verify.DTYPES,
                        quick=args.quick, cases=args.case, modules=args.module, jobs=args.jobs)
    print(verify_report.table(report.rows))
    out = args.out or verify_report.default_out_dir()
    figures = verify_report.write(report, out, command)
    print(f"\nreport: {out}/summary.md, results.json, {len(figures)} figures")
    print(verify_report.summary_line(report))
    return 0 if report.ok else 1


def _int_list(text: str) -> list[int]:
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma list of integers, got {text!r}") from None


def _bench_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "bench", help="time forward and forward+backward of an op; append a JSON record to data/bench/",
        description="Time each shape of a shape set: forward and forward+backward (random cotangents for "
                    "every output) of the Triton kernel, the JAX reference and, with --peers, installed "
                    "peers; median/min/p90 ms, GB/s, ratio to the best peer, error vs the reference "
                    "(WRONG above a loose bound). Progress on stderr, a table on stdout, one new JSON file "
                    "per run. On a CPU only the tiny shape sets run (interpreted, timings meaningless).")
    p.add_argument("--op", choices=sorted([*bench.OPS, "ring_attention"]), default="recurrent",
                   help="op to time (default recurrent); ring_attention: weak scaling over the visible devices "
                        "(workbench/bench/ring.py; --peers and --implementations do not apply)")
    p.add_argument("--peers", action="store_true", help="also time installed peers (others recorded as absent)")
    p.add_argument("--shapes", default="target", metavar="NAME",
                   help="shape set: " + "; ".join(f"{op}: {', '.join(spec.shape_sets)}"
                                                  for op, spec in bench.OPS.items())
                        + f"; ring_attention: {', '.join(bench_ring.SHAPE_SETS)} (default target)")
    p.add_argument("--iters", type=int, default=20, metavar="N", help="timed samples after warm-up (default 20)")
    p.add_argument("--reps", type=int, default=1, metavar="R",
                   help="calls per sample, issued back to back before one wait for the device (default 1: "
                        "every call pays the launch and sync latency)")
    p.add_argument("--timer", choices=bench.TIMERS, default="calls",
                   help="calls (default): a sample is R calls of a pass's jitted program; copies: R calls of one "
                        "program that runs the pass n times (n from its time: up to 2 ms of work), per copy: the "
                        "device's time for programs too short to hide the host's dispatch (torch peers are "
                        "timed by calls either way; the record says which row was timed how); device: that "
                        "program timed by the GPU itself, the span of its kernels in a profiler trace per copy, "
                        "without the host's cost of calling it (GPU only)")
    p.add_argument("--paired", type=int, default=0, metavar="N",
                   help="with --timer copies or device: after each shape, N rounds of the kernel and the best peer "
                        "timed one after the other (the order reversed every round); the kernel's rows record the "
                        "median of the rounds' ratios (`paired`), free of the drift between two medians taken apart")
    p.add_argument("--against", action="append", default=[], metavar="DIR",
                   help="another checkout of workbench (the folder holding its workbench package), loaded into this "
                        "process and timed as the peer workbench@<folder name> on the same inputs; with --paired the "
                        "kernel is paired with it (repeatable)")
    p.add_argument("--settle", type=float, default=0.0, metavar="SECONDS",
                   help="run each timed program back to back this long before its samples (default 0): a GPU at "
                        "its power limit lowers its clocks within a second or two of sustained work, so short "
                        "samples of a program timed after idle or after another one read other clocks")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help=f"record directory (default {bench.DEFAULT_OUT}; with --first-call {bench.FIRST_CALL_OUT})")
    p.add_argument("--errors-from", choices=("reference", "peers"), default="reference",
                   help="what the errors are measured against: the JAX reference (run even when not timed; "
                        "default) or the op's peers measured in the same run (the reference is then not run "
                        "unless timed: its compile at large shapes can take minutes)")
    p.add_argument("--implementations", default=",".join(bench.IMPLEMENTATIONS), metavar="LIST",
                   help=f"comma list of {', '.join(bench.IMPLEMENTATIONS)} (default both)")
    p.add_argument("--T", type=_int_list, metavar="LIST",
                   help="only the shapes of the set with these sequence lengths, a comma list (e.g. 32768,65536: "
                        "a long sweep in parts; the record keeps the list)")
    p.add_argument("--no-variants", action="store_true",
                   help="time the Triton path alone, not its variants (each compiles and autotunes anew at every "
                        "shape: for long sweeps)")
    p.add_argument("--variants", metavar="LIST",
                   help="time only these variants of the Triton path beside it, a comma list of the op's variant "
                        "names (e.g. '8 segments')")
    p.add_argument("--data-parallel", action="store_true",
                   help="time the op with its batch sharded over every visible device against one device with its "
                        "share of the batch (workbench/bench/data_parallel.py); records go to data_parallel/")
    p.add_argument("--first-call", action="store_true",
                   help="time nothing per call: record the wall seconds from a fresh process's start to its first "
                        "forward+backward result at the shape set, with empty autotune, kernel and JAX compilation "
                        "caches and then with the caches that process left (two subprocesses; docs/autotune.md)")
    p.set_defaults(run=_bench)


def _bench(args: argparse.Namespace, command: str) -> int:
    other_mode = ("--first-call" if args.first_call else "--data-parallel" if args.data_parallel
                  else "--op ring_attention" if args.op == "ring_attention" else None)
    if args.against and other_mode:
        raise ValueError(f"--against: times another checkout beside the op's kernel in a plain run; {other_mode} "
                         f"has no peers (got --against {' '.join(args.against)})")
    if args.first_call:
        return _first_call(args, command)
    if args.data_parallel:
        return _data_parallel(args, command)
    out = args.out or bench.DEFAULT_OUT
    if args.op == "ring_attention":
        return _recorded(args.op, out, lambda stamp: bench_ring.run(args.shapes, iters=args.iters, reps=args.reps,
                                                                    command=command),
                         bench_ring.table, claim=False)
    implementations = [s.strip() for s in args.implementations.split(",") if s.strip()]
    variants = (False if args.no_variants else
                [v.strip() for v in args.variants.split(",") if v.strip()] if args.variants else True)
    return _recorded(args.op, out, lambda stamp: bench.run(
        args.op, args.shapes, iters=args.iters, reps=args.reps, implementations=implementations, peers=args.peers,
        command=command, tokens=args.T, errors_from=args.errors_from, variants=variants, timer=args.timer,
        paired=args.paired, settle=args.settle, against=args.against,
        progress=lambda partial: bench.write_partial(partial, out, stamp)), bench.table)


def _data_parallel(args: argparse.Namespace, command: str) -> int:
    if args.op == "ring_attention":
        raise ValueError("--data-parallel: ring_attention shards the sequence; its bench is weak scaling (no flag)")
    return _recorded(args.op, args.out or bench_data_parallel.OUT, lambda stamp: bench_data_parallel.run(
        args.op, args.shapes, iters=args.iters, reps=args.reps, command=command), bench_data_parallel.table)


def _first_call(args: argparse.Namespace, command: str) -> int:
    if args.op == "ring_attention":
        raise ValueError("--first-call: ring_attention has no first-call mode (its bench runs on several devices)")
    return _recorded(args.op, args.out or bench.FIRST_CALL_OUT,
                     lambda stamp: bench.first_call(args.op, args.shapes, command=command), bench.first_call_table)


def _recorded(op: str, out, make_record, table, claim: bool = True) -> int:
    """Run `make_record(stamp)` under a record name claimed in `out` (given back if the run fails), write the
    record, print `table(record)` and its path; a refused run is exit status 2."""
    try:
        stamp = bench.claim_stamp(op, out) if claim else None
        try:
            record = make_record(stamp)
        except BaseException:
            if claim:
                bench.release_stamp(op, out, stamp)
            raise
        path = bench.write(record, out, stamp)
    except bench.Refused as exc:
        print(f"workbench bench: refused: {exc}", file=sys.stderr)
        return 2
    print(table(record))
    print(f"\nrecord: {path}")
    return 0


def _tune_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "tune", help="tune every autotuned kernel at the bench shapes on this GPU; merge into the tuning table",
        description="Run each op's Triton forward and forward+backward at its bench shapes with a fresh "
                    "autotune cache and WORKBENCH_AUTOTUNE=refresh, then merge the chosen configs into "
                    "workbench/tuning/<device>.json (the table looked up before anything is timed; "
                    "docs/autotune.md). GPU only.")
    p.add_argument("--write-table", action="store_true", required=True,
                   help="tune and write the table (the one thing this command does; required, so that a bare "
                        "`workbench tune` does not spend minutes of GPU time by accident)")
    p.add_argument("--op", action="append", choices=sorted(bench.OPS), metavar="NAME",
                   help=f"op to tune (repeatable; default all: {', '.join(bench.OPS)})")
    p.add_argument("--shapes", default="target,sweep", metavar="LIST",
                   help="comma list of shape sets (default target,sweep)")
    p.add_argument("--dtypes", default="", metavar="LIST",
                   help="comma list of dtypes (default each op's bench dtype), e.g. bfloat16,float16,float32")
    p.add_argument("--head-dims", type=_int_list, default=[], metavar="LIST",
                   help="every shape at these head dimensions (K = V, or D) instead of its own, e.g. 64,128,256")
    p.add_argument("--kernels", default="", metavar="LIST",
                   help="comma list of kernel names to time again (default all); the others take the table's "
                        "choices, as after a change to those kernels alone")
    p.add_argument("--T", type=_int_list, metavar="LIST",
                   help="only the sets' shapes with these sequence lengths, a comma list (e.g. 65536)")
    p.add_argument("--passes", default="forward,forward_backward", metavar="LIST",
                   help="which passes run at each shape, a comma list of forward, forward_backward (default both); "
                        "forward alone times the kernels only the forward launches without compiling the backward")
    p.add_argument("--compile-workers", type=int, default=0, metavar="N",
                   help="compile each kernel's candidates at once in N child processes before timing them "
                        "(default 0: each compiles as it is timed)")
    p.add_argument("--folder", type=Path, metavar="DIR", help="table folder (default the package's workbench/tuning)")
    p.set_defaults(run=_tune)


def _tune(args: argparse.Namespace, command: str) -> int:
    from .bench import tune

    try:
        path = tune.write_table(args.op or list(bench.OPS), [s for s in args.shapes.split(",") if s],
                                dtypes=[d for d in args.dtypes.split(",") if d], head_dims=args.head_dims,
                                kernels=[k for k in args.kernels.split(",") if k], tokens=args.T,
                                passes=[p for p in args.passes.split(",") if p],
                                compile_workers=args.compile_workers,
                                **({"folder": args.folder} if args.folder else {}))
    except bench.Refused as exc:
        print(f"workbench tune: refused: {exc}", file=sys.stderr)
        return 2
    except tune.ShapesFailed as exc:
        print(f"workbench tune: {exc}\ntable: {exc.path}", file=sys.stderr)
        return 1
    print(f"table: {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="workbench", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _verify_parser(subparsers)
    _bench_parser(subparsers)
    _tune_parser(subparsers)
    args = parser.parse_args(argv)
    try:
        return args.run(args, shlex.join(["workbench", *argv]))
    except ValueError as exc:
        parser.error(str(exc))


if __name__ == "__main__":
    sys.exit(main())

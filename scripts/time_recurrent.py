"""GPU timing of `workbench.recurrent` at the target shape, with an optional backward block_k sweep.

A thin wrapper around the harness (`workbench bench`, in `workbench/bench/`), which does the
timing, the error check against the reference and the record; this script only adds what the
harness has no option for: another T, and forward+backward per `Tuning.block_k`.

    python scripts/time_recurrent.py [--out DIR] [--iters 20] [--T 4096] [--sweep-block-k 8,16,32,64] [--peers]

Without those two options it is `workbench bench --op recurrent --shapes target`.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import workbench  # noqa: F401  (first: decides compiled vs interpreted Triton)
import jax
from workbench import bench, testing
from workbench.recurrent import Tuning


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=bench.DEFAULT_OUT)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--T", type=int, default=None, help="sequence length (default: the target's)")
    parser.add_argument("--sweep-block-k", default="",
                        help="also time forward+backward per Tuning.block_k, e.g. 8,16,32,64")
    parser.add_argument("--peers", action="store_true")
    args = parser.parse_args(argv)

    op = bench.OPS["recurrent"]
    (target,) = op.shape_sets["target"]
    shape = dict(target, T=args.T or target["T"])
    try:
        record = bench.run("recurrent", "target", iters=args.iters, peers=args.peers, shapes=[shape],
                           command=shlex.join(["python", "scripts/time_recurrent.py", *argv]))
    except bench.Refused as exc:
        print(f"time_recurrent: refused: {exc}", file=sys.stderr)
        return 2
    if shape != target:
        record["shape_set"] = None  # an explicit shape, not the named set

    sweep = {}
    if args.sweep_block_k:
        inputs = op.inputs(shape, op.dtype, 0)
        calls = bench.jax_calls(op, "reference", inputs, [])
        cotangents = testing.random_cotangents(1000, jax.eval_shape(calls.forward))
        for bk in [int(x) for x in args.sweep_block_k.split(",") if x]:
            calls = bench.jax_calls(op, "triton", inputs, cotangents, tuning=Tuning(block_k=bk))
            sweep[bk], _ = bench.time_ms(calls.forward_backward, calls.block, args.iters)
            print(f"   block_k={bk:3d}: forward+backward {sweep[bk]['median']:8.3f} ms", file=sys.stderr, flush=True)
    record["forward_backward_ms_by_block_k"] = sweep

    print(bench.table(record))
    print("\nrecord:", bench.write(record, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

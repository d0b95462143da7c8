"""What Triton's compiler makes of each kernel of an op for a Hopper GPU, on a machine without one.

    python scripts/kernel_resources.py --op flash_attention --shapes target [--all-configs] [--workers 2]
    python scripts/kernel_resources.py --op chunk_kda --shapes sweep --T 65536 --only chunk_kda_resweep_o_kernel

Traces the op's forward alone and its forward and backward at each shape of a `workbench bench` shape set (abstractly: no
kernel runs), collects every kernel launch with the configs the GPU autotuner would time (every config
of the kernel with --all-configs), compiles each to a sm_90 cubin (`workbench.compile_check`) and prints,
per kernel and config: registers per thread, stack bytes (register spills), shared memory, and counts of
HGMMA (Hopper's warpgroup MMA), LDL/STL (local-memory traffic: spills) and MUFU.EX2 in the SASS; with --sass DIR
also each config's whole SASS (where in the loop the spills and barriers sit). A
compiled kernel at 255 registers with stack bytes is spilling; one with HMMA but no HGMMA is not on
Hopper's fast MMA path. These are the compiler's output, not timings: `workbench bench` on a GPU decides.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import workbench  # noqa: E402, F401  (first: decides compiled vs interpreted Triton)

import jax.numpy as jnp  # noqa: E402

from workbench import bench, compile_check  # noqa: E402

COLUMNS = ("registers", "stack", "shared", "HGMMA", "HMMA", "STL", "LDL", "MUFU.EX2")


def record(op_name: str, shape_set: str, all_configs: bool, lengths=None, options=None) -> list[dict]:
    """Every launch of the op's forward alone and of its forward+backward at the set's shapes (those with a
    T in `lengths`, when given), with `options` (a bench variant's) passed to every call."""
    options = options or {}
    op = bench.OPS[op_name]
    dtype = jnp.dtype(op.dtype)
    with compile_check.record(all_configs=all_configs) as specs:
        for shape in op.shape_sets[shape_set]:
            if not lengths or shape.get("T", shape.get("Tq")) in lengths:
                op.trace(shape, dtype, options)
    return specs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--op", default="flash_attention", choices=sorted(bench.OPS))
    p.add_argument("--shapes", default="target")
    p.add_argument("--all-configs", action="store_true")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--json", help="also write the rows to this file")
    p.add_argument("--T", default="", help="only the set's shapes with these sequence lengths (comma list)")
    p.add_argument("--only", default="", help="only these kernels (comma list of names)")
    p.add_argument("--variant", help="one of the op's bench variants (its options go to every call)")
    p.add_argument("--sass", metavar="DIR", help="also write each kernel config's SASS into DIR (created), one "
                                                  "file per config: <kernel>-<digest>.sass, listed below the table")
    args = p.parse_args()
    op = bench.OPS[args.op]
    if args.variant is not None:
        bench.chosen_variants(args.op, [args.variant])  # an unknown name is a ValueError naming the known ones
    lengths = [int(t) for t in args.T.split(",")] if args.T else None
    options = dict(op.variants[args.variant]) if args.variant else None
    specs = compile_check.distinct(record(args.op, args.shapes, args.all_configs, lengths, options))
    if args.only:
        specs = [s for s in specs if s["kernel"] in args.only.split(",")]
    if args.sass:
        Path(args.sass).mkdir(parents=True, exist_ok=True)
    result = compile_check.compile_all(specs, last="resources", workers=args.workers, sass_dir=args.sass)
    rows = sorted(result["resources"], key=lambda r: (r["spec"]["kernel"], json.dumps(r["spec"]["constexprs"],
                                                                                      sort_keys=True)))
    print(f"{args.op} {args.shapes}: {len(rows)} kernel configs compiled for sm_90 in {result['seconds']} s")
    print(f"{'kernel':28s} {'config':44s} " + " ".join(f"{c:>9s}" for c in COLUMNS))
    for row in rows:
        spec = row["spec"]
        blocks = ",".join(f"{k}={v}" for k, v in spec["constexprs"].items() if k.startswith("B") and k != "BD")
        flags = ",".join(k for k, v in spec["constexprs"].items() if v is True and k.isupper())
        config = f"{blocks} w{spec['num_warps']} s{spec['num_stages']} {flags}"[:44]
        print(f"{spec['kernel'][:28]:28s} {config:44s} " + " ".join(f"{row['resources'][c]:9d}" for c in COLUMNS))
    if args.sass:
        for row in rows:
            print(f"SASS: {Path(args.sass) / compile_check.sass_name(row['spec'])}")
    for failure in result["failed"]:
        print(compile_check.describe(failure))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=repr))
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())

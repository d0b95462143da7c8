"""The bytes each kernel launch of an op reads and writes (its array arguments and outputs, each counted once),
launch by launch, beside the bytes the bench counts for the op (inputs read once, outputs written once).
Nothing runs: the op is traced abstractly where Triton is interpreted (any machine without a GPU, or
WORKBENCH_INTERPRET=1), so GPU-sized shapes take seconds.

    python scripts/kernel_traffic.py --op chunk_gla --shape B=1,T=65536,H=16,K=64,V=64
    python scripts/kernel_traffic.py --op chunk_kda --shape B=1,T=32768,H=16,K=128,V=128 --passes forward
    python scripts/kernel_traffic.py --op chunk_gla --shape B=8,T=4096,H=16,K=64,V=64 --json   # one JSON object

`workbench.bench.traffic` does the counting; scripts/op_profile.py gives the same launches' times on a GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import workbench  # noqa: E402, F401  (first: decides compiled vs interpreted Triton)

from workbench import bench  # noqa: E402
from workbench.bench.spec import parse_shape  # noqa: E402
from workbench.bench.traffic import PASSES, pass_traffic  # noqa: E402

MIB = 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--op", required=True, choices=sorted(bench.OPS))
    parser.add_argument("--shape", required=True, help="e.g. B=1,T=65536,H=16,K=64,V=64")
    parser.add_argument("--passes", default=",".join(PASSES), help="comma list of " + ", ".join(PASSES))
    parser.add_argument("--dtype", default=None, help="default: the op's bench dtype")
    parser.add_argument("--json", action="store_true",
                        help='print {"least": {pass: bytes}, "launches": {pass: [{kernel, read, written}, ...]}}')
    args = parser.parse_args()
    op = bench.OPS[args.op]
    shape = parse_shape(args.shape)
    dtype = args.dtype or op.dtype
    least = dict(zip(PASSES, op.bytes(shape, dtype)))
    passes = args.passes.split(",")
    if args.json:
        launches = {p: [dataclasses.asdict(r) for r in pass_traffic(op, shape, dtype, p)] for p in passes}
        print(json.dumps({"least": {p: least[p] for p in passes}, "launches": launches}))
        return
    for pass_ in passes:
        rows = pass_traffic(op, shape, dtype, pass_)
        total = sum(r.read + r.written for r in rows)
        print(f"\n{args.op} {shape} {dtype} {pass_}: {total / MIB:.0f} MiB through the kernels, "
              f"{total / least[pass_]:.2f}× the bench's {least[pass_] / MIB:.0f} MiB")
        print(f"  {'kernel':44s} {'read MiB':>10s} {'written MiB':>12s}")
        for r in rows:
            print(f"  {r.kernel:44s} {r.read / MIB:10.1f} {r.written / MIB:12.1f}")


if __name__ == "__main__":
    main()

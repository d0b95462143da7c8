"""Wall time of the bench's program of n copies of a pass against n (GPU only): is the per-copy time of
`--timer copies` the device's time per copy, or does it carry a fixed cost per program?

    python scripts/copies_latency.py --op chunk_gla --shape B=8,T=4096,H=16,K=64,V=64 --copies 1,2,4,8,16

Per implementation and pass: the median of `--iters` samples of one call of the program of n copies
(`PeerCalls.copies`, as `workbench bench --timer copies` builds it; the 4 GiB cap on its arguments lifted),
for each n, and the least-squares line t(n) = L + n·D through them: D is the time each copy adds, L the cost
of calling the program at all (dispatch, the wait for the device, the handling of its buffers).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import workbench  # noqa: E402, F401

import jax  # noqa: E402

from workbench import bench, testing  # noqa: E402
from workbench.bench import timing  # noqa: E402
from workbench.bench.spec import parse_shape  # noqa: E402


def line(ns, ts):
    """(intercept, slope) of the least-squares line through (n, t)."""
    mn, mt = statistics.fmean(ns), statistics.fmean(ts)
    slope = sum((n - mn) * (t - mt) for n, t in zip(ns, ts)) / sum((n - mn) ** 2 for n in ns)
    return mt - slope * mn, slope


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--op", required=True, choices=sorted(bench.OPS))
    parser.add_argument("--shape", required=True)
    parser.add_argument("--copies", default="1,2,4,8,16")
    parser.add_argument("--passes", default="forward,forward_backward")
    parser.add_argument("--iters", type=int, default=15)
    parser.add_argument("--peers", action="store_true", help="also the op's JAX peers")
    args = parser.parse_args()
    timing.COPIES_BYTES = 1 << 62
    op = bench.OPS[args.op]
    shape = parse_shape(args.shape)
    inputs = op.inputs(shape, op.dtype, 0)
    outputs = jax.eval_shape(bench.jax_calls(op, "reference", inputs, []).forward)
    cotangents = testing.random_cotangents(1000, outputs)
    runs = [("triton", lambda: bench.jax_calls(op, "triton", inputs, cotangents))]
    if args.peers:
        for peer in op.peers:
            try:
                bench.peers.import_peer(peer.module)
            except Exception as exc:  # noqa: BLE001
                print(f"{peer.name}: not available ({exc})")
                continue
            runs.append((peer.name, lambda peer=peer: peer.setup(inputs, cotangents)))
    ns = [int(n) for n in args.copies.split(",")]
    print(f"{args.op} {shape} {op.dtype} on {jax.devices()[0].device_kind}; median of {args.iters} samples",
          flush=True)
    for label, make in runs:
        calls = make()
        if calls.copies is None:
            continue
        for pass_ in args.passes.split(","):
            ts = []
            for n in ns:
                call, got = calls.copies(pass_, n)
                assert got == n, (got, n)
                stats, _ = timing.time_ms(call, calls.block, args.iters)
                ts.append(stats["median"])
                print(f"  {label} {pass_} n={n:3d}: {stats['median']:8.3f} ms, {stats['median'] / n:7.3f} per copy",
                      flush=True)
            fixed, per = line(ns, ts)
            print(f"{label} {pass_}: t(n) = {fixed:.3f} + n · {per:.4f} ms", flush=True)


if __name__ == "__main__":
    main()

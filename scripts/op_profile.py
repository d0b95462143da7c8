"""Per-kernel GPU time of one op call at one shape, read from a JAX profiler trace (GPU only).

    python scripts/op_profile.py --op chunk_kda --shape B=1,T=65536,H=16,K=128,V=128 \
        --variants default,'one sweep','unfused forward' --passes forward,forward_backward
    python scripts/op_profile.py --op flash_attention --shape B=4,T=4096,H=16,D=128,causal=1 --peers

Inputs and cotangents as `workbench bench` makes them (`bench.OPS[op].inputs`, the bench's cotangent seed);
each variant ('default' is the Triton path as shipped, the others are the op's bench variants) runs under
`jax.jit` as the bench runs it (`bench.jax_calls`). Per variant and pass: the bench's timing (median of
`--iters` samples of `--reps` back-to-back calls), then `--reps` calls under `jax.profiler.trace`; the
trace's device events are summed per kernel name and divided by `--reps`: milliseconds and launches per
call, and their sum (device busy time; the difference to the timing is launch gaps and host time).
`--copies N` profiles instead what `workbench bench --timer copies` times: one program of N copies of the pass,
each on its own copy of the arguments (`PeerCalls.copies`), timed and traced as one call, divided by N; it adds
the span of the device's events (first start to last end) per copy, and the gaps between consecutive events.
`--peers` adds the op's installed peers that run under JAX (cuDNN attention; torch peers are not traced).
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import workbench  # noqa: E402, F401  (first: decides compiled vs interpreted Triton)

import jax  # noqa: E402

from workbench import bench, testing  # noqa: E402
from workbench.bench.spec import parse_shape  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--op", required=True, choices=sorted(bench.OPS))
    parser.add_argument("--shape", required=True, help="e.g. B=1,T=65536,H=16,K=128,V=128")
    parser.add_argument("--variants", default="default", help="comma list: default and/or the op's bench variants")
    parser.add_argument("--passes", default="forward", help="comma list of forward, forward_backward")
    parser.add_argument("--peers", action="store_true", help="also the op's JAX peers (e.g. cuDNN)")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--dtype", default=None, help="default: the op's bench dtype")
    parser.add_argument("--top", type=int, default=12, help="kernels listed per run")
    parser.add_argument("--copies", type=int, default=0, help="profile the bench's program of N copies instead")
    args = parser.parse_args()

    op = bench.OPS[args.op]
    shape = parse_shape(args.shape)
    dtype = args.dtype or op.dtype
    inputs = op.inputs(shape, dtype, 0)
    outputs = jax.eval_shape(bench.jax_calls(op, "reference", inputs, []).forward)
    cotangents = testing.random_cotangents(1000, outputs)
    names = [v for v in args.variants.split(",") if v]
    chosen = bench.chosen_variants(args.op, [v for v in names if v != "default"])
    runs = [(("triton" if v == "default" else f"triton[{v}]"),
             (lambda opts=({} if v == "default" else chosen[v]): bench.jax_calls(op, "triton", inputs, cotangents,
                                                                                   **opts)))
            for v in names]
    if args.peers:
        for peer in op.peers:
            try:
                bench.peers.import_peer(peer.module)
            except Exception as exc:  # noqa: BLE001 — a missing peer is reported, not fatal
                print(f"{peer.name}: not available ({exc})")
                continue
            runs.append((peer.name, lambda peer=peer: peer.setup(inputs, cotangents)))
    print(f"{args.op} {shape} {dtype} on {jax.devices()[0].device_kind}; {args.iters} samples of {args.reps} calls",
          flush=True)
    for label, make in runs:
        calls = make()
        for pass_ in args.passes.split(","):
            fn, per, reps = getattr(calls, pass_), 1, args.reps
            if args.copies:
                if calls.copies is None:
                    print(f"\n{label} {pass_}: not one JAX program (no copies)")
                    continue
                fn, per = calls.copies(pass_, args.copies)
                reps = 1
            stats, _ = bench.time_ms(fn, calls.block, args.iters, reps=reps)
            with tempfile.TemporaryDirectory() as tmp:
                jax.profiler.start_trace(tmp, create_perfetto_trace=True)
                for _ in range(reps):
                    out = fn()
                calls.block(out)
                jax.profiler.stop_trace()
                events = bench.device_events(tmp)
            kernels = collections.defaultdict(list)
            for _, dur, name in events:
                kernels[name].append(dur)
            calls_traced = reps * per
            per_call = sorted(((sum(d) / calls_traced, len(d) / calls_traced, n) for n, d in kernels.items()),
                              reverse=True)
            busy = sum(ms for ms, _, _ in per_call)
            timing = stats["median"] / per
            print(f"\n{label} {pass_}: {timing:.3f} ms per call (bench timing"
                  + (f", {per} copies in one program" if args.copies else "") + f"), device busy {busy:.3f} ms",
                  flush=True)
            if args.copies and events:
                span = max(t + d for t, d, _ in events) - events[0][0]
                gaps = sorted(((b[0] - (a[0] + a[1]), a[2], b[2]) for a, b in zip(events, events[1:])), reverse=True)
                print(f"  span of the device's events {span / per:.3f} ms per copy; gaps between events "
                      f"{sum(g for g, _, _ in gaps if g > 0) / per:.3f} ms per copy; largest:")
                for g, a, b in gaps[:5]:
                    print(f"    {g:8.3f} ms  after {a[:50]} before {b[:50]}")
            for ms, count, name in per_call[:args.top]:
                print(f"  {ms:8.3f} ms  {count:4.1f}×  {name[:110]}")
            if len(per_call) > args.top:
                print(f"  {sum(ms for ms, _, _ in per_call[args.top:]):8.3f} ms  in {len(per_call) - args.top} more")


if __name__ == "__main__":
    main()

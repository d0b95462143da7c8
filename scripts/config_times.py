"""Time every config of one autotuned kernel of an op, each config alone, on a GPU.

    python scripts/config_times.py --op flash_attention --shapes target \
        --kernel workbench.flash_attention.kernels:flash_bwd_dkdv_dq_kernel [--configs 0,2] [--variant NAME] [--T 4096]

Our kernels launch the first config their pruning keeps (lists ordered best-first from measurements), so
choosing an order needs each config timed in the same process. For each shape of the `workbench bench`
shape set and each config of the kernel (the kernel's config list replaced by that config alone, every
other kernel on its own choice), this times the op's forward and forward+backward under `jax.jit`
(`bench.time_ms`, the medians) and measures each config's outputs and gradients against the first
config's (RMS-relative: a config that computes something else shows at once). Prints a table; with
--out also writes the rows as JSON. Timings, not a record: `workbench bench` makes the records.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import workbench  # noqa: E402, F401  (first: decides compiled vs interpreted Triton)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from workbench import autotune, bench, launch, testing  # noqa: E402


def kernel_at(address: str):
    """`module:attribute` → the autotuned kernel object."""
    module, _, attribute = address.partition(":")
    if not attribute:
        raise ValueError(f"--kernel: expected module:attribute, got {address!r}")
    kernel = getattr(importlib.import_module(module), attribute)
    if not launch.autotune_configs(kernel):
        raise ValueError(f"--kernel: {address} is not an @triton.autotune kernel")
    return kernel


def config_name(config) -> str:
    return autotune.config_text(autotune.config_fields(config))


def run(op_name: str, shape_set: str, kernel, indices, variant: str | None, iters: int, reps: int,
        tokens=None):
    op = bench.OPS[op_name]
    options = dict(op.variants[variant]) if variant else {}
    dtype = jnp.dtype(op.dtype)
    configs = launch.autotune_configs(kernel)
    indices = range(len(configs)) if indices is None else indices
    rows = []
    shapes = [s for s in op.shape_sets[shape_set] if tokens is None or s["T"] in tokens]
    for seed, shape in enumerate(shapes):
        inputs = op.inputs(shape, dtype, seed)
        outputs = jax.eval_shape(bench.jax_calls(op, "reference", inputs, []).forward)
        cotangents = testing.random_cotangents(1000 + seed, outputs)
        first = None
        for index in indices:
            kernel.configs = [configs[index]]
            try:
                calls = bench.jax_calls(op, "triton", inputs, cotangents, **options)
                fwd, _ = bench.time_ms(calls.forward, calls.block, iters, bench.WARMUP, reps)
                fb, out = bench.time_ms(calls.forward_backward, calls.block, iters, bench.WARMUP, reps)
            except Exception as exc:  # a config that does not fit (shared memory, registers) is a row too
                rows.append({"shape": dict(shape), "config": config_name(configs[index]),
                             "failed": f"{type(exc).__name__}: {exc}"[:300]})
                continue
            finally:
                kernel.configs = configs
            got = calls.to_numpy(out)
            first = got if first is None else first
            errors = {name: testing.rms_rel(np.asarray(g, np.float64), np.asarray(f, np.float64))
                      for name, g, f in zip(op.names, got, first)}
            rows.append({"shape": dict(shape), "config": config_name(configs[index]),
                         "forward_ms": fwd["median"], "forward_backward_ms": fb["median"],
                         "rms_rel_to_first": errors})
            print(f"{rows[-1]['shape']} {rows[-1]['config']}: forward {fwd['median']:.3f} ms, "
                  f"forward+backward {fb['median']:.3f} ms, worst rms_rel to first "
                  f"{max(errors.values()):.1e}", file=sys.stderr, flush=True)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--op", required=True, choices=sorted(bench.OPS))
    parser.add_argument("--shapes", default="target", help="a shape set of the op (default target)")
    parser.add_argument("--kernel", required=True, help="module:attribute of the autotuned kernel")
    parser.add_argument("--configs", help="comma list of config indices (default: all)")
    parser.add_argument("--variant", help="one of the op's bench variants, passed to every call")
    parser.add_argument("--T", help="only the shapes of the set with these sequence lengths, a comma list")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--out", help="write the rows to this JSON file")
    args = parser.parse_args(argv)
    op = bench.OPS[args.op]
    if args.shapes not in op.shape_sets:
        parser.error(f"--shapes: {args.op} has {sorted(op.shape_sets)}, got {args.shapes!r}")
    if args.variant is not None:
        bench.chosen_variants(args.op, [args.variant])  # an unknown name is a ValueError naming the known ones
    kernel = kernel_at(args.kernel)
    indices = None if args.configs is None else [int(i) for i in args.configs.split(",")]
    tokens = None if args.T is None else [int(t) for t in args.T.split(",")]
    rows = run(args.op, args.shapes, kernel, indices, args.variant, args.iters, args.reps, tokens)
    device = jax.devices()[0].device_kind
    print(f"{args.op} {args.shapes} on {device}, {args.kernel}, each config alone (median ms):")
    for row in rows:
        shape = " ".join(f"{k}={v}" for k, v in row["shape"].items())
        if "failed" in row:
            print(f"  {shape}  {row['config']:<24} failed: {row['failed']}")
        else:
            print(f"  {shape}  {row['config']:<24} forward {row['forward_ms']:.3f}  forward+backward "
                  f"{row['forward_backward_ms']:.3f}  rms_rel {max(row['rms_rel_to_first'].values()):.1e}")
    if args.out:
        record = {"command": " ".join(["python scripts/config_times.py", *(argv or sys.argv[1:])]),
                  "date": bench.stamp_now(), "device": device, "versions": bench.versions(),
                  "git": bench.git_state(), "op": args.op, "shapes": args.shapes, "kernel": args.kernel,
                  "iters": args.iters, "reps": args.reps, "rows": rows}
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Minimal GPU timing of `workbench.recurrent` (the full harness is `workbench bench`, issue 7).

Times forward and forward+backward of the Triton kernel and of the JAX reference under jit for the
target shape of the foundation issue, checks the kernel against the reference on the same inputs,
and appends a JSON record to data/bench/ (or to --out).

    python scripts/time_recurrent.py [--out DIR] [--iters 20]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import time

import workbench  # noqa: F401  (first: decides compiled vs interpreted Triton)
import jax
import jax.numpy as jnp
import triton

from workbench import launch
from workbench.recurrent import Tuning
from workbench.testing import recurrent_inputs, rms_rel

SHAPE = dict(B=8, T=4096, H=16, K=64, V=64)


def _median_ms(fn, *args, iters: int) -> float:
    jax.block_until_ready(fn(*args))  # compile + autotune
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def device_info() -> dict:
    dev = jax.devices()[0]
    info = {"device": dev.device_kind, "platform": dev.platform}
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
        info["nvidia_smi"] = smi
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def versions() -> dict:
    import jaxlib

    out = {"python": platform.python_version(), "jax": jax.__version__, "jaxlib": jaxlib.__version__,
           "triton": triton.__version__}
    try:
        import jax_triton

        out["jax_triton"] = jax_triton.__version__
    except ImportError:
        pass
    return out


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="data/bench")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--T", type=int, default=SHAPE["T"])
    parser.add_argument("--sweep-block-k", default="", help="also time forward+backward per Tuning.block_k, e.g. 8,16,32,64")
    args = parser.parse_args(argv)
    shape = dict(SHAPE, T=args.T)
    B, T, H, K, V = (shape[n] for n in "BTHKV")
    dtype = jnp.bfloat16
    inputs = recurrent_inputs(0, B, T, H, K, V, dtype=dtype, gates=("gk",), strength=0.1, initial_state=False)
    q, k, v, gk = inputs["q"], inputs["k"], inputs["v"], inputs["gk"]
    do = jax.random.normal(jax.random.key(7), (B, T, H, V), jnp.float32).astype(dtype)
    dht = jax.random.normal(jax.random.key(8), (B, H, K, V), jnp.float32)

    results = {}
    for impl in ("triton", "reference"):
        fwd = jax.jit(lambda q, k, v, gk, impl=impl: workbench.recurrent(q, k, v, gk=gk, implementation=impl))

        def fwd_bwd(q, k, v, gk, impl=impl):
            (o, ht), pullback = jax.vjp(lambda *a: workbench.recurrent(*a[:3], gk=a[3], implementation=impl),
                                        q, k, v, gk)
            return o, ht, pullback((do, dht))

        fwd_bwd = jax.jit(fwd_bwd)
        ms_f = _median_ms(fwd, q, k, v, gk, iters=args.iters)
        ms_fb = _median_ms(fwd_bwd, q, k, v, gk, iters=args.iters)
        results[impl] = {"forward_ms": ms_f, "forward_backward_ms": ms_fb,
                         "outputs": jax.device_get(fwd_bwd(q, k, v, gk))}
        print(f"{impl:>9s}: forward {ms_f:8.3f} ms   forward+backward {ms_fb:8.3f} ms", flush=True)

    sweep = {}
    for bk in [int(x) for x in args.sweep_block_k.split(",") if x]:
        tuning = Tuning(block_k=bk)

        def fwd_bwd_bk(q, k, v, gk, tuning=tuning):
            (o, ht), pullback = jax.vjp(lambda *a: workbench.recurrent(*a[:3], gk=a[3], tuning=tuning), q, k, v, gk)
            return o, ht, pullback((do, dht))

        sweep[bk] = _median_ms(jax.jit(fwd_bwd_bk), q, k, v, gk, iters=args.iters)
        print(f"   block_k={bk:3d}: forward+backward {sweep[bk]:8.3f} ms", flush=True)

    names = ["o", "final_state", "dq", "dk", "dv", "dgk"]
    flat = lambda r: [r["outputs"][0], r["outputs"][1], *r["outputs"][2]]  # noqa: E731
    errors = {n: rms_rel(a, b) for n, a, b in zip(names, flat(results["triton"]), flat(results["reference"]))}
    print("rms-rel difference triton vs reference (bf16 inputs):",
          ", ".join(f"{n} {e:.2e}" for n, e in errors.items()))

    record = {
        "op": "recurrent", "script": "scripts/time_recurrent.py", "interpreted": launch.INTERPRET,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **device_info(), "versions": versions(),
        "shape": shape, "dtype": "bfloat16", "gates": ["gk"], "iters": args.iters,
        "timings_ms": {impl: {k2: r[k2] for k2 in ("forward_ms", "forward_backward_ms")}
                       for impl, r in results.items()},
        "rms_rel_vs_reference": errors,
        "forward_backward_ms_by_block_k": sweep,
        "targets_ms": {"forward": 3.6, "forward_backward": 8.0},
    }
    os.makedirs(args.out, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = os.path.join(args.out, f"recurrent-{stamp}.json")
    with open(path, "w") as fh:
        json.dump(record, fh, indent=2, default=float)
    print("wrote", path)


if __name__ == "__main__":
    main()

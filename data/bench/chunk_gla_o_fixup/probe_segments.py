"""chunk_gla's forward and forward+backward at each `Tuning(segments=n)`, timed on the device in one process
(`workbench.device_time.time_on_device`: the best of 3 means of 5 compiled calls), on the bench's inputs.

    python data/bench/chunk_gla_o_fixup/probe_segments.py --shape B=8,T=4096,H=16,K=64,V=64 --segments 1,2,4
"""
import argparse
import json

import workbench  # noqa: F401

import jax
import jax.numpy as jnp

from workbench import bench
from workbench.bench.spec import parse_shape
from workbench.chunk_gla import Tuning
from workbench.device_time import time_on_device


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shape", required=True)
    p.add_argument("--segments", default="1,2,4")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    op = bench.OPS["chunk_gla"]
    shape = parse_shape(args.shape)
    inputs = op.inputs(shape, jnp.bfloat16, 0)
    names = list(op.differentiable)
    primals = {n: inputs[n] for n in names}
    rest = {n: x for n, x in inputs.items() if n not in names}

    def runs(n):
        def forward(xs):
            return op.call("triton", **dict(zip(names, xs)), **rest, tuning=Tuning(segments=n))

        def forward_backward(xs):
            out, vjp = jax.vjp(forward, xs)
            return vjp(jax.tree.map(jnp.ones_like, out))
        return forward, forward_backward

    seg = [int(s) for s in args.segments.split(",")]
    xs = [primals[n] for n in names]
    for r in range(args.rounds):
        for n in seg:
            f, fb = runs(n)
            row = dict(round=r, shape=shape, segments=n, forward_ms=time_on_device(f, xs),
                       forward_backward_ms=time_on_device(fb, xs))
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

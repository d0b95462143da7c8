"""chunk_kda forward+backward with an initial state (the path `whole_in_with_h0.patch` changes), timed on a GPU
by `workbench.device_time.time_on_device` (a jitted program, best of means of back-to-back calls), at a shape
given as B=…,T=…,H=…,K=…,V=…; bfloat16, the bench's gates (`kda_inputs`, strength 1), the table's configs.

    python data/bench/kda_initial_state/probe.py --shape B=8,T=4096,H=16,K=128,V=128

Prints one JSON line: the shape, the ms, and the package's path (which tree ran)."""
import argparse
import json

import jax
import jax.numpy as jnp

import workbench
from workbench.device_time import time_on_device
from workbench.kda.inputs import kda_inputs
from workbench.testing import random_cotangents

NAMES = ("q", "k", "v", "g", "beta", "initial_state")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="B=8,T=4096,H=16,K=128,V=128")
    p.add_argument("--no-initial-state", action="store_true")
    args = p.parse_args()
    dims = {k: int(v) for k, v in (kv.split("=") for kv in args.shape.split(","))}
    B, T, H, K, V = (dims[n] for n in "BTHKV")
    inputs = kda_inputs(0, B, T, H, K, V, dtype=jnp.bfloat16, initial_state=not args.no_initial_state)
    names = [n for n in NAMES if n in inputs]
    cts = random_cotangents(1, (jax.ShapeDtypeStruct((B, T, H, V), jnp.bfloat16),
                                jax.ShapeDtypeStruct((B, H, K, V), jnp.float32)))

    def run(xs):
        primals, cotangents = xs[:len(names)], xs[len(names):]
        out, pullback = jax.vjp(lambda *p: workbench.chunk_kda(**dict(zip(names, p))), *primals)
        return pullback(tuple(cotangents))

    ms = time_on_device(run, [inputs[n] for n in names] + list(cts))
    print(json.dumps({"shape": dims, "initial_state": not args.no_initial_state, "ms": ms,
                      "package": workbench.__file__}))


if __name__ == "__main__":
    main()

"""An op's outputs and gradients (chunk_gla, or chunk_kda with --op; bfloat16 inputs, or --dtype) with the tuning
table's configs against those with each kernel's first config (the one the GPU tests run, `WORKBENCH_AUTOTUNE=off`),
on the bench's inputs:

    WORKBENCH_AUTOTUNE=off   python table_vs_first.py --save /tmp/first.npz
    WORKBENCH_AUTOTUNE=table python table_vs_first.py --save /tmp/table.npz
    python table_vs_first.py --compare /tmp/first.npz /tmp/table.npz

Prints, per shape and array, the largest difference relative to the array's RMS."""
import argparse

import numpy as np

SHAPES = {"chunk_gla": ("B=8,T=4096,H=16,K=64,V=64", "B=1,T=65536,H=16,K=64,V=64"),
          "chunk_kda": ("B=8,T=4096,H=16,K=128,V=128", "B=1,T=65536,H=16,K=128,V=128")}


def save(path, op_name, dtype="bfloat16"):
    import jax
    import jax.numpy as jnp

    import workbench  # noqa: F401
    from workbench import bench
    from workbench.bench.spec import parse_shape

    op = bench.OPS[op_name]
    out = {}
    for text in SHAPES[op_name]:
        inputs = op.inputs(parse_shape(text), jnp.dtype(dtype), 0)
        names = list(op.differentiable)
        rest = {n: x for n, x in inputs.items() if n not in names}

        def f(xs):
            return op.call("triton", **dict(zip(names, xs)), **rest)

        outs, vjp = jax.vjp(f, [inputs[n] for n in names])
        grads = jax.jit(vjp)(jax.tree.map(lambda x: jnp.ones_like(x) * 0.01, outs))[0]
        for name, x in [*zip(op.outputs, outs), *zip(["d" + n for n in names], grads)]:
            out[f"{text} {name}"] = np.asarray(jnp.asarray(x, jnp.float32))
    np.savez(path, **out)


def compare(a, b):
    a, b = np.load(a), np.load(b)
    for key in a.files:
        x, y = a[key].astype(np.float64), b[key].astype(np.float64)
        rms = np.sqrt(np.mean(x * x)) or 1.0
        print(f"{key}: max |table - first| / rms = {np.max(np.abs(x - y)) / rms:.2e}, finite {np.isfinite(y).all()}")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--save")
    p.add_argument("--compare", nargs=2)
    p.add_argument("--op", default="chunk_gla", choices=sorted(SHAPES))
    p.add_argument("--dtype", default="bfloat16", help="the inputs' dtype (float16, float32: their table entries)")
    args = p.parse_args()
    save(args.save, args.op, args.dtype) if args.save else compare(*args.compare)

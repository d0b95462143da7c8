"""Which construct of the ring makes JAX's Shardy partitioner crash on GPUs (issues 19 and 30)?

Runs each probe in its own process (a segmentation fault ends only that process) under the partitioner
given, over a mesh of every visible device, and prints one line per probe: its exit status and, for a
crash, the signal. The probes grow from a bare `ppermute` ring to the full Triton ring with its
gradient, so the first one that crashes names the construct.

What they found on 2 H200s (JAX 0.11.2): collectives, loops, `lax.cond` on the axis index and custom VJPs
all compile under Shardy; `whole_axis_scatter` — a scatter covering a whole axis of an array that varies
over the manual axis, no collective at all — crashes it, where `partial_axis_scatter` and
`whole_axis_replaced` compile. The ring's blocks wrote their results that way; they now replace the
array when the block covers the whole shard (`ring_attention/reference.py`, `_fill`).

    python scripts/shardy_probe.py [--partitioner shardy|gspmd] [--only NAME,...] [--timeout S]

On a CPU it runs over 4 host devices (XLA_FLAGS=--xla_force_host_platform_device_count=4).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

PROBES = {}


def probe(fn):
    PROBES[fn.__name__] = fn
    return fn


def _mesh():
    import jax
    from jax.sharding import AxisType

    return jax.make_mesh((len(jax.devices()),), ("sp",), axis_types=(AxisType.Auto,))


def _ring_perm(n):
    return [(i, (i + 1) % n) for i in range(n)]


def _shard(f, mesh, n_in=1):
    import jax
    from jax.sharding import PartitionSpec as P

    spec = P(None, "sp")
    return jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(spec,) * n_in, out_specs=spec))


def _x(mesh, T=256, D=64, dtype="float32"):
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    x = jax.random.normal(jax.random.key(0), (1, T * mesh.size, 4, D), jnp.dtype(dtype))
    return jax.device_put(x, NamedSharding(mesh, P(None, "sp")))


@probe
def ppermute(mesh):
    from jax import lax

    n = mesh.size
    return _shard(lambda x: lax.ppermute(x, "sp", _ring_perm(n)), mesh)(_x(mesh))


@probe
def ppermute_loop(mesh):
    from jax import lax

    n = mesh.size

    def f(x):
        def step(_, carry):
            acc, blk = carry
            return acc + blk, lax.ppermute(blk, "sp", _ring_perm(n))
        acc, _ = lax.fori_loop(0, n, step, (x * 0, x))
        return acc
    return _shard(f, mesh)(_x(mesh))


@probe
def whole_axis_scatter(mesh):
    """The construct that crashed Shardy on GPUs: `.at[:, 0:T].set` on zeros varying over the manual axis."""
    import jax.numpy as jnp

    def f(a):
        return jnp.zeros_like(a, jnp.float32).at[:, 0:a.shape[1]].set(a * 2)
    return _shard(f, mesh)(_x(mesh))


@probe
def partial_axis_scatter(mesh):
    import jax.numpy as jnp

    def f(a):
        return jnp.zeros_like(a, jnp.float32).at[:, 0:a.shape[1] // 2].set(a[:, :a.shape[1] // 2] * 2)
    return _shard(f, mesh)(_x(mesh))


@probe
def whole_axis_replaced(mesh):
    """What the ring's blocks do now where a block covers the whole shard: the result itself, varying."""
    from workbench._sharding import vary_like

    def f(a):
        return vary_like(a * 2, a)
    return _shard(f, mesh)(_x(mesh))


@probe
def triton_flash_grad_in_shard_map(mesh):
    """A Triton op's backward inside shard_map: its outputs carry the manual axes (`launch.triton_call`)."""
    import jax
    import workbench

    f = _shard(lambda x: workbench.flash_attention(x, x, x, causal=True), mesh)
    return jax.grad(lambda x: f(x).astype("float32").sum())(_x(mesh, dtype="bfloat16"))


@probe
def cond_on_axis_index(mesh):
    from jax import lax

    n = mesh.size

    def f(x):
        i = lax.axis_index("sp")
        y = lax.cond(i % 2 == 0, lambda a: a * 2.0, lambda a: a - 1.0, x)
        return lax.ppermute(y, "sp", _ring_perm(n))
    return _shard(f, mesh)(_x(mesh))


@probe
def ppermute_grad(mesh):
    import jax
    from jax import lax

    n = mesh.size
    f = _shard(lambda x: lax.ppermute(x, "sp", _ring_perm(n)) * x, mesh)
    return jax.grad(lambda x: f(x).sum())(_x(mesh))


@probe
def reference_ring_forward(mesh):
    import workbench

    x = _x(mesh)
    return workbench.sharded_ring_attention(x, x, x, mesh=mesh, axis_name="sp", causal=True, layout="zigzag",
                                            implementation="reference")


@probe
def reference_ring_grad(mesh):
    import jax
    import workbench

    def loss(x):
        return workbench.sharded_ring_attention(x, x, x, mesh=mesh, axis_name="sp", causal=True, layout="zigzag",
                                                implementation="reference").sum()
    return jax.grad(loss)(_x(mesh))


@probe
def triton_ring_forward(mesh):
    import workbench

    x = _x(mesh, dtype="bfloat16")
    return workbench.sharded_ring_attention(x, x, x, mesh=mesh, axis_name="sp", causal=True, layout="zigzag")


@probe
def triton_ring_grad(mesh):
    import jax
    import workbench

    def loss(x):
        return workbench.sharded_ring_attention(x, x, x, mesh=mesh, axis_name="sp", causal=True,
                                                layout="zigzag").astype("float32").sum()
    return jax.grad(loss)(_x(mesh, dtype="bfloat16"))


def _child(name: str) -> None:
    import jax

    out = PROBES[name](_mesh())
    jax.block_until_ready(out)
    print(json.dumps({"probe": name, "ok": True, "devices": len(jax.devices()),
                      "platform": jax.default_backend(), "shardy": jax.config.jax_use_shardy_partitioner}))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--partitioner", choices=("shardy", "gspmd"), default="shardy")
    p.add_argument("--only", default="", help="comma list of probes (default all, in order)")
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        _child(args.child)
        return 0
    env = {**os.environ, "JAX_USE_SHARDY_PARTITIONER": "true" if args.partitioner == "shardy" else "false",
           "PYTHONPATH": os.pathsep.join(filter(None, (os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                       os.environ.get("PYTHONPATH"))))}
    if "--xla_force_host_platform_device_count" not in env.get("XLA_FLAGS", ""):
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()
    names = [n for n in args.only.split(",") if n] or list(PROBES)
    failed = 0
    for name in names:
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, __file__, "--child", name], env=env, capture_output=True,
                                  text=True, timeout=args.timeout)
            code = proc.returncode
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        except subprocess.TimeoutExpired:
            code, tail = "timeout", []
        status = ("ok" if code == 0 else f"signal {signal.Signals(-code).name}" if isinstance(code, int) and code < 0
                  else f"exit {code}")
        failed += code != 0
        print(f"{name:24s} {args.partitioner:7s} {status:18s} {time.perf_counter() - t0:6.1f} s"
              + ("" if code == 0 else "  | " + " | ".join(tail)[-600:]), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Run ring-attention cases on host devices and print their errors as JSON.

    python tests/ring_attention/multidevice.py N < cases.json > results.json

XLA fixes the number of host devices when JAX starts (`--xla_force_host_platform_device_count`),
so the tests run this script in a subprocess with N host devices, once for all cases (one JAX start):
a case for n ≤ N devices runs on a mesh of the first n. A case is a dict: n, implementation, dtype, causal, layout, B, T (local length), H, Hkv, D, seed and
api ("sharded": `sharded_ring_attention` on global arrays, explicit mesh axes; "shard_map":
`ring_attention` inside the caller's own `jax.shard_map`, automatic mesh axes, the caller ordering
a zigzag sequence itself). A case with "invalid" only makes the call on global arrays of length T
(here T is global) and returns the ValueError's message.

For each case: the ring's o and its VJP (random cotangent) on the gathered sequence, against the
float64 oracle (`ring_attention_ref`, i.e. flash attention's reference on the gathered sequence),
held to the budget of `workbench.testing.compare` whose yardstick is `flash_attention` in the same
dtype on the whole sequence on one device; also the same flash_attention with the case's
implementation (its RMS-relative difference to the ring; cases with "flash_same"), and how many
times each Triton kernel ran in the forward and backward (the interpreter's launches, counted), and
on how many devices the ring's output lies ("devices").
"""

from __future__ import annotations

import collections
import functools
import json
import os
import sys
import threading


def main() -> None:
    n = int(sys.argv[1])
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={n}".strip()
    # host devices and interpreted Triton on any machine (a GPU machine would otherwise show its GPUs)
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["WORKBENCH_INTERPRET"] = "1"
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    cases = json.load(sys.stdin)
    json.dump([run_case(case) for case in cases], sys.stdout)


_LAUNCHES: collections.Counter = collections.Counter()
_LOCK = threading.Lock()


def _count_launches() -> None:
    """Count the interpreter's kernel launches by kernel name (the callbacks run on device threads)."""
    from workbench import launch

    original = launch._run_interpreted

    def counted(*arrays, kernel, **kwargs):
        with _LOCK:
            _LAUNCHES[launch.unwrap(kernel)[2].__name__] += 1
        return original(*arrays, kernel=kernel, **kwargs)

    launch._run_interpreted = counted


def _launches_during(fn):
    import jax

    before = collections.Counter(_LAUNCHES)
    out = jax.block_until_ready(fn())
    return out, dict(_LAUNCHES - before)


@functools.cache
def _setup():
    import jax

    import workbench  # noqa: F401  (first: interpreted Triton on this CPU)

    jax.config.update("jax_enable_x64", True)
    _count_launches()
    return jax


def ring_function(case, mesh):
    """x ↦ o on global arrays in sequence order, through the case's api."""
    import jax
    import numpy as np
    from jax.sharding import PartitionSpec as P

    import workbench
    from workbench.ring_attention import schedule

    options = dict(causal=case["causal"], layout=case["layout"], implementation=case["implementation"])
    if case["api"] == "sharded":
        return lambda q, k, v: workbench.sharded_ring_attention(q, k, v, mesh=mesh, axis_name="sp", **options)
    order = schedule.sequence_order(case["n"] * case["T"], case["n"], case["layout"])
    ring = jax.shard_map(functools.partial(workbench.ring_attention, axis_name="sp", **options), mesh=mesh,
                         in_specs=P(None, "sp"), out_specs=P(None, "sp"))
    return lambda q, k, v: ring(q[:, order], k[:, order], v[:, order])[:, np.argsort(order)]


def run_case(case):
    jax = _setup()
    if case.get("invalid"):
        return refusal(case)
    import jax.numpy as jnp
    from jax.sharding import AxisType

    import workbench
    from workbench import testing
    from workbench.ring_attention.reference import ring_attention_ref

    n = case["n"]
    # sharded_ring_attention gets an explicit-axes mesh (jax.make_mesh's default), the caller's own
    # shard_map an automatic one (explicit axes would want its inputs resharded first)
    mesh = jax.make_mesh((n,), ("sp",), axis_types=(AxisType.Explicit if case["api"] == "sharded" else AxisType.Auto,),
                         devices=jax.devices()[:n])
    dtype = jnp.dtype(case["dtype"])
    T = n * case["T"]
    x = testing.attention_inputs(case["seed"], case["B"], T, T, case["H"], case["Hkv"], case["D"], dtype=dtype)
    primals = (x["q"], x["k"], x["v"])
    do = testing.random_cotangents(case["seed"] + 1, x["q"])
    ring = ring_function(case, mesh)

    ring_vjp = jax.jit(lambda p, c: testing.vjp_all(ring, p, c))
    (o, grads), launches = _launches_during(lambda: ring_vjp(primals, do))
    got = (o, *grads)

    def flash(implementation):
        f = functools.partial(workbench.flash_attention, causal=case["causal"], implementation=implementation)
        out, g = jax.jit(lambda p, c: testing.vjp_all(f, p, c))(primals, do)
        return (out, *g)

    reference = flash("reference")
    flash_same = flash(case["implementation"]) if case.get("flash_same") else None
    oracle_f = lambda q, k, v: ring_attention_ref(q, k, v, causal=case["causal"])[0]  # noqa: E731
    out64, g64 = jax.jit(lambda p, c: testing.vjp_all(oracle_f, p, c))(testing.to_float64(primals),
                                                                        testing.to_float64(do))
    oracle = (out64, *g64)
    names = ("o", "dq", "dk", "dv")
    comparisons = [testing.compare(name, g, r, w) for name, g, r, w in zip(names, got, reference, oracle)]
    return {
        "case": case,
        "comparisons": [{"name": c.name, "dtype": c.dtype, "ring_err": c.kernel_err, "reference_err": c.reference_err,
                         "tolerance": c.tolerance, "max_abs": c.kernel_max_abs, "finite": c.finite, "ok": c.ok,
                         "line": str(c)} for c in comparisons],
        "rms_rel_to_flash": (None if flash_same is None
                             else {name: testing.rms_rel(g, f) for name, g, f in zip(names, got, flash_same)}),
        "launches": launches,
        "devices": len(o.sharding.device_set),
    }


def refusal(case):
    """The ValueError message of a call whose global length does not split over the mesh, or None."""
    import jax
    import jax.numpy as jnp

    import workbench

    mesh = jax.make_mesh((case["n"],), ("sp",), devices=jax.devices()[:case["n"]])
    x = jnp.zeros((case["B"], case["T"], case["H"], case["D"]), case["dtype"])
    try:
        workbench.sharded_ring_attention(x, x, x, mesh=mesh, axis_name="sp", layout=case["layout"])
    except ValueError as err:
        return {"case": case, "error": str(err), "devices": mesh.devices.size}
    return {"case": case, "error": None, "devices": mesh.devices.size}


if __name__ == "__main__":
    main()

"""One of several processes that run `sharded_ring_attention` together under `jax.distributed`.

    python tests/ring_attention/multiprocess_worker.py PROCESS_ID NUM_PROCESSES PORT CASES.json RESULT.json

`test_multiprocess.py` starts NUM_PROCESSES of these on this machine, each with its own host devices
(`--xla_force_host_platform_device_count`), joined by `jax.distributed.initialize` through a
coordinator on 127.0.0.1:PORT, so the mesh spans every process's devices and the ring's
collective-permutes cross processes (JAX's CPU collectives, gloo). Every process runs the same
program: for each case it builds the global q, k, v and a random cotangent for o from the case's
seed (the same values in every process), lays them out over the mesh from its own copy
(`jax.make_array_from_callback` reads only the shards of this process's devices), runs the ring's
forward and VJP and gathers o, dq, dk, dv to every process (`process_allgather`).

Process 0 then holds them to the rule of the single-process ring tests (`multidevice.py`): the
float64 oracle on the gathered sequence, within `workbench.testing.compare`'s budget whose
yardstick is `flash_attention` (reference implementation) in the same dtype on one device, and
close to `flash_attention` with the ring's implementation. Every process reports digests of its
inputs and gathered results, so the test can check that all processes saw the same arrays.

RESULT.json gets {"process_id", "results": [...]} or, on an exception, {"process_id", "error"};
the process then exits non-zero.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import traceback


def main() -> None:
    process_id, num_processes, port = (int(a) for a in sys.argv[1:4])
    cases_path, result_path = sys.argv[4:6]
    # host devices and interpreted Triton on any machine (a GPU machine would otherwise show its GPUs);
    # the device count comes from the caller's XLA_FLAGS
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["WORKBENCH_INTERPRET"] = "1"
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    try:
        with open(cases_path) as f:
            cases = json.load(f)
        import jax

        address = f"127.0.0.1:{port}"  # the coordinator listens on loopback only
        jax.distributed.initialize(coordinator_address=address, coordinator_bind_address=address,
                                   num_processes=num_processes, process_id=process_id,
                                   initialization_timeout=120, shutdown_timeout_seconds=120)
        import workbench  # noqa: F401  (interpreted Triton on this CPU)

        jax.config.update("jax_enable_x64", True)
        report = {"process_id": process_id, "results": [run_case(case) for case in cases]}
    except BaseException:
        report = {"process_id": process_id, "error": traceback.format_exc()}
    _write(result_path, report)
    if "error" in report:
        # at once: a normal exit would wait in jax.distributed's shutdown barrier for the other
        # processes, which wait for this one in a collective until gloo times out
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


def _write(path: str, report: dict) -> None:
    """Write the report whole or not at all (the test reads it once the process has ended)."""
    with open(path + ".part", "w") as f:
        json.dump(report, f)
    os.replace(path + ".part", path)


def _digest(x) -> str:
    import numpy as np

    return hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()[:16]


def _global(x, sharding):
    """A global array laid out as `sharding` from this process's full copy `x` (NumPy)."""
    import jax

    return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])


def run_case(case):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import workbench
    from workbench import testing

    n = case["n"]
    if jax.device_count() != n:
        raise RuntimeError(f"case wants {n} devices over all processes, the mesh would have {jax.device_count()}")
    mesh = jax.make_mesh((n,), ("sp",))  # every process's devices; explicit axes (make_mesh's default)
    T = n * case["T"]
    x = testing.attention_inputs(case["seed"], case["B"], T, T, case["H"], case["Hkv"], case["D"],
                                 dtype=jnp.dtype(case["dtype"]))
    host = {name: np.asarray(x[name]) for name in ("q", "k", "v")}
    host["do"] = np.asarray(testing.random_cotangents(case["seed"] + 1, x["q"]))

    sequence = NamedSharding(mesh, P(None, "sp"))
    q, k, v, do = (_global(host[name], sequence) for name in ("q", "k", "v", "do"))
    ring = functools.partial(workbench.sharded_ring_attention, mesh=mesh, axis_name="sp", causal=case["causal"],
                             layout=case["layout"], implementation=case["implementation"])
    o, grads = jax.jit(lambda p, c: testing.vjp_all(ring, p, c))((q, k, v), do)
    got = [multihost_utils.process_allgather(y, tiled=True) for y in (o, *grads)]
    names = ("o", "dq", "dk", "dv")
    result = {
        "case": case,
        "devices": len(o.sharding.device_set),
        "local_devices": len(o.addressable_shards),
        "input_digests": {name: _digest(host[name]) for name in ("q", "k", "v", "do")},
        "output_digests": {name: _digest(y) for name, y in zip(names, got)},
    }
    if jax.process_index() == 0:
        result.update(_held_to_budget(case, host, got))
    return result


def _held_to_budget(case, host, got):
    """The ring's gathered (o, dq, dk, dv) against the float64 oracle and flash_attention on this
    process's first device: the comparisons of `multidevice.run_case`."""
    import jax

    import workbench
    from workbench import testing
    from workbench.ring_attention.reference import ring_attention_ref

    primals = tuple(jax.device_put(host[name]) for name in ("q", "k", "v"))
    do = jax.device_put(host["do"])

    def flash(implementation):
        f = functools.partial(workbench.flash_attention, causal=case["causal"], implementation=implementation)
        out, g = jax.jit(lambda p, c: testing.vjp_all(f, p, c))(primals, do)
        return (out, *g)

    reference = flash("reference")
    flash_same = flash(case["implementation"])
    oracle_f = lambda q, k, v: ring_attention_ref(q, k, v, causal=case["causal"])[0]  # noqa: E731
    out64, g64 = jax.jit(lambda p, c: testing.vjp_all(oracle_f, p, c))(testing.to_float64(primals),
                                                                        testing.to_float64(do))
    names = ("o", "dq", "dk", "dv")
    comparisons = [testing.compare(name, g, r, w) for name, g, r, w in zip(names, got, reference, (out64, *g64))]
    return {
        "comparisons": [{"name": c.name, "tolerance": c.tolerance, "ok": c.ok, "line": str(c)} for c in comparisons],
        "rms_rel_to_flash": {name: testing.rms_rel(g, f) for name, g, f in zip(names, got, flash_same)},
    }


if __name__ == "__main__":
    main()

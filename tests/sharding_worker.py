"""Every op on several devices, sharded three ways, in one process that sees them (tests/test_sharding.py starts
it: 4 host devices on a CPU, whose count is fixed when JAX starts while the rest of the suite runs on one; on
a GPU machine its GPUs, a mesh of (2, 1) on two).

    python tests/sharding_worker.py < cases.json > results.json

Each case runs an op's forward and a gradient under `jax.jit` on a 2 × 2 mesh ("data", "model") and returns
what the test asserts on: the largest difference from the same computation on unsharded arrays (outputs
and gradients, relative to their largest value), the collectives in the compiled program, and the output
shardings; or the ValueError a sharded sequence raises.
"""

import os

os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), "--xla_force_host_platform_device_count=4"])
os.environ.setdefault("WORKBENCH_CHECK_BOUNDS", "1")

import json  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402

B, T, H, K = 4, 16, 4, 8
COLLECTIVES = ("all-gather", "all-to-all", "all-reduce", "collective-permute", "reduce-scatter")


def _problem(op):
    """(fn(*arrays) → outputs, arrays, their dims ("B T H K"-like), which to differentiate)."""
    import jax.numpy as jnp

    import workbench
    from workbench.kda.inputs import kda_inputs
    from workbench.testing import attention_inputs, recurrent_inputs

    name, _, impl = op.partition(":")
    impl = impl or "triton"
    if name in ("recurrent", "chunk_gla"):
        x = recurrent_inputs(0, B, T, H, K, K, gates=("gk",), initial_state=True)
        arrays = [x["q"], x["k"], x["v"], x["gk"], x["initial_state"]]
        call = workbench.recurrent if name == "recurrent" else workbench.chunk_gla
        extra = {} if name == "recurrent" else {"chunk_size": 16}
        return (lambda q, k, v, gk, h0: call(q, k, v, gk=gk, initial_state=h0, implementation=impl, **extra),
                arrays, ["BTHK", "BTHK", "BTHK", "BTHK", "BHKV"], 5)
    if name in ("chunk_kda", "recurrent_kda"):
        x = kda_inputs(0, B, T, H, K, K, initial_state=True)
        arrays = [x["q"], x["k"], x["v"], x["g"], x["beta"], x["initial_state"]]
        call = workbench.chunk_kda if name == "chunk_kda" else workbench.recurrent_kda
        extra = {} if name == "recurrent_kda" else {"chunk_size": 16}
        return (lambda q, k, v, g, beta, h0: call(q, k, v, g, beta, initial_state=h0, implementation=impl, **extra),
                arrays, ["BTHK", "BTHK", "BTHK", "BTHK", "BTH", "BHKV"], 6)
    if name == "flash_attention":
        x = attention_inputs(0, B, T, T, H, H // 2, 16, sinks=True)
        arrays = [x["q"], x["k"], x["v"], x["sinks"]]
        return (lambda q, k, v, sinks: workbench.flash_attention(q, k, v, sinks=sinks, causal=True, return_lse=True,
                                                                 implementation=impl),
                arrays, ["BTHK", "BTHK", "BTHK", "H"], 4)
    if name == "flash_attention_packed":  # sequences packed: B = 1, only the heads can be split
        x = attention_inputs(0, 1, 2 * T, 2 * T, H, H, 16)
        cu = jnp.asarray([0, 5, 5, 2 * T], jnp.int32)
        arrays = [x["q"], x["k"], x["v"], cu]
        return (lambda q, k, v, cu: workbench.flash_attention(q, k, v, causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu,
                                                              implementation=impl),
                arrays, ["BTHK", "BTHK", "BTHK", "N"], 3)
    raise ValueError(op)


def _spec(dims, layout):
    """The PartitionSpec of an array with `dims` letters: B over "data" and H over "model" ("batch+heads"),
    B over both axes ("batch"), or T over "data" ("sequence")."""
    from jax.sharding import PartitionSpec as P

    axes = {"batch+heads": {"B": "data", "H": "model"}, "batch": {"B": ("data", "model")},
            "heads": {"H": ("data", "model")}, "sequence": {"T": "data"}}[layout]
    return P(*(axes.get(letter) for letter in dims))


def data_parallel_case(case):
    """`workbench bench --data-parallel`'s harness on a small batch over the 4 devices (a smoke test: the
    interpreter's timings mean nothing, the record's shape and its errors do)."""
    from workbench.bench import data_parallel

    import jax

    record = data_parallel.run(case["op"], iters=1, shapes=[dict(B=2 * jax.device_count(), T=16, H=2, K=8, V=8)])
    return {**case, "record": record}


_UNSHARDED = {}


def run_case(case):
    if case["mode"] == "data_parallel":
        return data_parallel_case(case)
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType, NamedSharding

    import workbench  # noqa: F401

    op, mode, layout = case["op"], case["mode"], case["layout"]
    fn, arrays, dims, n_diff = _problem(op)
    wrt = tuple(range(n_diff))

    def loss(f, *a):  # uneven weights for every output, so no wrong gradient hides behind a plain sum
        outs = jax.tree.leaves(f(*a))
        return sum(jnp.sum(o.astype(jnp.float32) * jnp.cos(jnp.arange(o.size).reshape(o.shape) * (i + 1.3)))
                   for i, o in enumerate(outs))

    def both(*a, f=fn):
        return f(*a), jax.grad(lambda *b: loss(f, *b), argnums=wrt)(*a)

    if op not in _UNSHARDED:  # the same problem for every mode and layout of an op: computed once
        _UNSHARDED[op] = jax.jit(both)(*arrays)
    want = _UNSHARDED[op]
    specs = [_spec(d, layout) for d in dims]
    shape = (2, 2) if jax.device_count() >= 4 else (jax.device_count(), 1)  # 4 host devices, or 2 GPUs
    if mode == "shard_map":
        mesh = jax.make_mesh(shape, ("data", "model"), axis_types=(AxisType.Explicit,) * 2)
        out_specs = jax.tree.map(lambda x: _spec("BHKV" if x.ndim == 4 and x.shape[0] == B and x.shape[1] == H
                                                 else "BHT" if x.ndim == 3 else "BTHK", layout),
                                 jax.eval_shape(fn, *arrays))
        inner = jax.shard_map(fn, mesh=mesh, in_specs=tuple(specs), out_specs=out_specs)

        def run(*a):
            return both(*a, f=inner)
    else:
        kind = AxisType.Explicit if mode == "explicit" else AxisType.Auto
        mesh = jax.make_mesh(shape, ("data", "model"), axis_types=(kind, kind))
        run = both
    try:
        with jax.set_mesh(mesh):
            sharded = [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip(arrays, specs)]
            compiled = jax.jit(run).lower(*sharded).compile()
            got = compiled(*sharded)
    except ValueError as exc:
        return {**case, "error": str(exc)}
    hlo = compiled.as_text()
    found = {c: len(re.findall(rf"\b{c}(-start)?\(", hlo)) for c in COLLECTIVES}
    diffs = []
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        finite = np.isfinite(w)
        scale = max(float(np.max(np.abs(w[finite]))), 1e-30) if finite.any() else 1.0
        same_inf = bool(np.array_equal(np.isfinite(g), finite))
        diffs.append(float(np.max(np.abs(g[finite] - w[finite]))) / scale if same_inf else float("inf"))
    outs = jax.tree.leaves(got[0])
    return {**case, "max_rel_diff": max(diffs), "collectives": found,
            "out_specs": [str(tuple(o.sharding.spec)) for o in outs],
            "in_specs": [str(tuple(s)) for s in specs]}


if __name__ == "__main__":
    cases = json.load(sys.stdin)
    import time

    results = []
    for c in cases:
        start = time.perf_counter()
        results.append(run_case(c))
        print(f"{c} {time.perf_counter() - start:.1f} s", file=sys.stderr)
        print(json.dumps(results[-1], default=str), file=sys.stderr, flush=True)  # each as it comes
    json.dump(results, sys.stdout)

"""Issue 48 prototype probe: `persist_kernels`' persistent, pipelined dqkg and o kernels against the op's
`chunk_dqkg_kernel` and `chunk_o_kernel` on the same inputs: q, k, v, do in bfloat16, a per-key gate of strength 0.1
(so every chunk is direct, as in the bench; dqkg takes its per-chunk prefix sums b, o the bfloat16 gate and b_L by
slot), random states (float32 h and dH for dqkg, bfloat16 h for o as the forward alone stores them), the op's slot
table.

    python3 probe.py check KERNEL     # CPU interpreter, small shapes: outputs against the op's kernel's
    python3 probe.py compile KERNEL   # CPU: the target's launches compiled for sm_90 (registers, spills, shared
                                      # memory; SASS_DIR=folder keeps the SASS)
    python3 probe.py time KERNEL      # GPU: the op's kernel and the prototype's configs (dqkg at the target B8
                                      # T4096 H16 K=V=64 bf16; o there and at B1 T64k)

KERNEL: dqkg or o. One JSON line each."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workbench  # noqa: E402  (first: Triton's interpreter where there is no GPU)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import triton  # noqa: E402
from workbench._bounds import slot_table  # noqa: E402  (prototype: the op's slot table as its glue builds it)
from workbench.chunk_gla import kernels as gla  # noqa: E402

import persist_kernels as pk  # noqa: E402

BT = 64
sd = jax.ShapeDtypeStruct


def slots(B, T):
    return np.asarray(slot_table(None, B * T, BT, (B, T)))  # a fixed-length batch: its bounds from (B, T)


def shapes(kernel, B, T, H, K, V):
    """The arrays a launch takes ([TT, ...] packed rows, [NS, ...] chunk slots), for `compile`."""
    TT, NS = B * T, slots(B, T).shape[0]
    rows = lambda d, dtype=jnp.bfloat16: sd((TT, H, d), dtype)  # noqa: E731
    state = lambda dtype: sd((NS, H, K, V), dtype)  # noqa: E731
    if kernel == "dqkg":
        return (rows(K), rows(K), rows(V), rows(V), rows(K, jnp.float32), state(jnp.float32), state(jnp.float32),
                rows(K, jnp.float32), rows(K, jnp.float32), sd((NS, 2), jnp.int32)), NS
    return (rows(K), rows(K), rows(V), rows(K), sd((NS, H, K), jnp.float32), state(jnp.bfloat16), rows(BT),
            sd((NS, 2), jnp.int32)), NS


def inputs(kernel, B, T, H, K, V, seed=0):
    ks = jax.random.split(jax.random.PRNGKey(seed), 8)
    TT, bounds = B * T, slots(B, T)
    NS = bounds.shape[0]
    n = lambda i, s: jax.random.normal(ks[i], s, jnp.float32)  # noqa: E731
    q, k, v, do = (n(i, (TT, H, d)).astype(jnp.bfloat16) for i, d in enumerate((K, K, V, V)))
    a = (-0.1 * jax.nn.softplus(n(4, (TT, H, K)))).astype(jnp.bfloat16)  # log-decays of strength 0.1
    bounds32 = jnp.asarray(bounds, jnp.int32)
    if kernel == "dqkg":
        b = jnp.cumsum(a.astype(jnp.float32).reshape(TT // BT, BT, H, K), axis=1).reshape(TT, H, K)  # (gla.3)
        zeros = jnp.zeros((TT, H, K), jnp.float32)
        return (q, k, v, do, b, n(5, (NS, H, K, V)), n(6, (NS, H, K, V)), zeros, zeros, bounds32), NS
    csum = np.concatenate([np.zeros((1, H, K)), np.cumsum(np.asarray(a, np.float64), axis=0)])
    b_L = jnp.asarray((csum[bounds[:, 1]] - csum[bounds[:, 0]]).astype(np.float32))  # per slot; unused slots 0
    return (q, k, v, a, b_L, n(5, (NS, H, K, V)).astype(jnp.bfloat16), jnp.zeros((TT, H, BT), jnp.bfloat16),
            bounds32), NS


def op_kernel(kernel, args, NS, block=None, warps=4, stages=2):
    """The op's kernel at its target table config (dqkg BK 32, o BV 64; 4 warps, 2 stages) or `block`."""
    q, v = args[0], args[2]
    TT, H, K = q.shape
    V = v.shape[-1]
    common = dict(num_warps=warps, num_stages=stages, scale=K ** -0.5, H=H, K=K, V=V, BT=BT, F32_DOT="tf32")
    if kernel == "dqkg":
        BK = block or 32
        return workbench.triton_call(*args, kernel=gla.chunk_dqkg_kernel.fn,
                                     out_shape=[sd(q.shape, q.dtype)] * 2 + [sd((TT, H, K), jnp.bfloat16)],
                                     grid=(triton.cdiv(K, BK), NS, H), BK=BK, BV=max(16, triton.next_power_of_2(V)),
                                     **common)
    BV = block or 64
    return [workbench.triton_call(*args, kernel=gla.chunk_o_kernel.fn, out_shape=sd(v.shape, v.dtype),
                                  grid=(triton.cdiv(V, BV), NS, H), BK=max(16, triton.next_power_of_2(K)), BV=BV,
                                  B_LOCAL=True, USE_GK=True, **common)]


def persistent(kernel, args, NS, P=8, block=None, warps=4, stages=2, maxnreg=None):
    q, v = args[0], args[2]
    TT, H, K = q.shape
    V = v.shape[-1]
    common = dict(num_warps=warps, num_stages=stages, maxnreg=maxnreg, NS=NS, scale=K ** -0.5, H=H, K=K, V=V, BT=BT,
                  F32_DOT="tf32", STAGES=stages)
    if kernel == "dqkg":
        BK = block or 32
        return workbench.triton_call(*args, kernel=pk.chunk_dqkg_persistent_kernel,
                                     out_shape=[sd(q.shape, q.dtype)] * 2 + [sd((TT, H, K), jnp.bfloat16)],
                                     grid=(triton.cdiv(K, BK), min(P, NS), H), BK=BK,
                                     BV=max(16, triton.next_power_of_2(V)), **common)
    BV = block or 64
    return [workbench.triton_call(*args, kernel=pk.chunk_o_persistent_kernel, out_shape=sd(v.shape, v.dtype),
                                  grid=(triton.cdiv(V, BV), min(P, NS), H), BK=max(16, triton.next_power_of_2(K)),
                                  BV=BV, **common)]


def diff(outs, refs):
    return [float(jnp.max(jnp.abs(a.astype(jnp.float32) - b.astype(jnp.float32)))) for a, b in zip(outs, refs)]


def timed(f, args, iters=10):
    """ms per call: `time_copies_ms` over n copies of f on their own copies of args in one jitted program."""
    from workbench.bench.timing import time_copies_ms

    def copies(n):
        many = [jax.tree.map(jnp.copy, args) for _ in range(n)]
        program = jax.jit(lambda c: [f(a) for a in c])
        return (lambda: program(many)), n

    plain = jax.jit(f)
    stats, _, _ = time_copies_ms(copies, lambda: plain(args), jax.block_until_ready, iters)
    return round(stats["median"], 4)


# P: programs per (block, head) along the chunk slots
CONFIGS = {
    "dqkg": [dict(P=p, block=bk, warps=w, stages=s, maxnreg=r)
             for (bk, w) in ((32, 4), (64, 8)) for p in (4, 8, 16) for s in (2, 3) for r in (None, 168)],
    "o": [dict(P=p, block=64, warps=4, stages=s) for p in (8, 16, 33) for s in (2, 3)]
    + [dict(P=16, block=32, warps=4, stages=3), dict(P=16, block=64, warps=4, stages=3, maxnreg=128)],
}
COMPILED = {"dqkg": [dict(P=8, block=32, warps=4, stages=s, maxnreg=r) for s in (1, 2, 3) for r in (None, 168)]
            + [dict(P=8, block=64, warps=8, stages=2)],
            "o": CONFIGS["o"][:2] + CONFIGS["o"][-2:]}
TIMED_SHAPES = {"dqkg": ((8, 4096),), "o": ((8, 4096), (1, 65536))}


def main():
    mode, kernel = (sys.argv[1:] + ["?", "?"])[:2]
    if kernel not in CONFIGS:
        sys.exit(__doc__)
    if mode == "check":
        for (B, T, H, K, V) in ((1, 128, 2, 32, 32), (2, 160, 1, 64, 32)):  # T = 160: a partial chunk, unused slots
            args, NS = inputs(kernel, B, T, H, K, V)
            ref = op_kernel(kernel, args, NS, block=16)
            assert all(float(jnp.max(jnp.abs(r.astype(jnp.float32)))) > 0 for r in ref)
            for P in (1, 3, NS):
                print(json.dumps(dict(kernel=kernel, B=B, T=T, H=H, K=K, V=V, NS=NS, P=P, block=16,
                                      max_abs=diff(persistent(kernel, args, NS, P=P, block=16), ref))), flush=True)
    elif mode == "compile":
        import tempfile

        from workbench import compile_check
        args, NS = shapes(kernel, 8, 4096, 16, 64, 64)
        specs = []
        for cfg in COMPILED[kernel]:
            with compile_check.record() as s:
                jax.eval_shape(lambda a: persistent(kernel, a, NS, **cfg), args)
            specs += [x for x in s if x["module"] == "persist_kernels"]
        r = compile_check.compile_all(specs, last="resources", sass_dir=os.environ.get("SASS_DIR") or tempfile.mkdtemp())
        for f in r["failed"]:
            print(compile_check.describe(f)[-3000:])
        for row in r["resources"]:
            res, c = row["resources"], row["spec"]["constexprs"]
            print(json.dumps(dict(kernel=row["spec"]["kernel"], BK=c["BK"], BV=c["BV"], STAGES=c.get("STAGES"),
                                  warps=row["spec"]["num_warps"], maxnreg=row["spec"].get("maxnreg"),
                                  **{n: res.get(n) for n in ("registers", "stack", "LDL", "STL", "HGMMA",
                                                             "shared")})), flush=True)
    elif mode == "time":
        print(json.dumps({"triton": triton.__version__, "jax": jax.__version__,
                          "device": jax.devices()[0].device_kind}), flush=True)
        for (B, T) in TIMED_SHAPES[kernel]:
            args, NS = inputs(kernel, B, T, 16, 64, 64)
            ref = jax.jit(lambda a: op_kernel(kernel, a, NS))(args)
            row = dict(kernel=kernel, B=B, T=T, H=16, K=64, V=64, NS=NS,
                       op_ms=timed(lambda a: op_kernel(kernel, a, NS), args))
            for cfg in CONFIGS[kernel]:
                name = "_".join(f"{n}{x}" for n, x in cfg.items() if x is not None)
                try:
                    out = jax.jit(lambda a: persistent(kernel, a, NS, **cfg))(args)
                    row[name] = dict(max_abs=diff(out, ref), ms=timed(lambda a: persistent(kernel, a, NS, **cfg), args))
                except Exception as e:  # noqa: BLE001  (a config that fails to compile or launch is reported)
                    row[name] = f"{type(e).__name__}: {str(e)[:300]}"
            print(json.dumps(row), flush=True)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()

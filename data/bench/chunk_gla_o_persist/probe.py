"""Issue 48 prototype probe: `persist_o.chunk_o_persistent_kernel` against the op's `chunk_o_kernel` on the same
inputs (q, k, v and a per-key gate of strength 0.1 in bfloat16, so every chunk is direct as in the bench; b_L by
slot from the gate; random 16-bit states as the forward alone stores them; the op's slot table).

    python3 probe.py check     # CPU interpreter, small shapes: o against the op's kernel's
    python3 probe.py compile   # CPU: the target's launches compiled for sm_90 (registers, spills, async copies)
    python3 probe.py time      # GPU: the target (B8 T4096 H16 K=V=64 bf16) and B1 T64k, the op's kernel and the
                               # prototype's configs

One JSON line each."""
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

import persist_o as po  # noqa: E402

BT = 64


def inputs(B, T, H, K, V, dtype=jnp.bfloat16, seed=0):
    ks = jax.random.split(jax.random.PRNGKey(seed), 6)
    TT = B * T
    bounds = np.asarray(slot_table(None, TT, BT, (B, T)))  # a fixed-length batch: its bounds from (B, T)
    NS = bounds.shape[0]
    n = lambda i, s: jax.random.normal(ks[i], s, jnp.float32)  # noqa: E731
    q, k, v = (n(i, (TT, H, d)).astype(dtype) for i, d in enumerate((K, K, V)))
    gk = (-0.1 * jax.nn.softplus(n(3, (TT, H, K)))).astype(dtype)
    # b_L by slot: the chunk's gate summed in float32 (unused slots 0)
    csum = np.concatenate([np.zeros((1, H, K)), np.cumsum(np.asarray(gk, np.float64), axis=0)])
    b_L = jnp.asarray((csum[bounds[:, 1]] - csum[bounds[:, 0]]).astype(np.float32))
    hs = n(4, (NS, H, K, V)).astype(dtype)
    A = jnp.zeros((TT, H, BT), dtype)
    return (q, k, v, gk, b_L, hs, A, jnp.asarray(bounds, jnp.int32)), NS


def op_kernel(args, NS, BV=64, warps=4, stages=2):
    q, v = args[0], args[2]
    TT, H, K = q.shape
    V = v.shape[-1]
    return workbench.triton_call(*args, kernel=gla.chunk_o_kernel.fn, out_shape=jax.ShapeDtypeStruct(v.shape, v.dtype),
                                 grid=(triton.cdiv(V, BV), NS, H), num_warps=warps, num_stages=stages,
                                 scale=K ** -0.5, H=H, K=K, V=V, BT=BT, BK=max(16, triton.next_power_of_2(K)), BV=BV,
                                 F32_DOT="tf32", B_LOCAL=True, USE_GK=True)


def persistent(args, NS, P=8, BV=64, warps=4, stages=2, maxnreg=None):
    q, v = args[0], args[2]
    TT, H, K = q.shape
    V = v.shape[-1]
    return workbench.triton_call(*args, kernel=po.chunk_o_persistent_kernel,
                                 out_shape=jax.ShapeDtypeStruct(v.shape, v.dtype),
                                 grid=(triton.cdiv(V, BV), min(P, NS), H), num_warps=warps, num_stages=stages,
                                 maxnreg=maxnreg, NS=NS, scale=K ** -0.5, H=H, K=K, V=V, BT=BT,
                                 BK=max(16, triton.next_power_of_2(K)), BV=BV, F32_DOT="tf32", STAGES=stages)


def diff(a, b):
    return float(jnp.max(jnp.abs(a.astype(jnp.float32) - b.astype(jnp.float32))))


def timed(f, args, iters=10):
    from workbench.bench.timing import time_copies_ms

    def copies(n):
        many = [jax.tree.map(jnp.copy, args) for _ in range(n)]
        program = jax.jit(lambda c: [f(a) for a in c])
        return (lambda: program(many)), n

    plain = jax.jit(f)
    stats, _, _ = time_copies_ms(copies, lambda: plain(args), jax.block_until_ready, iters)
    return round(stats["median"], 4)


# programs per (V block, head): 8 · 16 heads = 128 programs of the target's 1 V block fill one slot per SM
CONFIGS = [dict(P=p, BV=64, warps=4, stages=s) for p in (8, 16, 33) for s in (2, 3)] + \
    [dict(P=16, BV=32, warps=4, stages=3), dict(P=16, BV=64, warps=4, stages=3, maxnreg=128)]


def main():
    mode = sys.argv[1:] or ["?"]
    if mode == ["check"]:
        for (B, T, H, K, V) in ((1, 128, 2, 32, 32), (2, 192, 1, 64, 32)):
            args, NS = inputs(B, T, H, K, V)
            ref = op_kernel(args, NS, BV=16)
            assert float(jnp.max(jnp.abs(ref.astype(jnp.float32)))) > 0
            for cfg in (dict(P=1, BV=16), dict(P=3, BV=16), dict(P=NS, BV=16)):
                out = persistent(args, NS, **cfg)
                print(json.dumps(dict(B=B, T=T, H=H, K=K, V=V, NS=NS, **cfg, max_abs=diff(out, ref))), flush=True)
    elif mode == ["compile"]:
        import tempfile

        from workbench import compile_check
        B, T, H, K, V = 8, 4096, 16, 64, 64
        NS = np.asarray(slot_table(None, B * T, BT, (B, T))).shape[0]
        sd = jax.ShapeDtypeStruct
        args = (sd((B * T, H, K), jnp.bfloat16),) * 3 + (sd((B * T, H, K), jnp.bfloat16), sd((NS, H, K), jnp.float32),
                                                        sd((NS, H, K, V), jnp.bfloat16), sd((B * T, H, BT), jnp.bfloat16),
                                                        sd((NS, 2), jnp.int32))
        specs = []
        for cfg in CONFIGS[:2] + CONFIGS[-2:]:
            with compile_check.record() as s:
                jax.eval_shape(lambda a: persistent(a, NS, **cfg), args)
            specs += [x for x in s if x["module"] == "persist_o"]
        r = compile_check.compile_all(specs, last="resources", sass_dir=os.environ.get("SASS_DIR") or tempfile.mkdtemp())
        for f in r["failed"]:
            print(compile_check.describe(f)[-3000:])
        for row in r["resources"]:
            res, c = row["resources"], row["spec"]["constexprs"]
            print(json.dumps(dict(kernel=row["spec"]["kernel"], BV=c["BV"], STAGES=c.get("STAGES"),
                                  warps=row["spec"]["num_warps"], maxnreg=row["spec"].get("maxnreg"),
                                  **{n: res.get(n) for n in ("registers", "stack", "LDL", "STL", "HGMMA",
                                                             "shared")})), flush=True)
    elif mode == ["time"]:
        print(json.dumps({"triton": triton.__version__, "jax": jax.__version__,
                          "device": jax.devices()[0].device_kind}), flush=True)
        for (B, T) in ((8, 4096), (1, 65536)):
            args, NS = inputs(B, T, 16, 64, 64)
            ref = jax.jit(lambda a: op_kernel(a, NS))(args)
            row = dict(B=B, T=T, H=16, K=64, V=64, NS=NS, op_ms=timed(lambda a: op_kernel(a, NS), args))
            for cfg in CONFIGS:
                name = "_".join(f"{n}{x}" for n, x in cfg.items() if x is not None)
                try:
                    out = jax.jit(lambda a: persistent(a, NS, **cfg))(args)
                    row[name] = dict(max_abs=diff(out, ref), ms=timed(lambda a: persistent(a, NS, **cfg), args))
                except Exception as e:  # noqa: BLE001  (a config that fails to compile or launch is reported)
                    row[name] = f"{type(e).__name__}: {str(e)[:300]}"
            print(json.dumps(row), flush=True)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()

"""Issue 48 prototype probe: `persist_kernels.chunk_dqkg_persistent_kernel` against the op's `chunk_dqkg_kernel`
on the same inputs (q, k, v, do bf16; b the per-chunk prefix sums of gates of strength 0.1, so every chunk is
direct as in the bench; hs, dhs random float32 states; the op's slot table).

    python3 probe.py check     # CPU interpreter, small shapes: outputs against the op's kernel's
    python3 probe.py compile   # CPU: the target's launches compiled for sm_90 (registers, spills, async copies);
                               # the op's kernel: 255 registers, spilling (Nsight Compute, backward_stalls)
    python3 probe.py time      # GPU: the target (B8 T4096 H16 K=V=64 bf16), the op's kernel and the prototype

One JSON line each."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workbench  # noqa: E402  (first: Triton's interpreter where there is no GPU)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import triton  # noqa: E402
from workbench._bounds import slot_table  # noqa: E402  (prototype: the op's slot table as its glue builds it)
from workbench.chunk_gla import kernels as gla  # noqa: E402

import persist_kernels as pk  # noqa: E402

BT = 64


def inputs(B, T, H, K, V, dtype=jnp.bfloat16, seed=0):
    ks = jax.random.split(jax.random.PRNGKey(seed), 8)
    TT = B * T
    bounds = slot_table(None, TT, BT, (B, T))  # a fixed-length batch: its bounds from (B, T)
    NS = bounds.shape[0]
    n = lambda i, s: jax.random.normal(ks[i], s, jnp.float32)  # noqa: E731
    q, k, v, do = (n(i, (TT, H, d)).astype(dtype) for i, d in enumerate((K, K, V, V)))
    a = -0.1 * jax.nn.softplus(n(4, (TT, H, K)))  # log-decays of strength 0.1
    b = jnp.cumsum(a.reshape(TT // BT, BT, H, K), axis=1).reshape(TT, H, K)  # (gla.3) per chunk
    hs, dhs = n(5, (NS, H, K, V)), n(6, (NS, H, K, V))
    zeros = jnp.zeros((TT, H, K), jnp.float32)
    return (q, k, v, do, b, hs, dhs, zeros, zeros, jnp.asarray(bounds, jnp.int32)), NS


def _outs(q):
    TT, H, K = q.shape
    return [jax.ShapeDtypeStruct(q.shape, q.dtype)] * 2 + [jax.ShapeDtypeStruct((TT, H, K), jnp.bfloat16)]


def op_kernel(args, NS, BK=32, warps=4, stages=2):
    q, v = args[0], args[2]
    TT, H, K = q.shape
    V = v.shape[-1]
    return workbench.triton_call(*args, kernel=gla.chunk_dqkg_kernel.fn, out_shape=_outs(q),
                                 grid=(triton.cdiv(K, BK), NS, H), num_warps=warps, num_stages=stages,
                                 scale=K ** -0.5, H=H, K=K, V=V, BT=BT, BK=BK, BV=max(16, triton.next_power_of_2(V)),
                                 F32_DOT="tf32")


def persistent(args, NS, P=8, BK=32, warps=4, stages=2, maxnreg=None):
    q, v = args[0], args[2]
    TT, H, K = q.shape
    V = v.shape[-1]
    return workbench.triton_call(*args, kernel=pk.chunk_dqkg_persistent_kernel, out_shape=_outs(q),
                                 grid=(triton.cdiv(K, BK), min(P, NS), H), num_warps=warps, num_stages=stages,
                                 maxnreg=maxnreg, NS=NS, scale=K ** -0.5, H=H, K=K, V=V, BT=BT, BK=BK,
                                 BV=max(16, triton.next_power_of_2(V)), F32_DOT="tf32", STAGES=stages)


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


CONFIGS = [dict(P=p, BK=bk, warps=w, stages=s, maxnreg=r)
           for (bk, w) in ((32, 4), (64, 8)) for p in (4, 8, 16) for s in (2, 3) for r in (None, 168)]


def main():
    mode = sys.argv[1:] or ["?"]
    if mode == ["check"]:
        for (B, T, H, K, V) in ((1, 128, 2, 32, 32), (2, 160, 1, 64, 32)):
            args, NS = inputs(B, T, H, K, V)
            ref = op_kernel(args, NS, BK=16)
            for cfg in (dict(P=1, BK=16), dict(P=3, BK=16), dict(P=NS, BK=16)):
                out = persistent(args, NS, **cfg)
                print(json.dumps(dict(B=B, T=T, H=H, K=K, V=V, NS=NS, **cfg,
                                      max_abs=[diff(o, r) for o, r in zip(out, ref)])), flush=True)
    elif mode == ["compile"]:
        import tempfile

        from workbench import compile_check
        specs = []
        args = jax.eval_shape(lambda: inputs(8, 4096, 16, 64, 64)[0])
        NS = args[5].shape[0]
        for cfg in [dict(P=8, BK=32, warps=4, stages=s, maxnreg=r) for s in (1, 2, 3) for r in (None, 168)] + \
                [dict(P=8, BK=64, warps=8, stages=2)]:
            with compile_check.record() as s:
                jax.eval_shape(lambda a: persistent(a, NS, **cfg), args)
            specs += [x for x in s if x["module"] == "persist_kernels"]
        r = compile_check.compile_all(specs, last="resources", sass_dir=os.environ.get("SASS_DIR") or tempfile.mkdtemp())
        for f in r["failed"]:
            print(compile_check.describe(f)[-3000:])
        for row in r["resources"]:
            res, c = row["resources"], row["spec"]["constexprs"]
            print(json.dumps(dict(kernel=row["spec"]["kernel"], BK=c["BK"], STAGES=c.get("STAGES"),
                                  warps=row["spec"]["num_warps"], maxnreg=row["spec"].get("maxnreg"),
                                  **{n: res.get(n) for n in ("registers", "stack", "LDL", "STL", "LDGSTS", "HGMMA",
                                                             "shared")})), flush=True)
    elif mode == ["time"]:
        print(json.dumps({"triton": triton.__version__, "jax": jax.__version__,
                          "device": jax.devices()[0].device_kind}), flush=True)
        args, NS = inputs(8, 4096, 16, 64, 64)
        ref = jax.jit(lambda a: op_kernel(a, NS))(args)
        row = dict(B=8, T=4096, H=16, K=64, V=64, NS=NS, op_ms=timed(lambda a: op_kernel(a, NS), args))
        for cfg in CONFIGS:
            name = "_".join(f"{n}{x}" for n, x in cfg.items() if x is not None)
            try:
                out = jax.jit(lambda a: persistent(a, NS, **cfg))(args)
                row[name] = dict(max_abs=[diff(o, r) for o, r in zip(out, ref)],
                                 ms=timed(lambda a: persistent(a, NS, **cfg), args))
            except Exception as e:  # noqa: BLE001  (a config that fails to compile or launch is reported)
                row[name] = f"{type(e).__name__}: {str(e)[:300]}"
            print(json.dumps({name: row[name]}), flush=True)
        print(json.dumps(row), flush=True)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()

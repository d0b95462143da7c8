"""Time chunk_gla forward and forward+backward with launch options of the two fixed-config kernels varied
(experiment harness, not shipped): each variant's own jitted program, rounds alternated."""
import sys, json, time
import jax, jax.numpy as jnp
import workbench
from workbench import bench

glue = sys.modules["workbench.chunk_gla"]
op = bench.OPS["chunk_gla"]
orig = glue.triton_call
VARIANT = {}


def patched(*a, **kw):
    kw.update(VARIANT.get(kw.get("name"), {}))
    return orig(*a, **kw)


glue.triton_call = patched
VARIANTS = {
    "ba_w4": {},
    "ba_w8": {"workbench_chunk_gla_b_a": dict(num_warps=8)},
    "ba_w4_r128": {"workbench_chunk_gla_b_a": dict(maxnreg=128)},
    "dqk_w8": {"workbench_chunk_gla_dqk_intra": dict(num_warps=8)},
}
SHAPES = [dict(B=8, T=4096, H=16, K=64, V=64), dict(B=1, T=65536, H=16, K=64, V=64)]
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
results = {}


def timed(f, arrays, reps=20, samples=3):
    jax.block_until_ready(f(arrays))
    best = float("inf")
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(reps):
            out = f(arrays)
        jax.block_until_ready(out)
        best = min(best, (time.perf_counter() - t0) * 1e3 / reps)
    return best


progs = {}
for r in range(ROUNDS):
    for shape in SHAPES:
        inputs = op.inputs(shape, jnp.bfloat16, 0)
        names = [n for n, x in inputs.items() if hasattr(x, "dtype")]
        fixed = {n: x for n, x in inputs.items() if not hasattr(x, "dtype")}
        wrt = [n for n in op.differentiable if n in names]
        arrays = [inputs[n] for n in names]
        for vname, v in VARIANTS.items():
            for pass_ in ("fwd", "fwd+bwd"):
                VARIANT.clear(); VARIANT.update(v)
                key = (str(shape), vname, pass_)
                if key not in progs:
                    if pass_ == "fwd":
                        def run(xs, names=names, fixed=fixed):
                            return op.call("triton", **dict(zip(names, xs)), **fixed)
                    else:
                        def run(xs, names=names, fixed=fixed, wrt=wrt):
                            d = dict(zip(names, xs))
                            rest = {n: d[n] for n in names if n not in wrt}
                            out, pb = jax.vjp(lambda *ys: op.call("triton", **rest, **fixed, **dict(zip(wrt, ys))),
                                              *[d[n] for n in wrt])
                            return pb(jax.tree.map(jnp.ones_like, out))
                    progs[key] = jax.jit(run)
                    jax.block_until_ready(progs[key](arrays))
                t0 = time.time()
                ms = timed(progs[key], arrays)
                results.setdefault(key, []).append(ms)
                print(f"round {r} B{shape['B']} T{shape['T']} {vname:12s} {pass_:8s} {ms:.4f} ms ({time.time()-t0:.0f} s)",
                      flush=True)
print("summary (min / median over rounds)")
for (s, v, p), xs in results.items():
    xs = sorted(xs)
    print(f"{s} {v:12s} {p:8s} min {xs[0]:.4f} med {xs[len(xs)//2]:.4f}")

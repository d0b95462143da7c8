"""Issue 47: the Gluon backward with each dQ share staged as [64, 8] float32 boxes and reduced by one 3-D TMA box
(this branch) against main's unswizzled [64, 64] staging tile (`gluon_backward_main.py`, a copy), launched alike on
the same o, lse, dO, each timed twice. ncu on main's kernel counted 52 M (causal) / 101 M (full) shared-store bank
conflicts at the target: that tile's 8-way store. dk and dv must be bit for bit equal, dq equal up to the order of
its float32 additions. Non-causal rows also time the branch's kernel with DEFER on. One JSON line per shape;
ms = [median, min] of 10 samples of 6 copies in one program."""
import importlib.util, json, os, statistics, time
import workbench
import jax, jax.numpy as jnp, numpy as np, triton
from workbench.flash_attention import gluon_backward as new

spec = importlib.util.spec_from_file_location("gluon_backward_main", os.path.join(os.path.dirname(__file__),
                                                                                   "gluon_backward_main.py"))
old = importlib.util.module_from_spec(spec); spec.loader.exec_module(old)
LOG2E = 1.4426950408889634


def timed(f, args, N=6, ITERS=10):
    copies = [jax.tree.map(jnp.copy, args) for _ in range(N)]
    prog = jax.jit(lambda c: [f(*a) for a in c])
    jax.block_until_ready(prog(copies)); jax.block_until_ready(prog(copies))
    ts = []
    for _ in range(ITERS):
        t0 = time.perf_counter(); jax.block_until_ready(prog(copies)); ts.append((time.perf_counter() - t0) * 1e3 / N)
    return round(statistics.median(ts), 4), round(min(ts), 4)


def kernel_grads(q, k, v, do, o, lse, causal, mod, defer=None):
    B, T, H, D = q.shape
    delta = jnp.einsum("bthd,bthd->bht", o.astype(jnp.float32), do.astype(jnp.float32))
    lse2 = jnp.where(lse == -jnp.inf, jnp.inf, lse * LOG2E)
    lse2, delta = mod.padded_stats(lse2, delta)
    config = dict(mod.CONFIG)
    return workbench.triton_call(
        q, k, v, do, lse2, delta, B, T, lse2.shape[-1], D ** -0.5, kernel=mod.flash_bwd_pingpong_kernel,
        out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype)] * 2 + [jax.ShapeDtypeStruct(q.shape, jnp.float32)],
        grid=(triton.cdiv(T, mod.BLOCK_N), B * k.shape[2]), zeroed_outputs=(2,),
        num_warps=config.pop("num_warps"), maxnreg=config.pop("maxnreg"), H=H, HKV=k.shape[2], D=D, CAUSAL=causal,
        DEFER=mod.DEFER_DQ[causal] if defer is None else defer, **config)


print(json.dumps({"triton": triton.__version__, "jax": jax.__version__, "device": jax.devices()[0].device_kind}),
      flush=True)
SHAPES = ((3, 5, 2, 2, 128), (4, 4096, 16, 16, 128), (1, 16384, 16, 16, 128), (4, 4096, 16, 16, 64),
          (2, 1000, 8, 2, 128), (4, 4096, 32, 8, 128), (2, 777, 4, 1, 64))
for (B, T, H, HKV, D) in SHAPES[:int(os.environ.get("NSHAPES", len(SHAPES)))]:
    ks = jax.random.split(jax.random.key(T + D), 4)
    q, do = (jax.random.normal(kk, (B, T, H, D), jnp.bfloat16) for kk in ks[:2])
    k, v = (jax.random.normal(kk, (B, T, HKV, D), jnp.bfloat16) for kk in ks[2:])
    for causal in (True, False):
        row = {"shape": dict(B=B, T=T, H=H, HKV=HKV, D=D), "causal": causal}
        try:
            o, lse = workbench.flash_attention(q, k, v, causal=causal, return_lse=True)
            a = jax.block_until_ready(kernel_grads(q, k, v, do, o, lse, causal, old))
            b = jax.block_until_ready(kernel_grads(q, k, v, do, o, lse, causal, new))
            row["dk_dv_equal"] = bool(np.array_equal(np.asarray(a[0]), np.asarray(b[0]))
                                      and np.array_equal(np.asarray(a[1]), np.asarray(b[1])))
            row["dq_rel"] = float(jnp.sqrt(jnp.mean((a[2] - b[2]) ** 2) / jnp.mean(a[2] ** 2)))
            row["dq_finite"] = bool(jnp.isfinite(b[2]).all())
            if T >= 1000 and os.environ.get("TIME", "1") == "1":
                args = (q, k, v, do, o, lse)
                for rep in ("", "_again"):
                    row["main" + rep] = timed(lambda *x: kernel_grads(*x, causal, old), args)
                    row["boxes" + rep] = timed(lambda *x: kernel_grads(*x, causal, new), args)
                    if not causal:
                        row["boxes_defer" + rep] = timed(lambda *x: kernel_grads(*x, causal, new, True), args)
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
        print(json.dumps(row), flush=True)

"""Issue 47: the Gluon backward's grid order, A/B on one GPU (run from branch gluon-bwd-grid): the kernel as
main has it, grid (B·HKV, key blocks) (`gluon_backward_lpt.py`, a copy), against the branch's, grid (key blocks,
B·HKV), launched alike on the same o, lse, dO; and the op's forward+backward with the branch's Gluon backward
against the Triton backward. One JSON line per shape; ms = [median, min] of 6 copies in one program."""
import json, os, statistics, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workbench
import jax, jax.numpy as jnp, numpy as np, triton
from workbench.flash_attention import Tuning, gluon_backward as keys_first
import gluon_backward_lpt as heads_first

LOG2E = 1.4426950408889634


def timed(f, args, N=6, ITERS=10):
    copies = [jax.tree.map(jnp.copy, args) for _ in range(N)]
    prog = jax.jit(lambda c: [f(*a) for a in c])
    jax.block_until_ready(prog(copies)); jax.block_until_ready(prog(copies))
    ts = []
    for _ in range(ITERS):
        t0 = time.perf_counter(); jax.block_until_ready(prog(copies)); ts.append((time.perf_counter() - t0) * 1e3 / N)
    return round(statistics.median(ts), 4), round(min(ts), 4)


def kernel_grads(module, grid_keys_first, q, k, v, do, o, lse, causal):
    """dq (float32, unscaled), dk, dv from one module's kernel, launched as the op's glue does."""
    B, T, H, D = q.shape
    delta = jnp.einsum("bthd,bthd->bht", o.astype(jnp.float32), do.astype(jnp.float32))
    lse2 = jnp.where(lse == -jnp.inf, jnp.inf, lse * LOG2E)
    lse2, delta = module.padded_stats(lse2, delta)
    config = dict(module.CONFIG)
    nblocks = triton.cdiv(T, module.BLOCK_N)
    grid = (nblocks, B * k.shape[2]) if grid_keys_first else (B * k.shape[2], nblocks)
    return workbench.triton_call(
        q, k, v, do, lse2, delta, B, T, lse2.shape[-1], D ** -0.5, kernel=module.flash_bwd_pingpong_kernel,
        out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype)] * 2 + [jax.ShapeDtypeStruct(q.shape, jnp.float32)],
        grid=grid, zeroed_outputs=(2,), num_warps=config.pop("num_warps"), maxnreg=config.pop("maxnreg"), H=H,
        HKV=k.shape[2], D=D, CAUSAL=causal, **config)


print(json.dumps({"triton": triton.__version__, "jax": jax.__version__, "device": jax.devices()[0].device_kind}),
      flush=True)
for (B, T, H, HKV, D) in ((4, 4096, 16, 16, 128), (1, 16384, 16, 16, 128), (4, 4096, 16, 2, 128),
                          (4, 4096, 16, 16, 64), (1, 1024, 16, 16, 128)):
    ks = jax.random.split(jax.random.key(T + D), 4)
    q, do = (jax.random.normal(kk, (B, T, H, D), jnp.bfloat16) for kk in ks[:2])
    k, v = (jax.random.normal(kk, (B, T, HKV, D), jnp.bfloat16) for kk in ks[2:])
    for causal in (True, False):
        row = {"shape": dict(B=B, T=T, H=H, HKV=HKV, D=D), "causal": causal}
        try:
            o, lse = workbench.flash_attention(q, k, v, causal=causal, return_lse=True)
            a = jax.block_until_ready(kernel_grads(heads_first, False, q, k, v, do, o, lse, causal))
            b = jax.block_until_ready(kernel_grads(keys_first, True, q, k, v, do, o, lse, causal))
            row["dk_dv_equal"] = bool(np.array_equal(np.asarray(a[0]), np.asarray(b[0]))
                                      and np.array_equal(np.asarray(a[1]), np.asarray(b[1])))
            row["dq_rel"] = float(jnp.sqrt(jnp.mean((a[2] - b[2]) ** 2) / jnp.mean(b[2] ** 2)))
            row["kernel_heads_first"] = timed(lambda *x: kernel_grads(heads_first, False, *x, causal),
                                              (q, k, v, do, o, lse))
            row["kernel_keys_first"] = timed(lambda *x: kernel_grads(keys_first, True, *x, causal),
                                             (q, k, v, do, o, lse))
            for name in ("gluon", "triton"):
                def fb(q, k, v, do, tuning=Tuning(backward=name)):
                    out, pull = jax.vjp(lambda q, k, v: workbench.flash_attention(q, k, v, causal=causal,
                                                                                   tuning=tuning), q, k, v)
                    return out, *pull(do)
                row[f"op_fwd_bwd_{name}"] = timed(fb, (q, k, v, do))
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
        print(json.dumps(row), flush=True)

"""Issue 47: the Gluon backward with DQ_LOADER (branch gluon-bwd-dqwarp: the loading warp issues the dQ TMA
reductions, each group only storing its share and signalling on a named barrier; before, each group waited for its
previous reduction and met its partition's barrier twice per tile) against DQ_LOADER off (main's schedule, the
same module), launched alike on the same o, lse, dO, each twice, DEFER as the op sets it; cuDNN's forward+backward
beside. dk and dv must be bit for bit equal (the dQ path does not touch them), dq equal up to the order of the
float32 additions. One JSON line per shape; ms = [median, min] of 6 copies in one program."""
import json, os, statistics, time
import workbench
import jax, jax.numpy as jnp, numpy as np, triton
from workbench.flash_attention import gluon_backward as gb

LOG2E = 1.4426950408889634


def timed(f, args, N=6, ITERS=10):
    copies = [jax.tree.map(jnp.copy, args) for _ in range(N)]
    prog = jax.jit(lambda c: [f(*a) for a in c])
    jax.block_until_ready(prog(copies)); jax.block_until_ready(prog(copies))
    ts = []
    for _ in range(ITERS):
        t0 = time.perf_counter(); jax.block_until_ready(prog(copies)); ts.append((time.perf_counter() - t0) * 1e3 / N)
    return round(statistics.median(ts), 4), round(min(ts), 4)


def kernel_grads(q, k, v, do, o, lse, causal, dq_loader):
    """dq (float32, unscaled), dk, dv from the kernel, launched as the op's glue does."""
    B, T, H, D = q.shape
    delta = jnp.einsum("bthd,bthd->bht", o.astype(jnp.float32), do.astype(jnp.float32))
    lse2 = jnp.where(lse == -jnp.inf, jnp.inf, lse * LOG2E)
    lse2, delta = gb.padded_stats(lse2, delta)
    config = dict(gb.CONFIG)
    return workbench.triton_call(
        q, k, v, do, lse2, delta, B, T, lse2.shape[-1], D ** -0.5, kernel=gb.flash_bwd_pingpong_kernel,
        out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype)] * 2 + [jax.ShapeDtypeStruct(q.shape, jnp.float32)],
        grid=(triton.cdiv(T, gb.BLOCK_N), B * k.shape[2]), zeroed_outputs=(2,),
        num_warps=config.pop("num_warps"), maxnreg=config.pop("maxnreg"), H=H, HKV=k.shape[2], D=D, CAUSAL=causal,
        DEFER=gb.DEFER_DQ[causal], DQ_LOADER=dq_loader, **config)


def cudnn(q, k, v, do, causal):
    out, pull = jax.vjp(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=causal,
                                                                     implementation="cudnn"), q, k, v)
    return out, *pull(do)


print(json.dumps({"triton": triton.__version__, "jax": jax.__version__, "device": jax.devices()[0].device_kind}),
      flush=True)
SHAPES = ((4, 4096, 16, 16, 128), (1, 16384, 16, 16, 128), (4, 4096, 16, 2, 128), (4, 4096, 16, 16, 64),
          (1, 1024, 16, 16, 128), (2, 1000, 8, 2, 128), (3, 5, 2, 2, 128))
for (B, T, H, HKV, D) in SHAPES[:int(os.environ.get("NSHAPES", len(SHAPES)))]:
    ks = jax.random.split(jax.random.key(T + D), 4)
    q, do = (jax.random.normal(kk, (B, T, H, D), jnp.bfloat16) for kk in ks[:2])
    k, v = (jax.random.normal(kk, (B, T, HKV, D), jnp.bfloat16) for kk in ks[2:])
    for causal in (True, False):
        row = {"shape": dict(B=B, T=T, H=H, HKV=HKV, D=D), "causal": causal}
        try:
            o, lse = workbench.flash_attention(q, k, v, causal=causal, return_lse=True)
            a = jax.block_until_ready(kernel_grads(q, k, v, do, o, lse, causal, False))
            b = jax.block_until_ready(kernel_grads(q, k, v, do, o, lse, causal, True))
            row["dk_dv_equal"] = bool(np.array_equal(np.asarray(a[0]), np.asarray(b[0]))
                                      and np.array_equal(np.asarray(a[1]), np.asarray(b[1])))
            row["dq_rel"] = float(jnp.sqrt(jnp.mean((a[2] - b[2]) ** 2) / jnp.mean(a[2] ** 2)))
            row["dq_finite"] = bool(jnp.isfinite(b[2]).all())
            if T >= 1000:
                args = (q, k, v, do, o, lse)
                for rep in ("", "_again"):
                    row["kernel_main" + rep] = timed(lambda *x: kernel_grads(*x, causal, False), args)
                    row["kernel_dq_loader" + rep] = timed(lambda *x: kernel_grads(*x, causal, True), args)
                if HKV == H:
                    row["cudnn_fwd_bwd"] = timed(lambda *x: cudnn(*x, causal), (q, k, v, do))
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
        print(json.dumps(row), flush=True)

"""Issue 47: the Gluon backward of branch gluon-bwd-defer (masks formed only in the tiles that need them; with
DEFER each tile's dQ issued one step later), A/B on one GPU against the kernel as main has it
(`gluon_backward_main.py`, a copy), launched alike on the same o, lse, dO, each twice; and the op's
forward+backward (the branch's default) beside cuDNN's. One JSON line per shape; ms = [median, min] of 6 copies
in one program. The first call (defer.jsonl) had DEFER on always and timed the Triton backward too."""
import json, os, statistics, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workbench
import jax, jax.numpy as jnp, numpy as np, triton
from workbench.flash_attention import Tuning, gluon_backward as deferred
import gluon_backward_main as current

LOG2E = 1.4426950408889634


def timed(f, args, N=6, ITERS=10):
    copies = [jax.tree.map(jnp.copy, args) for _ in range(N)]
    prog = jax.jit(lambda c: [f(*a) for a in c])
    jax.block_until_ready(prog(copies)); jax.block_until_ready(prog(copies))
    ts = []
    for _ in range(ITERS):
        t0 = time.perf_counter(); jax.block_until_ready(prog(copies)); ts.append((time.perf_counter() - t0) * 1e3 / N)
    return round(statistics.median(ts), 4), round(min(ts), 4)


def kernel_grads(module, q, k, v, do, o, lse, causal, **defer):
    """dq (float32, unscaled), dk, dv from one module's kernel, launched as the op's glue does."""
    B, T, H, D = q.shape
    delta = jnp.einsum("bthd,bthd->bht", o.astype(jnp.float32), do.astype(jnp.float32))
    lse2 = jnp.where(lse == -jnp.inf, jnp.inf, lse * LOG2E)
    lse2, delta = module.padded_stats(lse2, delta)
    config = dict(module.CONFIG)
    return workbench.triton_call(
        q, k, v, do, lse2, delta, B, T, lse2.shape[-1], D ** -0.5, kernel=module.flash_bwd_pingpong_kernel,
        out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype)] * 2 + [jax.ShapeDtypeStruct(q.shape, jnp.float32)],
        grid=(triton.cdiv(T, module.BLOCK_N), B * k.shape[2]), zeroed_outputs=(2,),
        num_warps=config.pop("num_warps"), maxnreg=config.pop("maxnreg"), H=H, HKV=k.shape[2], D=D, CAUSAL=causal,
        **defer, **config)


def cudnn(q, k, v, do, causal):
    out, pull = jax.vjp(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=causal,
                                                                     implementation="cudnn"), q, k, v)
    return out, *pull(do)


print(json.dumps({"triton": triton.__version__, "jax": jax.__version__, "device": jax.devices()[0].device_kind}),
      flush=True)
SHAPES = ((4, 4096, 16, 16, 128), (1, 16384, 16, 16, 128), (4, 4096, 16, 2, 128), (4, 4096, 16, 16, 64),
          (1, 1024, 16, 16, 128), (2, 1000, 8, 2, 128))
for (B, T, H, HKV, D) in SHAPES[:int(os.environ.get("NSHAPES", len(SHAPES)))]:
    ks = jax.random.split(jax.random.key(T + D), 4)
    q, do = (jax.random.normal(kk, (B, T, H, D), jnp.bfloat16) for kk in ks[:2])
    k, v = (jax.random.normal(kk, (B, T, HKV, D), jnp.bfloat16) for kk in ks[2:])
    for causal in (True, False):
        row = {"shape": dict(B=B, T=T, H=H, HKV=HKV, D=D), "causal": causal}
        try:
            o, lse = workbench.flash_attention(q, k, v, causal=causal, return_lse=True)
            a = jax.block_until_ready(kernel_grads(current, q, k, v, do, o, lse, causal))
            for defer in (True, False):
                b = jax.block_until_ready(kernel_grads(deferred, q, k, v, do, o, lse, causal, DEFER=defer))
                row[f"dk_dv_equal_{defer}"] = bool(np.array_equal(np.asarray(a[0]), np.asarray(b[0]))
                                                   and np.array_equal(np.asarray(a[1]), np.asarray(b[1])))
                row[f"dq_rel_{defer}"] = float(jnp.sqrt(jnp.mean((a[2] - b[2]) ** 2) / jnp.mean(b[2] ** 2)))
            args = (q, k, v, do, o, lse)
            row["kernel_main"] = timed(lambda *x: kernel_grads(current, *x, causal), args)
            row["kernel_defer"] = timed(lambda *x: kernel_grads(deferred, *x, causal, DEFER=True), args)
            row["kernel_nodefer"] = timed(lambda *x: kernel_grads(deferred, *x, causal, DEFER=False), args)
            row["kernel_main_again"] = timed(lambda *x: kernel_grads(current, *x, causal), args)
            row["kernel_defer_again"] = timed(lambda *x: kernel_grads(deferred, *x, causal, DEFER=True), args)
            row["kernel_nodefer_again"] = timed(lambda *x: kernel_grads(deferred, *x, causal, DEFER=False), args)

            def fb(q, k, v, do):
                out, pull = jax.vjp(lambda q, k, v: workbench.flash_attention(q, k, v, causal=causal), q, k, v)
                return out, *pull(do)
            row["op_fwd_bwd_default"] = timed(fb, (q, k, v, do))
            if HKV == H:
                row["cudnn_fwd_bwd"] = timed(lambda *x: cudnn(*x, causal), (q, k, v, do))
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
        print(json.dumps(row), flush=True)

"""Issue 47: the Gluon forward prototype (gluon_fa.py) against cuDNN and workbench.flash_attention, B4 T4096 H16 D128
bf16 on one GPU. Gluon kernels go through workbench's launcher with the source swapped for Gluon's (probe only)."""
import json, os, sys, statistics, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workbench
import jax, jax.numpy as jnp, triton
from workbench import compiler, gpu_call
from triton.experimental.gluon._runtime import GluonASTSource
import gluon_fa
import gluon_fa2

_plain = compiler.source
def _source(fn, signature, constexprs):
    if not getattr(fn, "is_gluon", lambda: False)():
        return _plain(fn, signature, constexprs)
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n, kind in signature.items() if kind.startswith("*")}
    class S(GluonASTSource):
        def parse_options(self):
            return {**super().parse_options(), "maxnreg": int(os.environ.get("MAXNREG", "168"))}
    return S(fn=fn, signature=dict(signature), constexprs=dict(constexprs), attrs=attrs)
compiler.source = _source

B, T, H, D = 4, 4096, 16, 128
key = jax.random.split(jax.random.key(0), 3)
q, k, v = (jax.random.normal(kk, (B, T, H, D), jnp.bfloat16) for kk in key)
hm = lambda x: jnp.transpose(x, (0, 2, 1, 3)).reshape(B * H * T, D)
qh, kh, vh = hm(q), hm(k), hm(v)
N, ITERS = 8, 10
qk_scale = D ** -0.5 * 1.4426950408889634

def timed(f, args):
    copies = [jax.tree.map(jnp.copy, args) for _ in range(N)]
    prog = jax.jit(lambda c: [f(*a) for a in c])
    jax.block_until_ready(prog(copies)); jax.block_until_ready(prog(copies))
    ts = []
    for _ in range(ITERS):
        t0 = time.perf_counter(); jax.block_until_ready(prog(copies)); ts.append((time.perf_counter() - t0) * 1e3 / N)
    return round(statistics.median(ts), 4), round(min(ts), 4)

def gluon(causal, pipe, nbuf):
    def f(qh, kh, vh):
        return workbench.triton_call(qh, kh, vh, T, B * H * T, qk_scale, kernel=gluon_fa.gluon_attn_fwd,
                                     out_shape=[jax.ShapeDtypeStruct((B * H * T, D), jnp.bfloat16),
                                                jax.ShapeDtypeStruct((B * H * T,), jnp.float32)],
                                     grid=(T // 128, B * H), num_warps=8, num_stages=2,
                                     D=D, BM=128, BN=128, NBUF=nbuf, CAUSAL=causal, PIPE=pipe, NW=8)[0]
    return f

def pingpong(causal, regs, nbuf):
    def f(qh, kh, vh):
        return workbench.triton_call(qh, kh, vh, T, B * H * T, qk_scale, kernel=gluon_fa2.gluon_attn_fwd_pingpong,
                                     out_shape=[jax.ShapeDtypeStruct((B * H * T, D), jnp.bfloat16),
                                                jax.ShapeDtypeStruct((B * H * T,), jnp.float32)],
                                     grid=(T // 128, B * H), num_warps=4, num_stages=2,
                                     D=D, BN=128, NBUF=nbuf, CAUSAL=causal, REGS=regs)[0]
    return f

print(json.dumps({"triton": triton.__version__, "jax": jax.__version__, "device": jax.devices()[0].device_kind}), flush=True)
for causal in (True, False):
    cud = lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=causal, implementation="cudnn")
    refh = hm(cud(q, k, v)).astype(jnp.float32)
    print(json.dumps({"causal": causal, "impl": "cudnn", "ms": timed(cud, (q, k, v))}), flush=True)
    wb = lambda q, k, v: workbench.flash_attention(q, k, v, causal=causal)
    print(json.dumps({"causal": causal, "impl": "workbench", "ms": timed(wb, (q, k, v))}), flush=True)
    for kind, arg, nbuf in json.loads(os.environ.get("ROWS", '[["pipe", true, 2], ["pingpong", 240, 2]]')):
        row = {"causal": causal, "impl": "gluon", "kind": kind, "arg": arg, "nbuf": nbuf}
        try:
            f = gluon(causal, arg, nbuf) if kind == "pipe" else pingpong(causal, arg, nbuf)
            out = jax.block_until_ready(f(qh, kh, vh)).astype(jnp.float32)
            row["max_abs_vs_cudnn"] = float(jnp.max(jnp.abs(out - refh)))
            row["finite"] = bool(jnp.all(jnp.isfinite(out)))
            row["warps"] = sorted({r.num_warps for r in gpu_call._COMPILED.values() if r.name.startswith("gluon")})
            row["ms"] = timed(f, (qh, kh, vh))
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e)[:600]}"
        print(json.dumps(row), flush=True)

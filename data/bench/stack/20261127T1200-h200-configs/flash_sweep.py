"""Flash configs timed one by one at the target (B4 T4096 H16 D128 bf16) on whatever Triton is on the path.
python flash_sweep.py [quick]   -- quick: only the shipped configs.  Prints one JSON line per (pass, config)."""
import json, sys, time, statistics, os
import workbench
import jax, jax.numpy as jnp, numpy as np, triton
from workbench.flash_attention import kernels as K
from workbench.bench.timing import pass_copies
from workbench.flash_attention import Tuning

small = os.environ.get("SMALL") == "1"
B, T, H, D = (1, 256, 2, 128) if small else (4, 4096, 16, 128)
key = jax.random.split(jax.random.key(0), 4)
q, k, v, do = (jax.random.normal(kk, (B, T, H, D), jnp.bfloat16) for kk in key)
ITERS, N = (2, 1) if small else (10, 8)

def timed(f, args):
    out = jax.eval_shape(f, *args)
    copies = [jax.tree.map(jnp.copy, args) for _ in range(N)]
    prog = jax.jit(lambda c: [f(*a) for a in c])
    t0 = time.perf_counter(); jax.block_until_ready(prog(copies)); first = time.perf_counter() - t0
    jax.block_until_ready(prog(copies))
    ts = []
    for _ in range(ITERS):
        t0 = time.perf_counter(); jax.block_until_ready(prog(copies)); ts.append((time.perf_counter() - t0) * 1e3 / N)
    return round(statistics.median(ts), 4), round(min(ts), 4), round(first, 1)

def fwd(causal):
    return lambda q, k, v: workbench.flash_attention(q, k, v, causal=causal)

def fwdbwd(causal, tuning=None):
    def f(q, k, v, do):
        o, pull = jax.vjp(lambda q, k, v: workbench.flash_attention(q, k, v, causal=causal, tuning=tuning), q, k, v)
        return o, *pull(do)
    return f

def cfg(BM, BN, w, s, **kw):
    return triton.Config({"BM": BM, "BN": BN, **kw}, num_warps=w, num_stages=s)

quick = "quick" in sys.argv
if "fwd2" in sys.argv:
    print(json.dumps({"triton": triton.__version__, "device": str(jax.devices()[0].device_kind)}), flush=True)
    tuner = K.flash_fwd_banded_kernel
    for causal in (True, False):
        for loads in ("pointers", "tma"):
            for BM, BN, w, s in [(128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 8, 4), (128, 32, 8, 3), (128, 64, 8, 5)]:
                tuner.configs = [cfg(BM, BN, w, s, SPLIT=False)]
                f = lambda q, k, v: workbench.flash_attention(q, k, v, causal=causal, tuning=Tuning(split_rows=False, forward_loads=loads))
                try:
                    r = timed(f, (q, k, v))
                    print(json.dumps({"pass": "fwd", "causal": causal, "loads": loads, "config": [BM, BN, w, s], "ms": r}), flush=True)
                except Exception as e:
                    print(json.dumps({"pass": "fwd", "causal": causal, "loads": loads, "config": [BM, BN, w, s], "error": str(e)[:300]}), flush=True)
    sys.exit(0)
info = {"triton": triton.__version__, "jax": jax.__version__, "device": str(jax.devices()[0].device_kind)}
print(json.dumps(info), flush=True)
ref = {}
fwd_sets = {
    True: (K.flash_fwd_banded_kernel, [(128, 128, 8, 3, False), (128, 64, 8, 3, False), (128, 128, 8, 2, False),
                                       (128, 64, 8, 4, False), (64, 128, 4, 3, False), (128, 64, 4, 3, False),
                                       (256, 64, 8, 3, True)]),
    False: (K.flash_fwd_split_kernel, [(256, 64, 8, 3, True), (256, 64, 8, 2, True), (256, 128, 8, 2, True),
                                       (256, 64, 8, 4, True), (128, 128, 8, 3, False), (128, 64, 8, 3, False),
                                       (128, 128, 8, 4, False)]),
}
bwd_set = [(64, 128, 8, 2), (64, 128, 8, 3), (64, 128, 8, 1), (32, 128, 8, 2), (64, 64, 8, 2), (64, 64, 4, 2),
           (128, 64, 8, 2), (128, 32, 8, 2)]
for causal in (True, False):
    tuner, blocks = fwd_sets[causal]
    shipped = list(tuner.configs)
    for i, (BM, BN, w, s, split) in enumerate(blocks[:1] if quick else blocks):
        tuner.configs = [cfg(BM, BN, w, s, SPLIT=split)]
        try:
            r = timed(fwd(causal), (q, k, v))
            print(json.dumps({"pass": "fwd", "causal": causal, "config": [BM, BN, w, s, split], "ms": r}), flush=True)
        except Exception as e:
            print(json.dumps({"pass": "fwd", "causal": causal, "config": [BM, BN, w, s, split], "error": str(e)[:300]}), flush=True)
    tuner.configs = shipped
    tuner = K.flash_bwd_dkdv_dq_kernel
    shipped = list(tuner.configs)
    for BM, BN, w, s in bwd_set[:1] if quick else bwd_set:
        tuner.configs = [cfg(BM, BN, w, s)]
        try:
            r = timed(fwdbwd(causal), (q, k, v, do))
            print(json.dumps({"pass": "fwd+bwd", "causal": causal, "config": [BM, BN, w, s], "ms": r}), flush=True)
        except Exception as e:
            print(json.dumps({"pass": "fwd+bwd", "causal": causal, "config": [BM, BN, w, s], "error": str(e)[:300]}), flush=True)
    tuner.configs = shipped
    if not quick:
        r = timed(fwdbwd(causal, Tuning(dq="pass")), (q, k, v, do))
        print(json.dumps({"pass": "fwd+bwd", "causal": causal, "config": "dq=pass shipped", "ms": r}), flush=True)

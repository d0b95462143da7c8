"""Probe (H200): `chunk_kda_bwd_prep_kernel` alone at B1 T64k H16 K = V = 128 bf16, one config at a time
(`kda._bwd_prep_config` replaced), each kernel's device time from a JAX profiler trace; and, for scale,
the cumsum kernel it replaces in the backward. Not product code: an archive of what ran.

    python3 data/bench/chunk_kda_bwd_prep/probe_configs.py
"""
import functools
import os
import statistics
import sys

import jax
import jax.numpy as jnp

import workbench  # noqa: F401
from workbench import kda
from workbench._bounds import slot_table, stand_ins
from workbench.bench.timing import traced_events
from workbench.kda import Tuning

TT, H, K, V, BT = int(os.environ.get("PROBE_T", 65536)), 16, 128, 128, 64
keys = jax.random.split(jax.random.PRNGKey(0), 8)
bf = jnp.bfloat16
g = (-jax.random.uniform(keys[0], (TT, H, K), maxval=0.1)).astype(bf)
k = (jax.random.normal(keys[1], (TT, H, K)) / 11).astype(bf)
v = jax.random.normal(keys[2], (TT, H, V)).astype(bf)
beta = jax.random.uniform(keys[3], (TT, H)).astype(bf)
A = jax.random.normal(keys[4], (TT, H, BT), jnp.float32) / 8
hs = jax.random.normal(keys[5], (TT // BT + 2, H, K, V)).astype(bf)
cu = jnp.asarray([0, TT], jnp.int32)
static = kda._Static(scale=K ** -0.5, chunk_size=BT, tuning=Tuning())
bounds = slot_table(cu, TT, BT, None)
block = jax.block_until_ready


def kernel_ms(fn, args, name, reps=20):
    block(fn(*args))
    events = traced_events([lambda: fn(*args)] * reps, block)
    times = [d for _, d, n in events if name in n]
    return statistics.median(times), len(times)


configs = [tuple(int(x) for x in c.split(",")) for c in sys.argv[1:]] or [
    (64, 64, 4, 2), (32, 32, 4, 2), (64, 32, 4, 2), (32, 64, 4, 2), (64, 64, 8, 2), (128, 64, 8, 2),
    (64, 64, 4, 1), (128, 128, 8, 1), (32, 32, 2, 2)]
moved = (4 * TT * H * K * 2 + TT * H * BT * 4 + hs.size * 2 + TT * H * K * 4) / 1e9  # g k v A hs; b w δ
for cfg in configs:
    kda._bwd_prep_config = lambda K_, V_, dt, cfg=cfg: cfg
    fn = jax.jit(functools.partial(kda._backward_prep, static=static))
    ms, n = kernel_ms(fn, (g, k, v, beta, A, hs, bounds), "chunk_kda_bwd_prep")
    print(f"BKC,BV,warps,stages={cfg}: {ms:.3f} ms ({n} launches) {moved / ms:.2f} TB/s", flush=True)
cums = jax.jit(lambda g_, b_: kda._cumsum(g_, b_, static, stand_ins(1, TT, BT)))
ms, n = kernel_ms(cums, (g, bounds), "chunk_cumsum")
print(f"chunk_cumsum_kernel (for scale): {ms:.3f} ms", flush=True)

"""Per-kernel, per-config GPU timings of chunk_kda at the issue's target shape, and the totals.

    python scripts/kda_prof.py                 # GPU: bf16 B=8 T=4096 H=16 K=V=128, chunk 64
    python scripts/kda_prof.py --only chunk_kda_bwd_intra_kernel,chunk_kda_intra_kernel --no-totals
    python scripts/kda_prof.py --dry           # CPU: tiny shapes through the interpreter (catches typos)

Inputs are `workbench bench --op chunk_kda`'s (`bench.specs.chunk_kda_inputs`: unit keys, β = sigmoid(normal),
log-decays of strength 0.5, no initial state), cotangents random. One real forward and both backwards
(fused and unfused) run first with every kernel at its first config, recording each kernel launch
(its arrays and constexprs); at the end every recorded launch is replayed alone under `jax.jit`, once
per autotune config (the kernel's config list set to that one config), and timed. Every timing is the
median over `--n` samples of `--reps` calls issued back to back (launch latency hidden, close to device
time).
Before those, the totals with the full config lists (jax-triton autotunes, compiling every config
once; the per-config timings reuse the compilations): `_forward`, `_backward` fused and unfused, and
the op's forward and forward+backward as `workbench bench` calls it (jitted). Stops starting new
timings after `--budget` seconds (default 240) and says what it skipped.

`--totals` picks totals by label; `--search 2,4,8:1,2,3` times every block size of the chosen kernels at
each warps × stages pair instead of the config list; `--warps 1,2,4` does the same for kernels without
configs (the cumsum). To compare two versions of the package, run it twice with PYTHONPATH pointing at
each tree (it prints which `workbench` it imported).
"""
import argparse
import functools
import statistics
import sys
import time

T0 = time.perf_counter()
parser = argparse.ArgumentParser()
parser.add_argument("--dry", action="store_true", help="tiny shapes, one sample of one call (interpreter on a CPU)")
parser.add_argument("--only", default="", help="comma-separated kernel names to time (default: all)")
parser.add_argument("--no-totals", action="store_true")
parser.add_argument("--n", type=int, default=10, help="samples per timing")
parser.add_argument("--reps", type=int, default=10, help="calls back to back per sample")
parser.add_argument("--budget", type=float, default=240.0, help="seconds after which no new timing starts")
parser.add_argument("--chunk", type=int, default=64)
parser.add_argument("--forward-only", action="store_true", help="totals of the forward alone")
parser.add_argument("--search", default="", help="warps,stages lists to try for every block size, e.g. 2,4,8:1,2,3")
parser.add_argument("--warps", default="", help="num_warps to try for kernels without configs, e.g. 1,2,4,8")
parser.add_argument("--totals", default="", help="comma-separated total labels to time (default: all)")
opts = parser.parse_args()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import workbench  # noqa: E402
from workbench import bench, kda, launch  # noqa: E402  (before triton: it picks the interpreter on a CPU)
import triton  # noqa: E402

if opts.dry:
    B, T, H, K, V = 1, 80, 2, 32, 32
    opts.n, opts.reps = 1, 1
else:
    B, T, H, K, V = 8, 4096, 16, 128, 128
BT = opts.chunk
print(f"workbench from {workbench.__file__}")
print(f"device {jax.devices()[0]}; interpreter {launch.INTERPRET}; B={B} T={T} H={H} K={K} V={V} chunk {BT} "
      f"bf16; n={opts.n} reps={opts.reps}", flush=True)

x = bench.specs.chunk_kda_inputs(dict(B=B, T=T, H=H, K=K, V=V), "bfloat16", 0)
q, k, v, g, beta = (x[n] for n in ("q", "k", "v", "g", "beta"))
ks = jax.random.split(jax.random.key(1), 2)
do_full = jax.random.normal(ks[0], v.shape, jnp.float32).astype(v.dtype)
dht_full = jax.random.normal(ks[1], (B, H, K, V), jnp.float32)
static = kda._Static(scale=K ** -0.5, chunk_size=BT, tuning=kda.Tuning())
static_unfused = kda._Static(scale=K ** -0.5, chunk_size=BT, tuning=kda.Tuning(fused_backward=False))
cu = jnp.arange(B + 1, dtype=jnp.int32) * T
rows, h0 = kda._packed(q, k, v, g, beta, None, cu, None, B)
do = do_full.reshape(B * T, H, V)


def med(f, *args):
    """Median ms per call over opts.n samples of opts.reps calls issued back to back (bench's timer)."""
    stats, _ = bench.time_ms(lambda: f(*args), jax.block_until_ready, iters=opts.n, warmup=0 if opts.dry else 2,
                             reps=opts.reps)
    return stats["median"]


def name_of(kernel):
    return launch.unwrap(kernel)[2].__name__


# ----------------------------------------------------------------------------- record every launch once

RECORDED = {}  # kernel name -> (kernel, args, kwargs), first launch of each kernel
_real_call = kda.triton_call


def recorder(*args, kernel, **kwargs):
    out = _real_call(*args, kernel=kernel, **kwargs)
    RECORDED.setdefault(name_of(kernel), (kernel, args, kwargs))
    return out


KERNELS = {name: value for module in (kda.tl_chunked, kda.forward_kernels, kda.sweep_kernels, kda.backward_kernels,
                                      kda.recurrent_kernels)
           for name, value in vars(module).items() if name.endswith("_kernel")}
saved_configs = {}
for attr, kern in KERNELS.items():
    if launch.autotune_configs(kern):
        saved_configs[attr] = list(kern.configs)
        kern.configs = saved_configs[attr][:1]  # the recording run compiles one config per kernel
kda.triton_call = recorder
try:
    jax.block_until_ready(kda._forward(*rows, h0, cu, static, save=False))  # the forward kernels as the op runs them
    o, ht, residuals, _ = kda._forward(*rows, h0, cu, static)
    for st in (static, static_unfused):
        jax.block_until_ready(kda._backward(rows[0], rows[1], rows[2], rows[4], cu, residuals, do, dht_full, st))
finally:
    kda.triton_call = _real_call
    for attr, cfgs in saved_configs.items():
        KERNELS[attr].configs = cfgs
print(f"recorded {len(RECORDED)} kernels in {time.perf_counter() - T0:.0f} s: {', '.join(RECORDED)}", flush=True)

# ----------------------------------------------------------------------------- totals (autotuned)

skipped = []
if not opts.no_totals:  # first: the numbers to compare with `workbench bench` (their compilations are reused below)
    totals = {
        "_forward (save=False)": (jax.jit(lambda *a: kda._forward(*a, h0, cu, static, save=False)[:2]), rows),
        "_forward (save=True)": (jax.jit(lambda *a: kda._forward(*a, h0, cu, static)[:2]), rows),
        "_backward fused": (jax.jit(lambda res, do: kda._backward(rows[0], rows[1], rows[2], rows[4], cu, res, do,
                                                                  dht_full, static)), (residuals, do)),
        "_backward unfused": (jax.jit(lambda res, do: kda._backward(rows[0], rows[1], rows[2], rows[4], cu, res, do,
                                                                    dht_full, static_unfused)), (residuals, do)),
    }
    op = functools.partial(workbench.chunk_kda, chunk_size=BT)

    def fwd_bwd(q, k, v, g, beta):
        out, pullback = jax.vjp(op, q, k, v, g, beta)
        return out, pullback((do_full, dht_full))

    totals["chunk_kda forward (op)"] = (jax.jit(op), (q, k, v, g, beta))
    totals["chunk_kda forward+backward (op)"] = (jax.jit(fwd_bwd), (q, k, v, g, beta))
    if opts.forward_only:
        totals = {n: totals[n] for n in ("_forward (save=False)", "chunk_kda forward (op)")}
    if opts.totals:
        totals = {n: totals[n] for n in opts.totals.split(",")}
    for label, (f, a) in totals.items():
        if time.perf_counter() - T0 > opts.budget:
            skipped.append(label)
            continue
        try:
            print(f"total {label}: {med(f, *a):.3f} ms", flush=True)
        except Exception as e:
            print(f"total {label}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)

# ----------------------------------------------------------------------------- each kernel, each config

FORWARD = ("chunk_cumsum_kernel", "chunk_kda_intra_kernel", "chunk_kda_wu_kernel", "chunk_kda_h_kernel",
           "chunk_kda_o_kernel")  # those the code launches (RECORDED) count
BACKWARD_FUSED = ("chunk_kda_dh_kernel", "chunk_kda_bwd_wy_dqkg_fused_kernel", "chunk_kda_bwd_intra_kernel")
BACKWARD_UNFUSED = ("chunk_kda_dh_kernel", "chunk_kda_bwd_inter_kernel", "chunk_kda_bwd_wy_kernel",
                    "chunk_kda_bwd_intra_kernel")


def replay(kernel, args, kwargs):
    """jax.jit of the one launch, its arrays as arguments (scalars and constexprs baked in)."""
    pos = [i for i, a in enumerate(args) if launch.is_array(a)]
    arrays = [args[i] for i in pos]

    def call(*arrs):
        full = list(args)
        for i, a in zip(pos, arrs):
            full[i] = a
        return launch.triton_call(*full, kernel=kernel, **kwargs)

    return jax.jit(call), arrays


only = [s for s in opts.only.split(",") if s]
best = {}
for name, (kernel, args, kwargs) in RECORDED.items():
    if only and name not in only:
        continue
    configs = launch.autotune_configs(kernel)
    if configs and opts.search:
        warps, stages = ([int(x) for x in part.split(",")] for part in opts.search.split(":"))
        blocks = {tuple(sorted(c.kwargs.items())): c.kwargs for c in configs}
        configs_tried = [triton.Config(dict(kw), num_warps=w, num_stages=st) for kw in blocks.values()
                         for w in warps for st in stages]
    else:
        configs_tried = configs
    # (label, config or None, launch kwargs): autotuned kernels one config at a time; the others as recorded,
    # or at each of --warps
    if configs_tried:
        runs = [(f"{name} {c.kwargs} w{c.num_warps} s{c.num_stages}", c, kwargs) for c in configs_tried]
    elif opts.warps:
        runs = [(f"{name} (num_warps={w})", None, {**kwargs, "num_warps": w}) for w in map(int, opts.warps.split(","))]
    else:
        runs = [(f"{name} (num_warps={kwargs.get('num_warps')})", None, kwargs)]
    for label, config, launch_kwargs in runs:
        if time.perf_counter() - T0 > opts.budget:
            skipped.append(label)
            continue
        if config is not None:
            kernel.configs = [config]
        try:
            f, arrays = replay(kernel, args, launch_kwargs)
            t = med(f, *arrays)
            best[name] = min(best.get(name, float("inf")), t)
            print(f"{label}: {t:.3f} ms", flush=True)
        except Exception as e:  # keep going: one config's failure is a result too
            print(f"{label}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
        finally:
            if config is not None:
                kernel.configs = configs

for title, names in (("forward", FORWARD), ("backward fused", BACKWARD_FUSED), ("backward unfused", BACKWARD_UNFUSED)):
    names = [n for n in names if n in RECORDED]
    have = [n for n in names if n in best]
    if have:
        parts = ", ".join(f"{n.replace('chunk_kda_', '').replace('_kernel', '')} {best[n]:.3f}" for n in have)
        missing = [n for n in names if n not in best]
        print(f"sum of best configs, {title}: {sum(best[n] for n in have):.3f} ms ({parts})"
              + (f"; not timed: {', '.join(missing)}" if missing else ""), flush=True)

if skipped:
    print(f"skipped past the {opts.budget:.0f} s budget: {'; '.join(skipped)}", flush=True)
print(f"done in {time.perf_counter() - T0:.0f} s", flush=True)
sys.exit(0)

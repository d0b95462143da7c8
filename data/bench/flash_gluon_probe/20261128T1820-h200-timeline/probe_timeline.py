"""Issue 47: where a block's time goes in the merged Gluon forward. `gluon_kernels_timeline.py` (a copy of
workbench/flash_attention/gluon_kernels.py stamping %globaltimer at a block's entry, after its first softmax, after
its key-tile loop and after its stores, per group) runs at each shape; the script prints, per shape and mask, the
kernel's span, the mean of each phase per group (set-up: entry to the first softmax done; a loop tile; end: the
last P V and the stores; gap: one block's end to the next's entry), a least-squares fit of a block's time (both
groups, entry to stores) on its key tiles, and the spread of the programs' end times. It also times the merged
kernel and the stamped one (median of 10 samples of 8 copies) to show what the stamps cost, and a candidate beside
them: `gluon_kernels_qahead.py` (two q buffers a group, a plain program loading the next block's q as it begins a
block), its outputs against the merged kernel's bit for bit, both timed twice, alternately. One JSON line each."""
import json, os, statistics, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
import workbench
import jax, jax.numpy as jnp, triton
from workbench.flash_attention import gluon_kernels as merged
import gluon_kernels_timeline as stamped
import gluon_kernels_qahead as qahead

MAXB, EVENTS = stamped.MAXB.value, stamped.EVENTS.value


def fwd(module, q, k, v, causal):
    B, T, H, D = q.shape
    config = dict(module.CONFIG)
    grid = module.grid(B, T, H)
    blocks = triton.cdiv(T, module.BLOCK_M) * B * H
    outs = [jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((B, H, T), jnp.float32),
            jax.ShapeDtypeStruct((0,), jnp.float32), jax.ShapeDtypeStruct((1,) if causal else (0,), jnp.int32)]
    zeroed = (3,) if causal and grid[0] < blocks else ()
    if module is stamped:
        outs.append(jax.ShapeDtypeStruct((grid[0] * MAXB * 2 * EVENTS,), jnp.int64))
        zeroed = zeroed + (4,)
    return workbench.triton_call(
        q, k, v, B, T, k.shape[1], D ** -0.5, module.heads_per_section(k.shape[1], D, H, k.shape[2], 2),
        kernel=module.flash_fwd_pingpong_kernel, out_shape=outs, grid=grid, zeroed_outputs=zeroed,
        num_warps=config.pop("num_warps"), maxnreg=config.pop("maxnreg"), H=H, HKV=k.shape[2], D=D,
        CAUSAL=causal, KEEP_F32=False, **config)


def timed(f, args, N=8, ITERS=10):
    copies = [jax.tree.map(jnp.copy, args) for _ in range(N)]
    prog = jax.jit(lambda c: [f(*a) for a in c])
    jax.block_until_ready(prog(copies)); jax.block_until_ready(prog(copies))
    ts = []
    for _ in range(ITERS):
        t0 = time.perf_counter(); jax.block_until_ready(prog(copies)); ts.append((time.perf_counter() - t0) * 1e3 / N)
    return round(statistics.median(ts), 4)


def tiles(block, T, H, n_bh, causal, HS, BN=128):
    """Key tiles of a block, as `_block` numbers them (Tq = Tk)."""
    n_m = -(-T // 128)
    if causal:
        s0 = block // (HS * n_m) * HS
        hs = np.minimum(HS, n_bh - s0)
        i_m = n_m - 1 - (block - s0 * n_m) // hs
        return np.maximum(-(-np.minimum(i_m * 128 + 128, T) // BN), 1)
    return np.full_like(block, -(-T // BN))


def analyse(st, B, T, H, D, causal):
    """The phases of the stamps [programs, MAXB, 2 groups, 4 times + block number] (see the module's note)."""
    row = {}
    t = st[..., :4].astype(np.float64) / 1e3  # µs
    seen = st[..., 0] > 0
    t0 = t[..., 0][seen].min()
    t = t - t0
    n = tiles(st[..., 4], T, H, B * H, causal, merged.heads_per_section(T, D, H, H, 2))
    setup, end = (t[..., 1] - t[..., 0])[seen], (t[..., 3] - t[..., 2])[seen]
    many = seen & (n > 1)
    per_tile = ((t[..., 2] - t[..., 1]) / np.maximum(n - 1, 1))[many]
    nxt = seen[:, 1:] & seen[:, :-1]
    gap = (t[:, 1:, :, 0] - t[:, :-1, :, 3])[nxt]
    both = seen[..., 0] & seen[..., 1]
    dur = (t[..., 3].max(-1) - t[..., 0].min(-1))[both]
    x = n[..., 0][both].astype(np.float64)
    fit = np.polyfit(x, dur, 1) if np.ptp(x) > 0 else (None, None)  # blocks of one length (plain): no fit
    ends = np.where(seen, t[..., 3], 0).max(axis=(1, 2))
    complete = int(seen[:, -1].sum()) == 0  # no program ran more than MAXB blocks
    row.update(span_us=round(float(t[..., 3][seen].max()), 1), complete=complete,
               setup_us=round(float(setup.mean()), 2), tile_us=round(float(per_tile.mean()), 3),
               end_us=round(float(end.mean()), 2), gap_us=round(float(gap.mean()), 2) if gap.size else None,
               block_fit_us=None if fit[0] is None else dict(per_tile=round(float(fit[0]), 3),
                                                             fixed=round(float(fit[1]), 2)),
               block_us=round(float(dur.mean()), 2),
               program_ends_us=dict(min=round(float(ends.min()), 1), median=round(float(np.median(ends)), 1),
                                    max=round(float(ends.max()), 1)),
               blocks_stamped=int(both.sum()))
    return row


jax.block_until_ready(jnp.zeros(1))
print(json.dumps({"triton": triton.__version__, "jax": jax.__version__, "device": jax.devices()[0].device_kind}))
for (B, T, H, D) in ((4, 4096, 16, 128), (1, 16384, 16, 128), (4, 4096, 16, 64), (8, 2048, 16, 128)):
    ks = jax.random.split(jax.random.key(T + D), 3)
    q, k, v = (jax.random.normal(kk, (B, T, H, D), jnp.bfloat16) for kk in ks)
    for causal in (True, False):
        row = {"shape": dict(B=B, T=T, H=H, D=D), "causal": causal}
        try:
            a = fwd(merged, q, k, v, causal)
            b = fwd(stamped, q, k, v, causal)
            row["equal"] = [bool(jnp.array_equal(x, y)) for x, y in zip(a[:2], b[:2])]
            c = fwd(qahead, q, k, v, causal)
            row["equal_qahead"] = [bool(jnp.array_equal(x, y)) for x, y in zip(a[:2], c[:2])]
            row.update(analyse(np.asarray(b[4]).reshape(-1, MAXB, 2, EVENTS), B, T, H, D, causal))
            for rep in ("", "_again"):
                row["ms_merged" + rep] = timed(lambda *x: fwd(merged, *x, causal), (q, k, v))
                row["ms_qahead" + rep] = timed(lambda *x: fwd(qahead, *x, causal), (q, k, v))
            row["ms_stamped"] = timed(lambda *x: fwd(stamped, *x, causal), (q, k, v))
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
        print(json.dumps(row), flush=True)

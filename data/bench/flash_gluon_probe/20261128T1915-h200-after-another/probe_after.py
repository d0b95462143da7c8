"""Issue 47: does the forward pay for following another kernel? `workbench bench --paired` rounds (one sample of
each program in turn) read the non-causal forward 10-13 % over cuDNN where medians of back-to-back samples read
0.9-1.05 and 3 s sustained runs 1.01-1.02 (`../20261128T1900-h200-tma-store`). At the target (B4 T4096 H16 D128
bf16, both masks) this times, as copies in one jitted program (8 pairs, median of 10 samples after 1 s of calls):
ours alone (8 calls), cuDNN alone, and the two interleaved (ours, cuDNN, ours, … : each kernel right after the
other's), and prints ours_after_cudnn = interleaved − cuDNN alone (ms per pair) beside ours alone; the same for
cuDNN. Then a sample of each program after 50 ms idle, alone and after the other program (a round of `--paired`).
One JSON line per mask."""
import json, statistics, sys, time
import jax, jax.numpy as jnp
import workbench

B, T, H, D, N = 4, 4096, 16, 128, 8
ks = jax.random.split(jax.random.key(0), 3)
q, k, v = (jax.random.normal(kk, (B, T, H, D), jnp.bfloat16) for kk in ks)
copies = [jax.tree.map(jnp.copy, (q, k, v)) for _ in range(N)]


def ms_per(prog, per, settle=1.0, iters=10):
    jax.block_until_ready(prog(copies))
    t_end = time.perf_counter() + settle
    while time.perf_counter() < t_end:
        jax.block_until_ready(prog(copies))
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter(); jax.block_until_ready(prog(copies)); ts.append((time.perf_counter() - t0) * 1e3 / per)
    return round(statistics.median(ts), 4)


def one_sample(prog):
    t0 = time.perf_counter(); jax.block_until_ready(prog(copies)); return (time.perf_counter() - t0) * 1e3 / N


print(json.dumps({"jax": jax.__version__, "device": jax.devices()[0].device_kind}), flush=True)
for causal in (False, True):
    ours = lambda q, k, v: workbench.flash_attention(q, k, v, causal=causal)
    cudnn = lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=causal, implementation="cudnn")
    p_ours = jax.jit(lambda c: [ours(*a) for a in c])
    p_cudnn = jax.jit(lambda c: [cudnn(*a) for a in c])
    p_mixed = jax.jit(lambda c: [f(*a) for a in c for f in (ours, cudnn)])
    row = {"causal": causal, "ours_alone": [], "cudnn_alone": [], "pair": []}
    for _ in range(2):
        row["ours_alone"].append(ms_per(p_ours, N))
        row["cudnn_alone"].append(ms_per(p_cudnn, N))
        row["pair"].append(ms_per(p_mixed, N))
    o, c, p = (statistics.median(row[x]) for x in ("ours_alone", "cudnn_alone", "pair"))
    row["pair_minus_alone_sum"] = round(p - o - c, 4)  # > 0: following the other kernel costs
    rounds = {"ours_after_idle": [], "ours_after_cudnn": [], "cudnn_after_idle": [], "cudnn_after_ours": []}
    for _ in range(10):
        time.sleep(0.05); rounds["ours_after_idle"].append(one_sample(p_ours))
        time.sleep(0.05); rounds["cudnn_after_idle"].append(one_sample(p_cudnn))
        jax.block_until_ready(p_cudnn(copies)); rounds["ours_after_cudnn"].append(one_sample(p_ours))
        jax.block_until_ready(p_ours(copies)); rounds["cudnn_after_ours"].append(one_sample(p_cudnn))
    row.update({key: round(statistics.median(val), 4) for key, val in rounds.items()})
    print(json.dumps(row), flush=True)

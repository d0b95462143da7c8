"""Issue 48 prototype probe: chunk_gla's forward by `fused_kernels.chunk_fused_fwd_kernel` (after the op's cumsum
kernel) against the op's forward (`workbench.chunk_gla`), on the bench's inputs (gk gates of strength 0.1, bf16).

    python3 probe_fused.py check      # CPU interpreter, small shapes: o and the final state against the op's
    python3 probe_fused.py time       # GPU: the target (B8 T4096 H16 K=V=64) and the sweep's T 4k-64k (B1,
                                      # also in 16 segments)

`time` prints per shape the op's forward and the fused one (median of 10 samples of a jitted program of 8
copies, ms per copy), their outputs' max |Δ| and the fused time's fraction of the bench's bytes at 4.8 TB/s. One
JSON line each."""
import json, os, statistics, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workbench  # first: it sets up Triton's interpreter where there is no GPU
import jax, jax.numpy as jnp, triton
from workbench import testing
from workbench._bounds import chunk_bounds
from workbench.chunk_gla import kernels as gla
import fused_kernels as fk

BT = 64


def fused_forward(q, k, v, gk, BV=64, warps=4, nseg=1):
    """(o, final state) by the prototype: one sweep per sequence (nseg 1) or the two-level pass in nseg segments."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    TT = B * T
    BK = max(16, triton.next_power_of_2(K))
    BV = min(BV, max(16, triton.next_power_of_2(V)))
    pack = lambda x: x.reshape(TT, *x.shape[2:])  # noqa: E731
    cu = jnp.arange(B + 1, dtype=jnp.int32) * T
    bounds = chunk_bounds(cu, TT, BT)
    b = workbench.triton_call(pack(gk), bounds, kernel=gla.chunk_cumsum_kernel,
                              out_shape=jax.ShapeDtypeStruct((TT, H, K), jnp.float32), grid=(bounds.shape[0], H),
                              H=H, K=K, BT=BT, BK=BK)
    h0 = jnp.zeros((B, H, K, V), jnp.float32)
    state = lambda n: jax.ShapeDtypeStruct((n, H, K, V), jnp.float32)  # noqa: E731
    o_shape = jax.ShapeDtypeStruct((TT, H, V), v.dtype)
    common = dict(H=H, K=K, V=V, BT=BT, BK=BK, BV=BV, F32_DOT="ieee" if q.dtype == jnp.float32 else "tf32")
    if nseg == 1:
        o, ht = workbench.triton_call(
            pack(q), pack(k), pack(v), b, h0, cu, kernel=fk.chunk_fused_fwd_kernel, out_shape=[o_shape, state(B)],
            grid=(triton.cdiv(V, BV), B * H), num_warps=warps, num_stages=2, scale=K ** -0.5, **common)
        return o.reshape(B, T, H, V), ht
    ends, decay = workbench.triton_call(
        pack(k), pack(v), b, cu, kernel=fk.chunk_segment_ends_kernel,
        out_shape=[state(B * nseg), jax.ShapeDtypeStruct((B * nseg, H, K), jnp.float32)],
        grid=(triton.cdiv(V, BV), B * H * nseg, 1), num_warps=4, num_stages=2, NSEG=nseg, **common)
    starts, ht = workbench.triton_call(
        ends, decay, h0, kernel=gla.chunk_state_pass_kernel, out_shape=[state(B * nseg), state(B)],
        grid=(triton.cdiv(V, 32), B * H), H=H, K=K, V=V, BK=BK, BV=32, NSEG=nseg, REVERSE=False, MATRIX=False)
    o = workbench.triton_call(
        pack(q), pack(k), pack(v), b, starts, cu, kernel=fk.chunk_fused_segment_kernel, out_shape=o_shape,
        grid=(triton.cdiv(V, BV), B * H * nseg, 1), num_warps=warps, num_stages=2, scale=K ** -0.5, NSEG=nseg,
        **common)
    return o.reshape(B, T, H, V), ht


def op_forward(q, k, v, gk):
    return workbench.chunk_gla(q, k, v, gk=gk)


def inputs(B, T, H, K, V, dtype, strength=0.1, seed=0):
    x = testing.recurrent_inputs(seed, B, T, H, K, V, dtype=dtype, gates=("gk",), strength=strength,
                                 initial_state=False)
    return x["q"], x["k"], x["v"], x["gk"]


def timed(f, args, N=8, ITERS=10):
    copies = [jax.tree.map(jnp.copy, args) for _ in range(N)]
    prog = jax.jit(lambda c: [f(*a) for a in c])
    jax.block_until_ready(prog(copies)); jax.block_until_ready(prog(copies))
    ts = []
    for _ in range(ITERS):
        t0 = time.perf_counter(); jax.block_until_ready(prog(copies)); ts.append((time.perf_counter() - t0) * 1e3 / N)
    return round(statistics.median(ts), 4)


def diff(a, b):
    return float(jnp.max(jnp.abs(a.astype(jnp.float32) - b.astype(jnp.float32))))


def main():
    if sys.argv[1:] == ["check"]:
        # strength 3: many chunks not direct (their log-decays span more than RHO), the fallback's path
        for (B, T, H, K, V, dtype, strength, nseg) in (
                (1, 100, 2, 16, 16, jnp.float32, 0.1, 1), (2, 130, 2, 32, 16, jnp.float32, 3.0, 1),
                (1, 64, 1, 16, 32, jnp.bfloat16, 0.1, 1), (1, 150, 2, 16, 16, jnp.bfloat16, 3.0, 1),
                (1, 330, 2, 16, 16, jnp.float32, 0.1, 3), (2, 300, 1, 32, 16, jnp.bfloat16, 0.1, 2)):
            q, k, v, gk = inputs(B, T, H, K, V, dtype, strength)
            o, ht = fused_forward(q, k, v, gk, nseg=nseg)
            o_ref, ht_ref = op_forward(q, k, v, gk)
            print(json.dumps(dict(B=B, T=T, H=H, K=K, V=V, dtype=jnp.dtype(dtype).name, strength=strength, nseg=nseg,
                                  o_max_abs=diff(o, o_ref), o_scale=float(jnp.max(jnp.abs(o_ref.astype(jnp.float32)))),
                                  ht_max_abs=diff(ht, ht_ref), ht_scale=float(jnp.max(jnp.abs(ht_ref))))), flush=True)
    elif sys.argv[1:] == ["time"]:
        device = jax.devices()[0].device_kind
        print(json.dumps({"triton": triton.__version__, "jax": jax.__version__, "device": device}),
              flush=True)
        for (B, T) in ((8, 4096), (1, 4096), (1, 16384), (1, 65536)):
            H, K, V = 16, 64, 64
            q, k, v, gk = inputs(B, T, H, K, V, jnp.bfloat16)
            row = dict(B=B, T=T, H=H, K=K, V=V)
            try:
                (o, ht), (o_ref, ht_ref) = fused_forward(q, k, v, gk), op_forward(q, k, v, gk)
                row.update(o_max_abs=diff(o, o_ref), ht_max_abs=diff(ht, ht_ref))
                row["op_ms"] = timed(op_forward, (q, k, v, gk))
                segs = (1,) if B * H >= 128 else (1, 16)
                for nseg in segs:
                    for BV, w in ((64, 8), (32, 4)):
                        row[f"fused_seg{nseg}_BV{BV}_w{w}_ms"] = timed(
                            lambda *x: fused_forward(*x, BV=BV, warps=w, nseg=nseg), (q, k, v, gk))
                best = min(t for n, t in row.items() if n.startswith("fused_"))
                bench_bytes = B * T * H * (3 * K + 2 * V) * 2 + B * H * K * V * 4  # the bench's forward bytes
                row["fused_fraction_of_peak"] = round(bench_bytes / (best * 1e-3) / 4.8e12, 3)
                row["op_fraction_of_peak"] = round(bench_bytes / (row["op_ms"] * 1e-3) / 4.8e12, 3)
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
            print(json.dumps(row), flush=True)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()

"""Issue 48: the two-level state pass at the target shapes, where `state_segments` picks one sweep per sequence
(B8 T4096 H16: 128 sequences·heads fill the GPU's programs). chunk_gla (K=V=64) and chunk_kda (K=V=128), bf16,
inputs as `workbench bench` makes them, `Tuning(segments=n)` for n in 1, 2, 4, 8: forward and forward+backward
(`jax.vjp` pulled back by random cotangents), each a jitted program of 4 copies on separate inputs, median ms per
copy of 8 samples; the forms alternated over 5 rounds. Also o's max |Δ| against n = 1 and the bench's
fraction_of_peak (its bytes over the median over 4.8 TB/s). One JSON line per (op, n).

    python3 probe_segments.py            # on the GPU
    PROBE_TINY=1 python3 probe_segments.py   # the ops' tiny shapes, interpreter: that the script runs
"""
import json, os, statistics, time
import workbench  # first
import jax, jax.numpy as jnp, numpy as np, triton
from workbench.bench.specs import OPS
from workbench.bench.timing import jitted_passes
from workbench.chunk_gla import Tuning as GlaTuning
from workbench.kda import Tuning as KdaTuning

TINY = os.environ.get("PROBE_TINY") == "1"
PEAK = 4.8e12


def copies_program(f, args, N):
    """(a jitted program of N copies of f on separate copies of args, those copies), compiled and run once."""
    copies = [jax.tree.map(jnp.copy, args) for _ in range(N)]
    prog = jax.jit(lambda c: [f(*a) for a in c])
    jax.block_until_ready(prog(copies))
    return prog, copies


def timed(prog, copies, N, ITERS):
    ts = []
    for _ in range(ITERS):
        t0 = time.perf_counter(); jax.block_until_ready(prog(copies)); ts.append((time.perf_counter() - t0) * 1e3 / N)
    return statistics.median(ts)


def main():
    print(json.dumps({"triton": triton.__version__, "jax": jax.__version__, "device": jax.devices()[0].device_kind}),
          flush=True)
    N, ITERS, ROUNDS = (1, 1, 1) if TINY else (4, 8, 5)
    for op_name in ("chunk_gla", "chunk_kda"):
        op = OPS[op_name]
        shape = op.shape_sets["tiny" if TINY else "target"][0]
        inputs = op.inputs(shape, jnp.bfloat16, 0)
        fwd_bytes, fb_bytes = op.bytes(shape, jnp.bfloat16)
        Tuning = GlaTuning if op_name == "chunk_gla" else KdaTuning
        outs = jax.eval_shape(lambda x: op.call("triton", **x), inputs)
        cts = [jax.random.normal(jax.random.key(i + 1), o.shape, o.dtype) for i, o in enumerate(outs)]
        forms, rows, first_o = {}, {}, None
        for n in (1, 2, 4, 8):
            (fwd, fb), (primals, cts_) = jitted_passes(op, "triton", inputs, cts, tuning=Tuning(segments=n))
            o = np.asarray(fwd(primals)[0], np.float32)
            first_o = o if first_o is None else first_o
            forms[n] = (copies_program(fwd, (primals,), N), copies_program(fb, (primals, cts_), N))
            rows[n] = dict(op=op_name, shape=shape, segments=n, o_max_abs_vs_1=float(np.max(np.abs(o - first_o))),
                           fwd_ms=[], fwd_bwd_ms=[])
        for _ in range(ROUNDS):
            for n, (f, fb) in forms.items():
                rows[n]["fwd_ms"].append(round(timed(*f, N, ITERS), 4))
                rows[n]["fwd_bwd_ms"].append(round(timed(*fb, N, ITERS), 4))
        for n, row in rows.items():
            fm, bm = statistics.median(row["fwd_ms"]), statistics.median(row["fwd_bwd_ms"])
            row["fraction_of_peak"] = [round(fwd_bytes / (fm * 1e-3) / PEAK, 4), round(fb_bytes / (bm * 1e-3) / PEAK, 4)]
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

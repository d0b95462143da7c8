"""Issue 48 prototype probe: chunk_gla's forward sweep and output kernel overlapped in one launch
(`overlap_kernels.chunk_overlap_fwd_kernel`) against the op's forward (`workbench.chunk_gla`), on the bench's
inputs (per-key gates of strength 0.1, every chunk direct).

    python3 probe.py check     # CPU interpreter, small shapes: o and the final state against the op's
    python3 probe.py check_bwd # the same for the backward prototype (dH sweep + dv): dv and dS_0
    python3 probe.py compile   # CPU: the launches at the target compiled for sm_90 (registers, spills)
    python3 probe.py time      # GPU: the target (B8 T4096 H16 K=V=64 bf16), forward and dH sweep + dv

`time` prints per shape and config the op's forward and the overlapped one (`timing.time_copies_ms`: n copies in one
jitted program, per copy), their outputs' max |Δ|, and the fraction of the bench's bytes
at 4.8 TB/s. One JSON line each."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workbench  # noqa: E402  (first: Triton's interpreter where there is no GPU)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import triton  # noqa: E402
from workbench import testing  # noqa: E402

import overlap_kernels as ok  # noqa: E402

BT = 64


def _launch(kernel, q, k, y, gk, extra, b_rows, BK, BV, BVO, warps, stages, maxnreg):
    """One launch of an overlapped kernel on packed q, k, y (v or do), gk (+ `extra` arrays): its two outputs that
    are not scratch, ([N·T, H, V] in y's dtype, [N, H, K, V] float32); `b_rows` the scratch b's rows (the forward's
    b_L by slot, the backward's b of every row). Prototype limits: T a multiple of BT, a per-key gate."""
    B, T, H, K = q.shape
    V = y.shape[-1]
    if T % BT or gk is None:
        raise ValueError(f"prototype: T must be a multiple of {BT} and gk given, got T={T}")
    NT = T // BT
    NS = B * NT
    pack = lambda x: x.reshape(B * T, *x.shape[2:])  # noqa: E731
    n_sweep = B * H * triton.cdiv(K, BK) * triton.cdiv(V, BV)
    shapes = [((B * T, H, V), y.dtype), ((B, H, K, V), jnp.float32), ((NS, H, K, V), jnp.float32),
              ((b_rows(NS, B * T), H, K), jnp.float32), ((NS, H), jnp.int32), ((1,), jnp.int32)]
    first, state, _, _, _, _ = workbench.triton_call(
        pack(q), pack(k), pack(y), pack(gk), *extra, kernel=kernel,
        out_shape=[jax.ShapeDtypeStruct(s, d) for s, d in shapes], zeroed_outputs=(4, 5),
        grid=(n_sweep + NS * H * triton.cdiv(V, BVO),), num_warps=warps, num_stages=stages, maxnreg=maxnreg,
        N=B, NT=NT, scale=K ** -0.5, H=H, K=K, V=V, BT=BT, BK=BK, BV=BV, BKO=max(16, triton.next_power_of_2(K)),
        BVO=BVO, F32_DOT="ieee" if q.dtype == jnp.float32 else "tf32")
    return first.reshape(B, T, H, V), state


def overlap_forward(q, k, v, gk, BK=32, BV=64, BVO=64, warps=4, stages=2, maxnreg=None):
    """(o, final state) by the forward prototype: `chunk_h_kernel`'s sweep and `chunk_o_kernel` in one launch."""
    return _launch(ok.chunk_overlap_fwd_kernel, q, k, v, gk, (), lambda ns, tt: ns, BK, BV, BVO, warps, stages,
                   maxnreg)


def overlap_dh_dv(q, k, do, gk, dht, BK=32, BV=64, BVO=64, warps=4, stages=2, maxnreg=None):
    """(dv, dS_0) by the backward prototype: `chunk_dh_kernel`'s sweep and `chunk_dv_kernel` in one launch."""
    return _launch(ok.chunk_overlap_dh_dv_kernel, q, k, do, gk, (dht,), lambda ns, tt: tt, BK, BV, BVO, warps,
                   stages, maxnreg)


def op_dv_dh0(q, k, v, gk, do, dht):
    """The op's dv and d initial_state for cotangents (do, dht)."""
    h0 = jnp.zeros((q.shape[0], q.shape[2], q.shape[3], v.shape[3]), jnp.float32)
    _, vjp = jax.vjp(lambda v, h0: workbench.chunk_gla(q, k, v, gk=gk, initial_state=h0), v, h0)
    return vjp((do, dht))


def cotangents(q, v, seed=1):
    B, T, H, K = q.shape
    kd, kh = jax.random.split(jax.random.PRNGKey(seed))
    return (jax.random.normal(kd, v.shape, jnp.float32).astype(v.dtype),
            jax.random.normal(kh, (B, H, K, v.shape[3]), jnp.float32))


def op_forward(q, k, v, gk):
    return workbench.chunk_gla(q, k, v, gk=gk, initial_state=jnp.zeros((q.shape[0], q.shape[2], q.shape[3],
                                                                          v.shape[3]), jnp.float32))


def inputs(B, T, H, K, V, dtype, strength=0.1, seed=0):
    x = testing.recurrent_inputs(seed, B, T, H, K, V, dtype=dtype, gates=("gk",), strength=strength,
                                 initial_state=False)
    return x["q"], x["k"], x["v"], x["gk"]


def timed(f, args, iters=10):
    """ms per call: `time_copies_ms` over n copies of f on their own copies of args in one jitted program."""
    from workbench.bench.timing import time_copies_ms

    def copies(n):
        many = [jax.tree.map(jnp.copy, args) for _ in range(n)]
        program = jax.jit(lambda c: [f(*a) for a in c])
        return (lambda: program(many)), n

    plain = jax.jit(f)
    stats, _, _ = time_copies_ms(copies, lambda: plain(*args), jax.block_until_ready, iters)
    return round(stats["median"], 4)


def diff(a, b):
    return float(jnp.max(jnp.abs(a.astype(jnp.float32) - b.astype(jnp.float32))))


# 4 warps at 180 registers fit two programs per multiprocessor: the 256 sweep programs of the target would then
# hold nearly every slot while they run; capped at 168 (three) or 128 (four, spilling) the output's get some
CONFIGS = [dict(BK=32, BV=64, BVO=64, warps=4), dict(BK=32, BV=64, BVO=64, warps=4, maxnreg=168),
           dict(BK=32, BV=64, BVO=64, warps=4, maxnreg=128), dict(BK=16, BV=64, BVO=64, warps=4),
           dict(BK=16, BV=64, BVO=64, warps=4, maxnreg=128), dict(BK=32, BV=32, BVO=64, warps=4, maxnreg=128),
           dict(BK=64, BV=64, BVO=64, warps=8), dict(BK=64, BV=64, BVO=64, warps=8, maxnreg=128),
           dict(BK=64, BV=64, BVO=64, warps=4, maxnreg=168)]  # 128 sweep programs: one per multiprocessor


def main():
    mode = sys.argv[1:] or ["?"]
    if mode == ["check"]:
        for (B, T, H, K, V, dtype) in ((1, 128, 2, 32, 32, jnp.bfloat16), (2, 192, 2, 64, 32, jnp.bfloat16),
                                       (1, 64, 1, 16, 64, jnp.float16)):
            q, k, v, gk = inputs(B, T, H, K, V, dtype)
            o_ref, ht_ref = op_forward(q, k, v, gk)
            for cfg in (dict(BK=16, BV=16, BVO=16), dict(BK=K, BV=V, BVO=V)):
                o, ht = overlap_forward(q, k, v, gk, **cfg)
                print(json.dumps(dict(B=B, T=T, H=H, K=K, V=V, dtype=jnp.dtype(dtype).name, **cfg,
                                      o_max_abs=diff(o, o_ref), o_scale=float(jnp.max(jnp.abs(o_ref.astype(jnp.float32)))),
                                      ht_max_abs=diff(ht, ht_ref), ht_scale=float(jnp.max(jnp.abs(ht_ref))))),
                      flush=True)
    elif mode == ["check_bwd"]:
        for (B, T, H, K, V, dtype) in ((1, 128, 2, 32, 32, jnp.bfloat16), (2, 192, 2, 64, 32, jnp.bfloat16),
                                       (1, 64, 1, 16, 64, jnp.float16)):
            q, k, v, gk = inputs(B, T, H, K, V, dtype)
            do, dht = cotangents(q, v)
            dv_ref, dh0_ref = op_dv_dh0(q, k, v, gk, do, dht)
            for cfg in (dict(BK=16, BV=16, BVO=16), dict(BK=K, BV=V, BVO=V)):
                dv, dh0 = overlap_dh_dv(q, k, do, gk, dht, **cfg)
                print(json.dumps(dict(B=B, T=T, H=H, K=K, V=V, dtype=jnp.dtype(dtype).name, **cfg,
                                      dv_max_abs=diff(dv, dv_ref), dv_scale=float(jnp.max(jnp.abs(dv_ref.astype(jnp.float32)))),
                                      dh0_max_abs=diff(dh0, dh0_ref), dh0_scale=float(jnp.max(jnp.abs(dh0_ref))))),
                      flush=True)
    elif mode == ["compile"]:
        import tempfile

        from workbench import compile_check
        shape = lambda *s: jax.ShapeDtypeStruct(s, jnp.bfloat16)  # noqa: E731
        specs = []
        for cfg in CONFIGS:
            with compile_check.record() as s:
                jax.eval_shape(lambda *x: overlap_forward(*x, **cfg), *[shape(8, 4096, 16, 64)] * 4)
            specs += [x for x in s if x["module"] == "overlap_kernels"]
            with compile_check.record() as s:
                jax.eval_shape(lambda *x: overlap_dh_dv(*x, **cfg), *[shape(8, 4096, 16, 64)] * 4,
                               jax.ShapeDtypeStruct((8, 16, 64, 64), jnp.float32))
            specs += [x for x in s if x["module"] == "overlap_kernels"]
        r = compile_check.compile_all(specs, last="resources", sass_dir=tempfile.mkdtemp())
        for f in r["failed"]:
            print(compile_check.describe(f)[-3000:])
        for row in r["resources"]:
            res, c = row["resources"], row["spec"]["constexprs"]
            print(json.dumps(dict(kernel=row["spec"]["kernel"], BK=c["BK"], BV=c["BV"], BVO=c["BVO"], warps=row["spec"]["num_warps"],
                                  maxnreg=row["spec"].get("maxnreg"),
                                  **{n: res.get(n) for n in ("registers", "stack", "LDL", "STL", "HGMMA", "HMMA",
                                                             "shared")})), flush=True)
    elif mode == ["time"]:
        print(json.dumps({"triton": triton.__version__, "jax": jax.__version__,
                          "device": jax.devices()[0].device_kind}), flush=True)
        for (B, T) in ((8, 4096),):  # at B1 the op splits the sweep into segments (gla.13); the prototype cannot
            H, K, V = 16, 64, 64
            q, k, v, gk = inputs(B, T, H, K, V, jnp.bfloat16)
            o_ref, ht_ref = jax.jit(op_forward)(q, k, v, gk)
            row = dict(B=B, T=T, H=H, K=K, V=V, op_ms=timed(op_forward, (q, k, v, gk)))
            bench_bytes = B * T * H * (3 * K + 2 * V) * 2 + B * H * K * V * 4  # the bench's forward bytes
            row["op_fraction_of_peak"] = round(bench_bytes / (row["op_ms"] * 1e-3) / 4.8e12, 3)
            for cfg in CONFIGS:
                name = "_".join(f"{n}{x}" for n, x in cfg.items())
                try:
                    o, ht = jax.jit(lambda *x: overlap_forward(*x, **cfg))(q, k, v, gk)
                    row[name] = dict(o_max_abs=diff(o, o_ref), ht_max_abs=diff(ht, ht_ref),
                                     ms=timed(lambda *x: overlap_forward(*x, **cfg), (q, k, v, gk)))
                except Exception as e:  # noqa: BLE001  (a config that fails to compile or launch is reported)
                    row[name] = f"{type(e).__name__}: {str(e)[:300]}"
            print(json.dumps(row), flush=True)
            do, dht = cotangents(q, v)
            dv_ref, dh0_ref = jax.jit(op_dv_dh0)(q, k, v, gk, do, dht)
            row = dict(B=B, T=T, H=H, K=K, V=V, part="dh sweep + dv (op's: op_profile's chunk_dh_kernel + chunk_dv_kernel)")
            for cfg in CONFIGS:
                name = "_".join(f"{n}{x}" for n, x in cfg.items())
                try:
                    dv, dh0 = jax.jit(lambda *x: overlap_dh_dv(*x, **cfg))(q, k, do, gk, dht)
                    row[name] = dict(dv_max_abs=diff(dv, dv_ref), dh0_max_abs=diff(dh0, dh0_ref),
                                     ms=timed(lambda *x: overlap_dh_dv(*x, **cfg), (q, k, do, gk, dht)))
                except Exception as e:  # noqa: BLE001
                    row[name] = f"{type(e).__name__}: {str(e)[:300]}"
            print(json.dumps(row), flush=True)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()

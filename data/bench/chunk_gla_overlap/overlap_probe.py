"""Does chunk_gla's forward gain from running the state sweep and the output pass at once? A probe, not the op.

The op's forward at the target is two launches in a row (chunk_gla NOTES, "Per kernel at the target"): the sweep
(`chunk_h_kernel`, 256 programs, a chain of 64 chunk steps, ~54 % of the bandwidth) and then the output pass
(`chunk_o_kernel`, one program per chunk, ~67 %). Neither fills the GPU alone: the sweep is a chain with 12 % of
the warps active, the output pass waits for the sweep's last chunk before it starts. Here both run in ONE launch:
the first NS tickets are sweep programs, the rest output programs; an output program does everything that does
not need the state (loads, b, A, A v) first, then waits until every sweep program of its sequence·head has stored
the chunk's state, then adds q̄ h. A program's ticket comes from an atomic counter, not from its program id, so
every sweep program has started (holds its ticket) before any output program can wait on it: no deadlock
whatever order the hardware starts programs in (the ticket order of decoupled look-back scans).

Fixed-length batches, T a multiple of 64, K = V = 64 at most 128, a per-key log-decay gate mild enough that
every chunk is direct (gla.12; the bench's gates are): the probe forms A as a direct chunk's and checks that
assumption on the host. Three forms, timed in one process by `workbench.device_time.time_on_device`:

- `op`: `workbench.chunk_gla` (Triton, no backward), the bench's call;
- `split`: this file's sweep, then this file's output pass (two launches, no flags): the same work as `op`'s;
- `overlap`: the two in one launch with the flags.

    python data/bench/chunk_gla_overlap/overlap_probe.py --shape B=8,T=4096,H=16,K=64,V=64 [--check-only]

On a CPU (Triton's interpreter: programs run one at a time in ticket order, so no flag is ever waited on) it
checks `split` and `overlap` against the op's output; on a GPU it times them too and prints one JSON line.
"""
import argparse
import json
import math

import workbench  # noqa: F401  (JAX and Triton set up as the package does)

import jax
import jax.numpy as jnp
import numpy as np
import triton
import triton.language as tl

from workbench import bench
from workbench.bench.spec import parse_shape
from workbench.device_time import time_on_device
from workbench.launch import INTERPRET, triton_call
from workbench.tl_chunked import DIRECT_RANGE

RHO = DIRECT_RANGE  # the widest span of b inside a chunk that the op forms as a direct chunk (gla.12)


@triton.jit
def _sweep_program(t, k, v, gk, hs, sync, T: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                   BT: tl.constexpr, BK: tl.constexpr, BVS: tl.constexpr, FLAGS: tl.constexpr):
    """(gla.4) h ← exp(b_L) ⊙ h + (k ⊙ exp(b_L − b))ᵀ v over one sequence·head's chunks, for the [BK, BVS] block of
    the state at ticket t; the state at each chunk's start stored (v's dtype) before its update, then, with FLAGS,
    the chunk's counter raised (release: the stores of every thread come first, `debug_barrier`)."""
    NKB: tl.constexpr = K // BK
    NVB: tl.constexpr = V // BVS
    NC: tl.constexpr = T // BT
    i_nh = t // (NKB * NVB)
    i_k = (t // NVB) % NKB
    i_v = t % NVB
    i_n = i_nh // H
    i_h = i_nh % H
    o_t = tl.arange(0, BT)
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BVS + tl.arange(0, BVS)
    b_h = tl.zeros([BK, BVS], tl.float32)
    for c in range(NC):
        rows = i_n * T + c * BT + o_t
        p_k = (rows[:, None] * H + i_h) * K + o_k[None, :]
        b_k = tl.load(k + p_k)
        b_v = tl.load(v + (rows[:, None] * H + i_h) * V + o_v[None, :])
        b_b = tl.cumsum(tl.load(gk + p_k).to(tl.float32), axis=0)
        b_bL = tl.sum(tl.where((o_t == BT - 1)[:, None], b_b, 0.0), axis=0)
        slot = i_n * NC + c
        tl.store(hs + ((slot * H + i_h) * K + o_k[:, None]) * V + o_v[None, :], b_h.to(b_v.dtype))
        if FLAGS:
            tl.debug_barrier()
            tl.atomic_add(sync + 1 + slot * H + i_h, 1, sem="release", scope="gpu")
        b_kh = (b_k.to(tl.float32) * tl.exp(b_bL[None, :] - b_b)).to(b_v.dtype)
        b_h = b_h * tl.exp(b_bL)[:, None] + tl.dot(tl.trans(b_kh), b_v)


@triton.jit
def _output_program(t, q, k, v, gk, hs, o, sync, scale, T: tl.constexpr, H: tl.constexpr, NH: tl.constexpr,
                    K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr, NEED: tl.constexpr,
                    FLAGS: tl.constexpr):
    """(gla.5, gla.12) o = q̄ h + A v for one direct chunk and [BT, BV] block of o at ticket t (chunks slowest, so
    that early tickets take early chunks); with FLAGS it waits, after A v, until NEED sweep programs raised the
    chunk's counter (acquire)."""
    NC: tl.constexpr = T // BT
    NVO: tl.constexpr = V // BV
    c = t // (NH * NVO)
    i_nh = (t // NVO) % NH
    i_v = t % NVO
    i_n = i_nh // H
    i_h = i_nh % H
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, K)
    o_v = i_v * BV + tl.arange(0, BV)
    rows = i_n * T + c * BT + o_t
    p_k = (rows[:, None] * H + i_h) * K + o_k[None, :]
    b_q = tl.load(q + p_k).to(tl.float32)
    b_k = tl.load(k + p_k).to(tl.float32)
    b_v = tl.load(v + (rows[:, None] * H + i_h) * V + o_v[None, :])
    b_b = tl.cumsum(tl.load(gk + p_k).to(tl.float32), axis=0)
    b_b0 = tl.sum(tl.where((o_t == 0)[:, None], b_b, 0.0), axis=0)
    b_qe = b_q * tl.exp(b_b - b_b0[None, :])  # exp(b_r − b_0) ≤ 1
    b_A = tl.dot(b_qe, tl.trans(b_k * tl.exp(b_b0[None, :] - b_b)), input_precision="tf32")  # ≤ e^RHO
    b_A = (tl.where(o_t[:, None] >= o_t[None, :], b_A, 0.0) * scale).to(b_v.dtype)
    b_o = tl.dot(b_A, b_v)
    b_qbar = (b_q * tl.exp(b_b) * scale).to(b_v.dtype)
    slot = i_n * NC + c
    if FLAGS:
        while tl.atomic_add(sync + 1 + slot * H + i_h, 0, sem="acquire", scope="gpu") < NEED:
            pass
        tl.debug_barrier()
    b_h = tl.load(hs + ((slot * H + i_h) * K + o_k[:, None]) * V + o_v[None, :])
    b_o = tl.dot(b_qbar, b_h, acc=b_o)
    tl.store(o + (rows[:, None] * H + i_h) * V + o_v[None, :], b_o.to(o.dtype.element_ty))


@triton.jit
def sweep_kernel(k, v, gk, hs, T: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                 BK: tl.constexpr, BVS: tl.constexpr):
    """The split form's first launch: the sweep programs alone."""
    _sweep_program(tl.program_id(0), k, v, gk, hs, hs, T, H, K, V, BT, BK, BVS, False)


@triton.jit
def output_kernel(q, k, v, gk, hs, o, scale: tl.constexpr, T: tl.constexpr, H: tl.constexpr, NH: tl.constexpr,
                  K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr):
    """The split form's second launch: the output programs alone, after the sweep."""
    _output_program(tl.program_id(0), q, k, v, gk, hs, o, hs, scale, T, H, NH, K, V, BT, BV, 0, False)


@triton.jit
def overlap_kernel(q, k, v, gk, o, hs, sync, scale: tl.constexpr, T: tl.constexpr, H: tl.constexpr, NH: tl.constexpr,
                   K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BVS: tl.constexpr,
                   BV: tl.constexpr):
    """Both in one launch, by ticket (`sync[0]`, zeroed): the first NS tickets sweep, the rest wait on the
    sweep's per-chunk counters (`sync[1:]`, zeroed) before their q̄ h."""
    NS: tl.constexpr = NH * (K // BK) * (V // BVS)
    t = tl.atomic_add(sync, 1, sem="relaxed", scope="gpu")
    if t < NS:
        _sweep_program(t, k, v, gk, hs, sync, T, H, K, V, BT, BK, BVS, True)
    else:
        _output_program(t - NS, q, k, v, gk, hs, o, sync, scale, T, H, NH, K, V, BT, BV, (K // BK) * (V // BVS),
                        True)


def forms(shape, BK=32, BVS=64, BV=64, warps=4, stages=2):
    """{name: f(q, k, v, gk) → o} for the probe's two forms at `shape` (dict B, T, H, K, V)."""
    B, T, H, K, V = (shape[n] for n in "BTHKV")
    BT = 64
    NH, NC = B * H, T // BT
    NS = NH * (K // BK) * (V // BVS)
    NO = NH * NC * (V // BV)
    common = dict(T=T, H=H, K=K, V=V, BT=BT, num_warps=warps, num_stages=stages)
    o_shape = jax.ShapeDtypeStruct((B * T, H, V), jnp.bfloat16)
    hs_shape = jax.ShapeDtypeStruct((B * NC, H, K, V), jnp.bfloat16)

    def flat(x):
        return x.reshape(B * T, H, x.shape[-1])

    def split(q, k, v, gk):
        q, k, v, gk = (flat(x) for x in (q, k, v, gk))
        hs = triton_call(k, v, gk, kernel=sweep_kernel, out_shape=hs_shape, grid=(NS,), name="probe_sweep", BK=BK,
                         BVS=BVS, **common)
        o = triton_call(q, k, v, gk, hs, kernel=output_kernel, out_shape=o_shape, grid=(NO,), name="probe_output",
                        scale=K ** -0.5, NH=NH, BV=BV, **common)
        return o.reshape(B, T, H, V)

    def overlap(q, k, v, gk):
        sync = jax.ShapeDtypeStruct((1 + B * NC * H,), jnp.int32)
        o, _, _ = triton_call(*(flat(x) for x in (q, k, v, gk)), kernel=overlap_kernel,
                              out_shape=[o_shape, hs_shape, sync], grid=(NS + NO,), zeroed_outputs=(2,),
                              name="probe_overlap", scale=K ** -0.5, NH=NH, BK=BK, BVS=BVS, BV=BV, **common)
        return o.reshape(B, T, H, V)

    return {"split": split, "overlap": overlap}


def compile_forms(shape, configs):
    """Each form's launches at `shape` compiled for sm_90 by `workbench.compile_check` (traced abstractly, on
    this module imported under its own name so that the compiling child finds the kernels)."""
    import os
    import sys

    from workbench import compile_check

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    import overlap_probe as module

    B, T, H, K, V = (shape[n] for n in "BTHKV")
    xs = [jax.ShapeDtypeStruct((B, T, H, d), jnp.bfloat16) for d in (K, K, V, K)]
    for cfg in configs.split(";"):
        with compile_check.record() as specs:
            for f in module.forms(shape, *(int(x) for x in cfg.split(","))).values():
                jax.eval_shape(f, *xs)
        result = compile_check.compile_all(specs, last="resources", workers=2)
        for failure in result["failed"]:
            print("FAILED", compile_check.describe(failure))
        for r in result["resources"]:
            print(cfg, r["spec"]["kernel"], r["spec"]["num_warps"], r["spec"]["num_stages"], r["resources"])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="B=1,T=256,H=2,K=64,V=64")
    p.add_argument("--check-only", action="store_true")
    p.add_argument("--compile", action="store_true",
                   help="no run: compile both forms' kernels for sm_90 (workbench.compile_check; no GPU needed) and "
                        "print each one's registers, spills and barriers")
    p.add_argument("--configs", default="32,64,64,4,2",
                   help="semicolon list of BK,BVS,BV,warps,stages (the sweep's key and value blocks, the output's "
                        "value block)")
    args = p.parse_args()
    op = bench.OPS["chunk_gla"]
    shape = parse_shape(args.shape)
    if args.compile:
        return compile_forms(shape, args.configs)
    inputs = op.inputs(shape, jnp.bfloat16, 0)
    q, k, v, gk = (inputs[n] for n in ("q", "k", "v", "gk"))
    B, T, H, K = (shape[n] for n in "BTHK")
    b = np.cumsum(np.asarray(gk, np.float32).reshape(B, T // 64, 64, H, K), axis=2)
    span = float((b[:, :, 0] - b[:, :, -1]).max())
    if span > RHO:
        raise ValueError(f"gk: the probe forms every chunk as direct; the widest span of b in a chunk is {span:.2f} "
                         f"> {RHO} at shape {shape}")

    def op_forward(xs):
        out = workbench.chunk_gla(*xs[:3], gk=xs[3])
        return out[0] if isinstance(out, (tuple, list)) else out

    xs = [q, k, v, gk]
    want = np.asarray(jax.jit(op_forward)(xs), np.float32)
    row = {"max_abs_op": float(np.abs(want).max()), "shape": shape, "device": jax.devices()[0].device_kind, "span": round(span, 3), "forms": []}
    for cfg in args.configs.split(";"):
        BK, BVS, BV, warps, stages = (int(x) for x in cfg.split(","))
        for name, f in forms(shape, BK, BVS, BV, warps, stages).items():
            got = np.asarray(jax.jit(lambda xs: f(*xs))(xs), np.float32)
            err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
            entry = {"form": name, "config": cfg, "max_rel_err_vs_op": err}
            if not (INTERPRET or args.check_only):
                entry["ms"] = time_on_device(lambda xs: f(*xs), xs)
            row["forms"].append(entry)
    if not (INTERPRET or args.check_only):
        row["op_ms"] = time_on_device(op_forward, xs)
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

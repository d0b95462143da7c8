"""Issue 48 probe: chunk_gla's dqkg with one program per chunk, its key blocks a loop inside it.

`chunk_dqkg_kernel` runs one program per (key block, chunk slot, head): each reads the chunk's v and do and, for a
direct chunk, forms dA = do vᵀ twice (once for dq, once for dk: the phases keep few tiles live), so at K = 64 with
32-wide key blocks dA is formed four times per chunk and v, do read twice. Here one program per (slot, head) reads
v and do once, forms dA once, and walks the key blocks in a loop, each block's work that of the shipped kernel with
dA reused (same products, same order: dq, dk and the log-decay gradient must equal the shipped kernel's bit for
bit). Half the programs, each holding dA [BT, BT] float32 across the loop. Timed alone against `chunk_dqkg_kernel`
at the target (B8 T4096 H16 K = V = 64 bf16, every chunk direct, b_L by slot as the op's backward hands it), each
at several configs: median ms of 10 device spans of a program of 8 copies, per copy."""
import json
import sys
from pathlib import Path

import workbench  # first
import jax
import jax.numpy as jnp
import numpy as np
import triton
import triton.language as tl

from workbench import _bounds, testing
from workbench.bench import timing
from workbench.chunk_gla import kernels as gla
from workbench.tl_chunked import load_tile, slot_rows
from workbench.tl_helpers import exp_e

BT = 64


@triton.jit
def chunk_dqkg_onepass_kernel(q, k, v, do, gk, b, hs, dhs, dq_s, dk_s, bounds, dq, dk, dgk,
                              scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                              BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr,
                              B_LOCAL: tl.constexpr, USE_GK: tl.constexpr):
    i_s, i_h = tl.program_id(0).to(tl.int64), tl.program_id(1)
    start, end = slot_rows(bounds, i_s)
    if start >= end:
        return
    o_v = tl.arange(0, BV)
    m_v = o_v < V
    o_t = tl.arange(0, BT)
    rows = start + o_t
    m_t = rows < end
    m_tv = m_t[:, None] & m_v[None, :]
    b_v = tl.load(v + (rows[:, None] * H + i_h) * V + o_v[None, :], mask=m_tv, other=0.0)
    b_do = tl.load(do + (rows[:, None] * H + i_h) * V + o_v[None, :], mask=m_tv, other=0.0)
    dtype = b_v.dtype
    b_dA_diag = tl.sum(b_do.to(tl.float32) * b_v.to(tl.float32), axis=1)
    o_k0 = tl.arange(0, BK)
    first_b, first_bL, direct = gla._b_tile(gk, b, rows, m_t, start, end, i_s, i_h, o_k0, o_k0 < K, H, K, BT,
                                            BK, B_LOCAL, USE_GK)
    if direct:
        b_dA = tl.where(o_t[:, None] > o_t[None, :], tl.dot(b_do, tl.trans(b_v), input_precision=F32_DOT), 0.0)
    else:
        b_dA = tl.zeros([BT, BT], tl.float32)
    for i_k in range(0, tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        p_state = (i_s * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :]
        m_h = m_k[:, None] & m_v[None, :]
        b_h = tl.load(hs + p_state, mask=m_h, other=0.0)
        b_dh = tl.load(dhs + p_state, mask=m_h, other=0.0)
        b_q = load_tile(q, rows, m_t, i_h, o_k, m_k, H, K)
        b_k = load_tile(k, rows, m_t, i_h, o_k, m_k, H, K)
        b_b, b_bL, direct_k = gla._b_tile(gk, b, rows, m_t, start, end, i_s, i_h, o_k, m_k, H, K, BT, BK, B_LOCAL,
                                          USE_GK)
        p_t = (rows[:, None] * H + i_h) * K + o_k[None, :]
        m_tk = m_t[:, None] & m_k[None, :]
        b_state = exp_e(b_bL) * tl.sum(b_h * b_dh, axis=1)
        if direct:
            e_q, e_k = gla._chunk_factors(b_b, gla._b_first(gk, b, start, i_h, o_k, m_k, H, K, B_LOCAL, USE_GK), m_t)
            b_dq = e_q * tl.dot(b_dA, b_k * e_k, input_precision=F32_DOT) * scale
        else:
            b_dq = tl.load(dq_s + p_t, mask=m_tk, other=0.0)
        b_qdecay = b_q * exp_e(b_b) * scale
        b_dqbar = tl.dot(b_do, tl.trans(b_h.to(dtype)), input_precision=F32_DOT)
        b_p = b_q * b_dq + b_qdecay * b_dqbar
        b_dq += scale * b_dA_diag[:, None] * b_k + exp_e(b_b) * scale * b_dqbar
        tl.store(dq + p_t, b_dq.to(dq.dtype.element_ty), mask=m_tk)
        if direct:
            e_q, e_k = gla._chunk_factors(b_b, gla._b_first(gk, b, start, i_h, o_k, m_k, H, K, B_LOCAL, USE_GK), m_t)
            b_dk = e_k * tl.dot(tl.trans(b_dA), b_q * e_q, input_precision=F32_DOT) * scale
        else:
            b_dk = tl.load(dk_s + p_t, mask=m_tk, other=0.0)
        b_p -= b_k * b_dk
        b_dkin = tl.dot(b_v.to(tl.float32), tl.trans(b_dh), input_precision=F32_DOT)
        b_ekL = exp_e(b_bL[None, :] - b_b)
        b_dk += scale * b_dA_diag[:, None] * b_q + b_ekL * b_dkin
        tl.store(dk + p_t, b_dk.to(dk.dtype.element_ty), mask=m_tk)
        b_x = b_k * b_ekL * b_dkin
        up = tl.broadcast_to(tl.maximum(o_t - 1, 0)[:, None], (BT, BK))
        b_xp = tl.where((o_t > 0)[:, None], tl.gather(b_x, up, axis=0), 0.0)
        b_dg = tl.cumsum(b_xp, axis=0) + b_state[None, :] + tl.cumsum(b_p, axis=0, reverse=True)
        tl.store(dgk + p_t, b_dg, mask=m_tk)


def inputs(B, T, H, K, V, seed=0):
    x = testing.recurrent_inputs(seed, B, T, H, K, V, dtype=jnp.bfloat16, gates=("gk",), strength=0.1,
                                 initial_state=False)
    TT = B * T
    pack = lambda a: a.reshape(TT, *a.shape[2:])  # noqa: E731
    bounds = jnp.asarray(_bounds.slot_table(None, TT, BT, (B, T)))
    NS = bounds.shape[0]
    gk = pack(x["gk"])
    # b_L by slot: the chunk's summed log-decays (float32), 0 for unused slots
    rows = np.asarray(bounds)[:, :1] + np.arange(BT)[None, :]
    valid = rows < np.asarray(bounds)[:, 1:]
    g64 = np.asarray(gk, np.float64)
    bL = np.where(valid[..., None, None], g64[np.where(valid, rows, 0)], 0.0).sum(axis=1).astype(np.float32)
    key = jax.random.split(jax.random.PRNGKey(seed + 1), 3)
    hs = jax.random.normal(key[0], (NS, H, K, V), jnp.float32).astype(jnp.bfloat16)
    dhs = jax.random.normal(key[1], (NS, H, K, V), jnp.float32)
    do = jax.random.normal(key[2], (TT, H, V), jnp.float32).astype(jnp.bfloat16)
    zeros = jnp.zeros((TT, H, K), jnp.float32)
    return (pack(x["q"]), pack(x["k"]), pack(x["v"]), do, gk, jnp.asarray(bL), hs, dhs, zeros, zeros, bounds)


def dqkg(kernel, args, H, K, V, BK, w, s):
    q = args[0]
    TT = q.shape[0]
    NS = args[-1].shape[0]
    out = [jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct(q.shape, q.dtype),
           jax.ShapeDtypeStruct((TT, H, K), args[4].dtype)]
    common = dict(scale=K ** -0.5, H=H, K=K, V=V, BT=BT, BK=BK, BV=max(16, triton.next_power_of_2(V)),
                  F32_DOT="tf32", B_LOCAL=True, USE_GK=True, num_warps=w, num_stages=s)
    if kernel == "shipped":
        return workbench.triton_call(*args, kernel=gla.chunk_dqkg_kernel.fn.fn, out_shape=out,
                                     grid=(triton.cdiv(K, BK), NS, H), **common)
    return workbench.triton_call(*args, kernel=chunk_dqkg_onepass_kernel, out_shape=out, grid=(NS, H), **common)


CONFIGS = [(32, 4, 2), (32, 8, 2), (16, 4, 2), (16, 8, 2), (64, 8, 2), (32, 4, 1)]


def main(shapes=((8, 4096),), configs=CONFIGS, copies=8, iters=10):
    print(json.dumps({"triton": triton.__version__, "jax": jax.__version__, "device": jax.devices()[0].device_kind}),
          flush=True)
    H, K, V = 16, 64, 64
    for B, T in shapes:
        args = inputs(B, T, H, K, V)
        for BK, w, s in configs:
            row = dict(B=B, T=T, BK=BK, warps=w, stages=s)
            outs = {}
            for kernel in ("shipped", "onepass"):
                try:
                    f = lambda *a, kernel=kernel: dqkg(kernel, a, H, K, V, BK, w, s)  # noqa: E731
                    outs[kernel] = jax.jit(f)(*args)
                    if copies:
                        many = [jax.tree.map(jnp.copy, args) for _ in range(copies)]
                        prog = jax.jit(lambda c, f=f: [f(*x) for x in c])
                        call = lambda prog=prog, many=many: prog(many)  # noqa: E731
                        jax.block_until_ready(call())
                        spans = timing.device_spans([call], [0] * iters, jax.block_until_ready)
                        row[kernel] = round(sorted(spans)[len(spans) // 2] / copies, 4)
                except Exception as e:  # noqa: BLE001
                    row[kernel + "_error"] = f"{type(e).__name__}: {str(e)[:300]}"
            if len(outs) == 2:
                row["equal"] = [bool(jnp.array_equal(p, q)) for p, q in zip(outs["shipped"], outs["onepass"])]
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

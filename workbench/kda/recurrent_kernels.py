"""Triton kernels of KDA token by token (`recurrent_kda`): the delta rule (kda.1) and its reverse (kda.14).

* `recurrent_kda_fwd_kernel`, `recurrent_kda_bwd_kernel` (V block, sequence·head): the state one token at
  a time, and the backward from checkpoints of the forward every CHUNK steps.
"""

import triton
import triton.language as tl

from ..launch import given
from ..tl_helpers import exp_e
from ..tl_helpers import sequence_bounds


CHUNK = 64  # steps between the recurrent forward's checkpoints; passed as a constexpr


def _recurrent_configs():
    return [triton.Config({"BV": bv}, num_warps=w) for bv in (16, 32, 64) for w in (2, 4)]


def _prune_recurrent(configs, named_args, **_):
    """Block sizes that fit V, and [BK, BV] state tiles that fit in registers."""
    BK = triton.next_power_of_2(named_args["q"].shape[-1])
    BVmax = max(16, triton.next_power_of_2(named_args["v"].shape[-1]))
    kept = [c for c in configs if c.kwargs["BV"] <= BVmax and BK * c.kwargs["BV"] <= 8192]
    return kept or [min(configs, key=lambda c: c.kwargs["BV"])]


@triton.jit
def _token(q, k, v, g, beta, t, i_h, o_k, o_v, m_k, m_v, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr):
    """Row t of q, k, g ([BK]), v ([BV]) and β, as float32."""
    b_q = tl.load(q + (t * H + i_h) * K + o_k, mask=m_k, other=0.0).to(tl.float32)
    b_k = tl.load(k + (t * H + i_h) * K + o_k, mask=m_k, other=0.0).to(tl.float32)
    b_g = tl.load(g + (t * H + i_h) * K + o_k, mask=m_k, other=0.0).to(tl.float32)
    b_v = tl.load(v + (t * H + i_h) * V + o_v, mask=m_v, other=0.0).to(tl.float32)
    b_beta = tl.load(beta + t * H + i_h).to(tl.float32)
    return b_q, b_k, b_v, b_g, b_beta


@triton.jit
def _delta_step(b_h, b_k, b_v, b_g, b_beta):
    """(kda.1) S' = diag(exp g) S, r = v − S'ᵀ k, S = S' + β k rᵀ; returns (S', r, S)."""
    b_hp = b_h * exp_e(b_g)[:, None]
    b_r = b_v - tl.sum(b_hp * b_k[:, None], axis=0)  # [BV]
    return b_hp, b_r, b_hp + b_k[:, None] * (b_beta * b_r)[None, :]


@triton.autotune(configs=_recurrent_configs(), key=["H", "K", "V", "SAVE"],
                 prune_configs_by={"early_config_prune": _prune_recurrent})
@triton.heuristics({"SAVE": given("ckpt")})
@triton.jit
def recurrent_kda_fwd_kernel(q, k, v, g, beta, h0, cu_seqlens,  # inputs
                             o, ht, ckpt,  # outputs; ckpt [TT // CHUNK + N + 1, H, K, V]: the state every CHUNK steps
                             scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                             BK: tl.constexpr, BV: tl.constexpr, CHUNK: tl.constexpr, SAVE: tl.constexpr):
    """(kda.1) One sequence·head, one value block, token by token; the state stays in registers."""
    i_v, i_nh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    i_n, i_h = i_nh // H, i_nh % H
    bos, eos = sequence_bounds(cu_seqlens, i_n)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    m_h = m_k[:, None] & m_v[None, :]
    p_state = o_k[:, None] * V + o_v[None, :]
    p_ckpt = ckpt + ((bos // CHUNK + i_n) * H + i_h) * K * V + p_state  # checkpoint 0 of this sequence
    b_h = tl.load(h0 + i_nh * K * V + p_state, mask=m_h, other=0.0)  # [BK, BV]
    for i in range(0, eos - bos):
        if SAVE:
            tl.store(p_ckpt + (i // CHUNK) * H * K * V, b_h, mask=m_h & (i % CHUNK == 0))
        t = bos + i
        b_q, b_k, b_v, b_g, b_beta = _token(q, k, v, g, beta, t, i_h, o_k, o_v, m_k, m_v, H, K, V)
        _, _, b_h = _delta_step(b_h, b_k, b_v, b_g, b_beta)
        b_o = tl.sum(b_h * (b_q * scale)[:, None], axis=0)
        tl.store(o + (t * H + i_h) * V + o_v, b_o.to(o.dtype.element_ty), mask=m_v)
    tl.store(ht + i_nh * K * V + p_state, b_h, mask=m_h)


@triton.jit
def recurrent_kda_bwd_kernel(q, k, v, g, beta, do, dht, ckpt, cu_seqlens,  # inputs
                             dq, dk, dg, dbeta, dv, dh0, scratch,
                             # outputs: dq, dk, dg [NV, TT, H, K] and dβ [NV, TT, H] partial over value blocks
                             # (f32); dv [TT, H, V]; dS_0; scratch [NV·N·H, CHUNK, BK, BV]
                             scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                             BK: tl.constexpr, BV: tl.constexpr, CHUNK: tl.constexpr):
    """(kda.14) One sequence·head, one value block, last token first. Each chunk of CHUNK steps is
    recomputed from its checkpoint into the scratch (the state before every step), then walked back."""
    i_v, i_nh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    NH = tl.num_programs(1)
    i_n, i_h = i_nh // H, i_nh % H
    bos, eos = sequence_bounds(cu_seqlens, i_n)
    n = eos - bos
    TT = tl.load(cu_seqlens + NH // H)  # the packed length: the last bound
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    m_h = m_k[:, None] & m_v[None, :]
    p_state = o_k[:, None] * V + o_v[None, :]
    p_tile = o_k[:, None] * BV + tl.arange(0, BV)[None, :]
    p_scratch = scratch + (i_v * NH + i_nh) * CHUNK * BK * BV
    p_ckpt = ckpt + ((bos // CHUNK + i_n) * H + i_h) * K * V + p_state
    b_dh = tl.load(dht + i_nh * K * V + p_state, mask=m_h, other=0.0)  # [BK, BV]
    n_chunks = tl.cdiv(n, CHUNK)
    for c_rev in range(0, n_chunks):
        c = n_chunks - 1 - c_rev
        b_h = tl.load(p_ckpt + c * H * K * V, mask=m_h, other=0.0)
        t0 = c * CHUNK
        steps = tl.minimum(n - t0, CHUNK)
        for j in range(0, steps):  # the state before each step of the chunk
            tl.store(p_scratch + j * BK * BV + p_tile, b_h)
            _, b_k, b_v, b_g, b_beta = _token(q, k, v, g, beta, bos + t0 + j, i_h, o_k, o_v, m_k, m_v, H, K, V)
            _, _, b_h = _delta_step(b_h, b_k, b_v, b_g, b_beta)
        tl.debug_barrier()
        for j_rev in range(0, steps):
            j = steps - 1 - j_rev
            t = bos + t0 + j
            b_prev = tl.load(p_scratch + j * BK * BV + p_tile)
            b_q, b_k, b_v, b_g, b_beta = _token(q, k, v, g, beta, t, i_h, o_k, o_v, m_k, m_v, H, K, V)
            b_do = tl.load(do + (t * H + i_h) * V + o_v, mask=m_v, other=0.0).to(tl.float32)
            b_hp, b_r, b_h = _delta_step(b_prev, b_k, b_v, b_g, b_beta)
            b_dh += (b_q * scale)[:, None] * b_do[None, :]  # dS_t
            b_ddelta = tl.sum(b_dh * b_k[:, None], axis=0)  # [BV] dδ = dS_tᵀ k
            b_dp = -b_beta * b_ddelta  # the gradient of S'ᵀ k
            b_dhp = b_dh + b_k[:, None] * b_dp[None, :]  # dS'
            b_dq = tl.sum(b_h * b_do[None, :], axis=1) * scale
            b_dk = tl.sum(b_dh * (b_beta * b_r)[None, :], axis=1) + tl.sum(b_hp * b_dp[None, :], axis=1)
            b_dg = tl.sum(b_dhp * b_hp, axis=1)
            p_k = ((i_v * TT + t) * H + i_h) * K + o_k
            tl.store(dq + p_k, b_dq, mask=m_k)
            tl.store(dk + p_k, b_dk, mask=m_k)
            tl.store(dg + p_k, b_dg, mask=m_k)
            tl.store(dbeta + (i_v * TT + t) * H + i_h, tl.sum(b_ddelta * b_r, axis=0))
            tl.store(dv + (t * H + i_h) * V + o_v, (b_beta * b_ddelta).to(dv.dtype.element_ty), mask=m_v)
            b_dh = b_dhp * exp_e(b_g)[:, None]  # dS_{t−1}
        tl.debug_barrier()  # the next chunk overwrites the scratch
    tl.store(dh0 + i_nh * K * V + p_state, b_dh, mask=m_h)

"""Triton kernels of chunked KDA's state sweeps: one sweep per sequence, or segments in parallel. Tags: NOTES.md.

Every chunked kernel sees packed sequences (`[TT, H, ·]` rows) cut into chunks of BT rows, in the
chunk slots of `workbench._bounds.chunk_slots` (`bounds[slot] = (start, end)` rows, start = end for an
unused slot; per-chunk states stored by slot). The per-chunk matrices A, Aqk, dAqk and dL are stored
`[TT, H, BT]` (float32, but Aqk in the inputs' dtype, which its products round it to): row r of its
chunk's matrix at the row of token r, columns by position in the chunk (NOTES.md, "Where A lives").

* `chunk_kda_h_kernel` (V block, sequence·head): the forward sweep, δ = u − w h (kda.4).
* `chunk_kda_dh_kernel` (V block, sequence·head): dδ and the reverse state sweep (kda.9).
* with segments (kda.18): `chunk_kda_segment_kernel` (each segment from a zero state), the shared
  `chunk_state_pass_kernel` (`workbench.tl_chunked`: the states entering each segment), then
  `chunk_kda_resweep_o_kernel` (the re-sweep forming o as it goes) or `chunk_kda_resweep_kernel` + the o
  kernel; backward: the same three with REVERSE, `chunk_kda_resweep_kernel` storing dH and dδ.
"""

import triton
import triton.language as tl

from ..tl_chunked import (block_configs, load_row, load_tile, prune_blocks, segment_prologue, slot_rows, sweep_prologue,
                          sweep_stages)
from ..tl_helpers import exp_e
from .steps import khat_decay, load_matrix, tile_rows


@triton.autotune(configs=block_configs("BV", (16, 32, 64)), key=["H", "K", "V", "BT"],
                 prune_configs_by={"early_config_prune": prune_blocks("BV", "u")})
@triton.jit
def chunk_kda_h_kernel(khat, w, u, b, h0, cu_seqlens, bounds,  # inputs
                       ht, hs, delta,  # outputs: final states; states at chunk starts [NS, H, K, V]; δ [TT, H, V]
                       H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                       BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr):
    """(kda.4) Over the chunks of one sequence: δ = u − w h, then h ← exp(b_L) ⊙ h + k̂ᵀ δ (k̂ from the wu
    kernel). The chunk-start states are stored in hs's dtype: float32 for the backward, else the inputs'
    dtype, which the output's product rounds them to."""
    i_nh, i_h, first_slot, n_chunks, o_k, o_v, m_k, m_v, m_h, p_state = sweep_prologue(cu_seqlens, H, K, V, BT,
                                                                                        BK, BV)
    b_h = tl.load(h0 + i_nh * K * V + p_state, mask=m_h, other=0.0)  # [BK, BV]
    for c in range(0, n_chunks):
        i_s = first_slot + c
        tl.store(hs + (i_s * H + i_h) * K * V + p_state, b_h.to(hs.dtype.element_ty), mask=m_h)
        start, end = slot_rows(bounds, i_s)
        rows = start + tl.arange(0, BT)
        m_t = rows < end
        b_u = tile_rows(u, rows, m_t, i_h, o_v, m_v, H, V).to(tl.float32)
        b_h, b_delta = _kda_h_step(b_h, b_u, khat, w, b, rows, m_t, end, i_h, o_k, m_k, H, K, F32_DOT)
        tl.store(delta + (rows[:, None] * H + i_h) * V + o_v[None, :], b_delta, mask=m_t[:, None] & m_v[None, :])
    tl.store(ht + i_nh * K * V + p_state, b_h, mask=m_h)


@triton.jit
def _kda_h_step(b_h, b_u, khat, w, b, rows, m_t, end, i_h, o_k, m_k, H: tl.constexpr, K: tl.constexpr,
                F32_DOT: tl.constexpr):
    """(kda.4) One chunk of the forward sweep: (exp(b_L) ⊙ h + k̂ᵀ δ, δ) with δ = u − w h in the inputs' dtype."""
    b_w = tile_rows(w, rows, m_t, i_h, o_k, m_k, H, K)  # [BT, BK]
    dtype = b_w.dtype
    b_delta = (b_u - tl.dot(b_w, b_h.to(dtype), input_precision=F32_DOT)).to(dtype)  # [BT, BV]
    b_khat = tile_rows(khat, rows, m_t, i_h, o_k, m_k, H, K)  # [BT, BK]
    b_bL = load_row(b, end - 1, i_h, o_k, m_k, H, K)
    return b_h * exp_e(b_bL)[:, None] + tl.dot(tl.trans(b_khat), b_delta, input_precision=F32_DOT), b_delta


# 2 stages, and 1 for keys wider than WIDE_KEYS (`sweep_stages`: the pipelined state sweep outgrows shared memory)
@triton.autotune(configs=block_configs("BV", (16, 32, 64), stages=(2, 1)), key=["H", "K", "V", "BT"],
                 prune_configs_by={"early_config_prune": sweep_stages(prune_blocks("BV", "do"), "w")})
@triton.jit
def chunk_kda_dh_kernel(q, k, w, b, Aqk, do, dht, cu_seqlens, bounds,  # inputs
                        dh0, dhs, ddelta,  # outputs: dS_0; dH at each chunk's end [NS, H, K, V]; dδ [TT, H, V]
                        scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                        BK: tl.constexpr, BV: tl.constexpr, F32_DOT: tl.constexpr):
    """(kda.9) Last chunk first: dδ = Aqkᵀ do + k̂ dH, then dH ← exp(b_L) ⊙ dH + q̄ᵀ do − wᵀ dδ."""
    i_nh, i_h, first_slot, n_chunks, o_k, o_v, m_k, m_v, m_h, p_state = sweep_prologue(cu_seqlens, H, K, V, BT,
                                                                                        BK, BV)
    b_dh = tl.load(dht + i_nh * K * V + p_state, mask=m_h, other=0.0)  # [BK, BV]
    for c_rev in range(0, n_chunks):
        i_s = first_slot + n_chunks - 1 - c_rev
        tl.store(dhs + (i_s * H + i_h) * K * V + p_state, b_dh, mask=m_h)
        start, end = slot_rows(bounds, i_s)
        rows = start + tl.arange(0, BT)
        m_t = rows < end
        b_do = tile_rows(do, rows, m_t, i_h, o_v, m_v, H, V)  # [BT, BV]
        b_dh, b_ddelta = _kda_dh_step(b_dh, b_do, q, k, w, b, Aqk, scale, rows, m_t, end, i_h, o_k, m_k, H, K, BT,
                                      F32_DOT)
        tl.store(ddelta + (rows[:, None] * H + i_h) * V + o_v[None, :], b_ddelta, mask=m_t[:, None] & m_v[None, :])
    tl.store(dh0 + i_nh * K * V + p_state, b_dh, mask=m_h)


@triton.jit
def _kda_dh_step(b_dh, b_do, q, k, w, b, Aqk, scale, rows, m_t, end, i_h, o_k, m_k, H: tl.constexpr, K: tl.constexpr,
                 BT: tl.constexpr, F32_DOT: tl.constexpr):
    """(kda.9) One chunk of the backward sweep: (exp(b_L) ⊙ dH + q̄ᵀ do − wᵀ dδ, dδ), dδ = Aqkᵀ do + k̂ dH."""
    dtype = b_do.dtype
    b_b = load_tile(b, rows, m_t, i_h, o_k, m_k, H, K)
    b_bL = load_row(b, end - 1, i_h, o_k, m_k, H, K)
    # k̂ as the forward rounded it, against the float32 dH (the reference's product keeps dH in float32)
    b_khat = (load_tile(k, rows, m_t, i_h, o_k, m_k, H, K) * khat_decay(b_b, b_bL, rows, end)).to(dtype)
    b_Aqk = load_matrix(Aqk, rows, m_t, i_h, H, BT).to(dtype)
    b_ddelta = (tl.dot(tl.trans(b_Aqk), b_do, input_precision=F32_DOT)
                + tl.dot(b_khat.to(tl.float32), b_dh, input_precision=F32_DOT)).to(dtype)
    b_qbar = (load_tile(q, rows, m_t, i_h, o_k, m_k, H, K) * exp_e(b_b) * scale).to(dtype)
    b_w = tile_rows(w, rows, m_t, i_h, o_k, m_k, H, K)
    b_dh = (b_dh * exp_e(b_bL)[:, None] + tl.dot(tl.trans(b_qbar), b_do, input_precision=F32_DOT)
            - tl.dot(tl.trans(b_w), b_ddelta, input_precision=F32_DOT))
    return b_dh, b_ddelta


@triton.jit
def _kda_step(b_h, q, k, khat, w, u, do, b, Aqk, scale, rows, m_t, end, i_h, o_k, m_k, o_c, m_c, H: tl.constexpr,
              K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, REVERSE: tl.constexpr, F32_DOT: tl.constexpr):
    """One chunk of the forward sweep (u's columns o_c) or, with REVERSE, of the backward one (do's columns)."""
    if REVERSE:
        b_do = tile_rows(do, rows, m_t, i_h, o_c, m_c, H, V)
        return _kda_dh_step(b_h, b_do, q, k, w, b, Aqk, scale, rows, m_t, end, i_h, o_k, m_k, H, K, BT, F32_DOT)
    else:  # an explicit else: the compiler would build the code after a static if's return too (with dummies)
        b_u = tile_rows(u, rows, m_t, i_h, o_c, m_c, H, V).to(tl.float32)
        return _kda_h_step(b_h, b_u, khat, w, b, rows, m_t, end, i_h, o_k, m_k, H, K, F32_DOT)


def _prune_values(configs, named_args, **_):
    """`prune_blocks("BV", ·)` by the value width of whichever of u (forward) and do (backward) is given."""
    values = named_args["u"] if len(named_args["u"].shape) > 1 else named_args["do"]
    return prune_blocks("BV", "x")(configs, {"x": values})


@triton.jit
def _columns(i_v, BV: tl.constexpr, V: tl.constexpr, K: tl.constexpr):
    """Columns of block i_v of the segment sweep's [K, V + K] state: (o_c, the state's columns, the identity's)."""
    o_c = i_v * BV + tl.arange(0, BV)
    return o_c, o_c < V, (o_c >= V) & (o_c < V + K)


@triton.autotune(configs=block_configs("BV", (16, 32, 64)), key=["H", "K", "V", "BT", "NSEG", "REVERSE"],
                 prune_configs_by={"early_config_prune": _prune_values})
@triton.jit
def chunk_kda_segment_kernel(q, k, khat, w, u, do, b, Aqk, cu_seqlens, bounds,  # inputs (forward: khat, w, u, b)
                             ends, trans,  # outputs: E_j [N·NSEG, H, K, V], P_j [N·NSEG, H, K, K]
                             scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                             BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, NSEG: tl.constexpr,
                             REVERSE: tl.constexpr, F32_DOT: tl.constexpr):
    """(kda.18) One segment of a sequence swept from zero beside the K × K identity, as one [K, V + K] state:
    the first V columns give E_j (u, or do with REVERSE, as in the one-sweep kernels), the last K columns,
    swept with u = 0 (do = 0), give P_j (its transpose's product with REVERSE: the backward map is Mᵀ)."""
    i_n, i_h, i_row, first_slot, c0, c1, o_k, _, m_k, _, _, _ = segment_prologue(
        cu_seqlens, H, K, V, BT, BK, BV, NSEG)
    o_c, m_u, m_p = _columns(tl.program_id(0), BV, V, K)
    b_h = tl.where(m_k[:, None] & m_p[None, :] & (o_k[:, None] == o_c[None, :] - V), 1.0, 0.0)  # [BK, BV]
    for cc in range(0, c1 - c0):
        i_s = first_slot + (c1 - 1 - cc if REVERSE else c0 + cc)
        start, end = slot_rows(bounds, i_s)
        rows = start + tl.arange(0, BT)
        m_t = rows < end
        b_h, b_step = _kda_step(b_h, q, k, khat, w, u, do, b, Aqk, scale, rows, m_t, end, i_h, o_k, m_k, o_c, m_u, H, K,
                                V, BT, REVERSE, F32_DOT)  # b_step (δ) unused: not `_`, which the prologue typed
    tl.store(ends + i_row * K * V + o_k[:, None] * V + o_c[None, :], b_h, mask=m_k[:, None] & m_u[None, :])
    tl.store(trans + i_row * K * K + o_k[:, None] * K + (o_c - V)[None, :], b_h, mask=m_k[:, None] & m_p[None, :])


@triton.autotune(configs=block_configs("BV", (16, 32, 64)), key=["H", "K", "V", "BT", "NSEG", "REVERSE"],
                 prune_configs_by={"early_config_prune": _prune_values})
@triton.jit
def chunk_kda_resweep_kernel(q, k, khat, w, u, do, b, Aqk, starts, cu_seqlens, bounds,  # inputs
                             states, delta,  # outputs: hs (dH with REVERSE) [NS, H, K, V]; δ (dδ) [TT, H, V]
                             scale: tl.constexpr, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                             BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, NSEG: tl.constexpr,
                             REVERSE: tl.constexpr, F32_DOT: tl.constexpr):
    """(kda.18) Every segment swept again from its true entering state, in parallel: the per-chunk states and
    δ (forward, as `chunk_kda_h_kernel` stores them) or dH and dδ (REVERSE, as `chunk_kda_dh_kernel`)."""
    i_n, i_h, i_row, first_slot, c0, c1, o_k, o_v, m_k, m_v, m_h, p_state = segment_prologue(
        cu_seqlens, H, K, V, BT, BK, BV, NSEG)
    b_h = tl.load(starts + i_row * K * V + p_state, mask=m_h, other=0.0)
    for cc in range(0, c1 - c0):
        i_s = first_slot + (c1 - 1 - cc if REVERSE else c0 + cc)
        tl.store(states + (i_s * H + i_h) * K * V + p_state, b_h.to(states.dtype.element_ty), mask=m_h)
        start, end = slot_rows(bounds, i_s)
        rows = start + tl.arange(0, BT)
        m_t = rows < end
        b_h, b_d = _kda_step(b_h, q, k, khat, w, u, do, b, Aqk, scale, rows, m_t, end, i_h, o_k, m_k, o_v, m_v, H, K,
                             V, BT, REVERSE, F32_DOT)
        tl.store(delta + (rows[:, None] * H + i_h) * V + o_v[None, :], b_d, mask=m_t[:, None] & m_v[None, :])


@triton.autotune(configs=block_configs("BV", (16, 32, 64)), key=["H", "K", "V", "BT", "NSEG", "STORE"],
                 prune_configs_by={"early_config_prune": prune_blocks("BV", "u")})
@triton.jit
def chunk_kda_resweep_o_kernel(khat, w, u, b, qbar, Aqk, starts, cu_seqlens, bounds,  # inputs
                               o, states, delta,  # outputs: o [TT, H, V]; with STORE hs [NS, H, K, V], δ [TT, H, V]
                               H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                               BK: tl.constexpr, BV: tl.constexpr, NSEG: tl.constexpr, STORE: tl.constexpr,
                               F32_DOT: tl.constexpr):
    """(kda.18, kda.6) The forward re-sweep of `chunk_kda_resweep_kernel` that also forms each chunk's output
    o = q̄ h + Aqk δ from the state and δ it holds (the products and roundings of `chunk_kda_o_kernel`, so
    the same o), instead of storing them for an output kernel to read back. With STORE (a backward will
    need them) it stores hs and δ as well; without, `states` and `delta` are not touched."""
    i_n, i_h, i_row, first_slot, c0, c1, o_k, o_v, m_k, m_v, m_h, p_state = segment_prologue(
        cu_seqlens, H, K, V, BT, BK, BV, NSEG)
    b_h = tl.load(starts + i_row * K * V + p_state, mask=m_h, other=0.0)
    for cc in range(0, c1 - c0):
        i_s = first_slot + c0 + cc
        if STORE:
            tl.store(states + (i_s * H + i_h) * K * V + p_state, b_h.to(states.dtype.element_ty), mask=m_h)
        start, end = slot_rows(bounds, i_s)
        rows = start + tl.arange(0, BT)
        m_t = rows < end
        m_tv = m_t[:, None] & m_v[None, :]
        p_tv = (rows[:, None] * H + i_h) * V + o_v[None, :]
        b_u = tile_rows(u, rows, m_t, i_h, o_v, m_v, H, V).to(tl.float32)
        b_qbar = tile_rows(qbar, rows, m_t, i_h, o_k, m_k, H, K)  # [BT, BK]
        dtype = b_qbar.dtype
        b_o = tl.dot(b_qbar, b_h.to(dtype), input_precision=F32_DOT)  # the state at the chunk's start
        b_h, b_d = _kda_h_step(b_h, b_u, khat, w, b, rows, m_t, end, i_h, o_k, m_k, H, K, F32_DOT)
        if STORE:
            tl.store(delta + p_tv, b_d, mask=m_tv)
        b_o += tl.dot(load_matrix(Aqk, rows, m_t, i_h, H, BT).to(dtype), b_d, input_precision=F32_DOT)
        tl.store(o + p_tv, b_o.to(o.dtype.element_ty), mask=m_tv)

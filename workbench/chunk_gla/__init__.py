"""Chunked gated linear attention: `workbench.chunk_gla`.

The recurrence of `workbench.recurrent` (forward order, gates g and gk),

    S ← S ⊙ exp(G_t) + k_t v_tᵀ,   G_t[i, j] = g_t + gk_t[i],   o_t = S_tᵀ (scale · q_t),

computed chunk by chunk: the state only at chunk boundaries, attention inside each chunk. Triton
kernels (`kernels.py`), the pure-JAX reference (`reference.py`) and the derivation (`NOTES.md`).
This module is the glue: validation, packing, the custom VJP.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Literal

import jax
import jax.numpy as jnp
import triton

from .. import _checks
from .._bounds import entering_state_term, first_chunk_rows, keep_inside, packed_bounds, slot_table, stand_ins
from .._sharding import SEQUENCE_HINT, linear_dims, linear_out_dims, per_device, summed_grads, vary_like
from ..launch import sm_count, triton_call
from . import fixup_kernels, kernels
from .reference import chunk_gla_ref, chunked_packed, log_decay

__all__ = ["chunk_gla", "Tuning", "CHUNK_SIZES"]

CHUNK_SIZES = (16, 32, 64)


@dataclasses.dataclass(frozen=True)
class Tuning:
    """Static choices of the Triton path that do not change the result.

    backward: "triton" runs the backward kernels; "reference" runs `jax.vjp` of the reference
        instead (on the same packed inputs), so the forward kernels can be tested alone and a wrong
        gradient bisected.
    segments: the two-level state pass (NOTES.md, gla.13): the state sweeps (forward and backward) cut
        every sequence into this many segments swept in parallel, then carry the true states across
        them and correct each segment's states. 1 is the single sweep; None (default) chooses by
        `state_segments` from the programs a single sweep would keep in flight and the GPU's SM count.
    residuals: what the forward keeps for the backward besides the inputs. "keep" (default): the chunk-start
        states (in v's dtype) and the intra-chunk matrix A (1.74× the inputs and output at B1 T64k H16 K = V = 64
        bf16 with a scalar gate, 1.2× with a per-key one); "recompute": nothing, the backward sweeping the
        states and forming A again with the forward's kernels (NOTES.md, "Memory"). The same gradients, bit
        for bit where the kernels are deterministic.
    """

    backward: Literal["triton", "reference"] = "triton"
    segments: int | None = None
    residuals: Literal["keep", "recompute"] = "keep"

    def __post_init__(self):
        if self.segments is not None and (type(self.segments) is not int or self.segments < 1):
            raise ValueError(f"Tuning.segments: expected None or an int ≥ 1, got {self.segments!r}")
        if self.residuals not in ("keep", "recompute"):
            raise ValueError(f"Tuning.residuals: expected 'keep' or 'recompute', got {self.residuals!r}")


SWEEP_PROGRAMS = 4  # V blocks × K blocks of a state sweep at K = V = 64 with its usual 32 × 32 or 64 × 32 blocks
MIN_SEGMENT_CHUNKS = 8  # fewer chunks per segment would make the correction cost more than the sweep saves
MIN_SPLIT_CHUNKS = 32  # H100, B=1 H=16: 16 chunks (T = 1k) ran faster as one sweep, 32 (2k) faster in 4 segments
FIXUP_CHUNKS = 8  # chunks of a segment per program of the two-level pass's fix-up (gla.13)


def state_segments(pairs: int, chunks: int, sms: int) -> int:
    """(gla.13) Segments per sequence for the state sweeps: 1 while `pairs` (sequences × heads) already keep
    the GPU's `sms` multiprocessors busy or the longest possible sequence has fewer than MIN_SPLIT_CHUNKS
    `chunks`, else the largest power of two that keeps the programs in flight within 4 per SM and every
    segment at least MIN_SEGMENT_CHUNKS long."""
    if pairs * SWEEP_PROGRAMS >= sms or chunks < MIN_SPLIT_CHUNKS:
        return 1
    n = 1
    while 2 * n * pairs * SWEEP_PROGRAMS <= 4 * sms and chunks // (2 * n) >= MIN_SEGMENT_CHUNKS:
        n *= 2
    return n


@dataclasses.dataclass(frozen=True)
class _Static:
    scale: float
    chunk_size: int
    tuning: Tuning
    batch: tuple[int, int] | None = None  # (B, T) of a fixed-length batch, whose bounds are known when traced
    initial_state: bool = False  # whether one was given (else h0 = 0, which 16-bit states hold exactly)


def chunk_gla(q, k, v, g=None, gk=None, *, scale=None, initial_state=None, cu_seqlens=None, chunk_size=64,
              implementation=None, tuning: Tuning | None = None):
    """Chunked gated linear attention: the recurrence of `workbench.recurrent`, chunk by chunk.

    Args:
      q, k: `[B, T, H, K]`; v: `[B, T, H, V]` (float32, bfloat16 or float16, one dtype).
      g: `[B, T, H]`, gk: `[B, T, H, K]`: natural-log decays (≤ 0), optional.
      scale: multiplies q; None means `K ** -0.5`.
      initial_state: `[N, H, K, V]` (N = B, or the number of sequences with `cu_seqlens`).
      cu_seqlens: int32 `[N+1]` bounds of packed sequences (then B must be 1); may be traced (any
        values: the bounds rule of API.md applies).
      chunk_size: 16, 32 or 64 rows per chunk; T need not be a multiple of it.
      implementation: None/"triton" (Triton kernels; interpreter on CPU) or "reference" (JAX).
      tuning: static kernel choices (`Tuning`), for tests and bisecting.

    Returns:
      `(o, final_state)`: o `[B, T, H, V]` in the dtype of v; final_state `[N, H, K, V]` float32.

    Gradients flow to q, k, v, g, gk and initial_state from both outputs.

    Example:
      >>> import jax, jax.numpy as jnp, workbench
      >>> q, k, v = (jax.random.normal(jax.random.key(i), (1, 40, 2, 16)) for i in range(3))
      >>> gk = -jax.nn.softplus(jax.random.normal(jax.random.key(3), (1, 40, 2, 16)))
      >>> o, state = workbench.chunk_gla(q, k, v, gk=gk, chunk_size=16)
      >>> o.shape, state.shape
      ((1, 40, 2, 16), (1, 2, 16, 16))
    """
    impl = _checks.implementation_name(implementation)
    _checks.linear_attention(q, k, v, g, None, gk, None, scale, initial_state, cu_seqlens, impl)
    if type(chunk_size) is not int or chunk_size not in CHUNK_SIZES:
        raise ValueError(f"chunk_size: expected one of {CHUNK_SIZES}, got {chunk_size!r} (q {tuple(q.shape)})")
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    body = functools.partial(_chunk_gla, scale=scale, chunk_size=chunk_size, impl=impl, tuning=tuning or Tuning())
    arrays = dict(q=q, k=k, v=v, g=g, gk=gk, initial_state=initial_state, cu_seqlens=cu_seqlens)
    return per_device("chunk_gla", body, arrays, linear_dims(cu_seqlens is not None),
                      linear_out_dims(cu_seqlens is not None), hint=SEQUENCE_HINT, kernels=impl != "reference")


def _chunk_gla(q, k, v, g, gk, initial_state, cu_seqlens, *, scale, chunk_size, impl, tuning):
    """`chunk_gla` on one device's arrays (all of them, or its shard of the batch and heads)."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    N = B if cu_seqlens is None else cu_seqlens.shape[0] - 1
    # Every kernel sees packed sequences; a fixed-length batch is cu_seqlens = arange(B+1)·T. Traced
    # bounds go through the bounds rule (API.md); rows outside every sequence are zeroed in and out.
    cu, inside = packed_bounds(cu_seqlens, B, T)
    if impl == "reference":
        return chunk_gla_ref(q, k, v, g, gk, scale=scale, initial_state=initial_state,
                             cu_seqlens=None if cu_seqlens is None else cu, chunk_size=chunk_size)
    q, k, v, g, gk = (keep_inside(x, inside) for x in (q, k, v, g, gk))
    pack = lambda x: None if x is None else x.reshape(B * T, *x.shape[2:])  # noqa: E731
    # (gla.1) one per-key log-decay: gk as given when alone, else g broadcast over keys (+ gk) in float32
    a = pack(gk) if g is None else log_decay(pack(g), pack(gk), (B * T, H, K), jnp.float32)
    h0 = (vary_like(jnp.zeros((N, H, K, V), jnp.float32), q, k, v) if initial_state is None
          else initial_state.astype(jnp.float32))
    static = _Static(scale=scale, chunk_size=chunk_size, tuning=tuning, batch=(B, T) if cu_seqlens is None else None,
                     initial_state=initial_state is not None)
    o, ht = _chunk_gla_packed(pack(q), pack(k), pack(v), a, h0, cu, static)
    return keep_inside(o.reshape(B, T, H, V), inside), ht


# ----------------------------------------------------------------------------- kernels


def _dims(q, v):
    """(K, V, BK): the key tile covers all of K, padded to a power of two ≥ 16 (the tl.dot minimum)."""
    K, V = q.shape[-1], v.shape[-1]
    return K, V, max(16, triton.next_power_of_2(K))


def _f32_dot(q) -> str:
    """Precision of products the reference keeps in float32: full float32 for float32 inputs, tf32
    otherwise (its rounding is a quarter of the bfloat16 rounding that follows)."""
    return "ieee" if q.dtype == jnp.float32 else "tf32"


def _b_local(a) -> bool:
    """Whether the kernels form b (gla.3) from the gate where they read it, each sweep (forward and backward)
    storing only each chunk's b_L: without a gate or with a 16-bit one, whose prefix sums every kernel forms
    exactly rounded (products with ones, NOTES.md "Where b is formed"). A float32 gate's b is summed by scans,
    whose last bits depend on the tile's layout: each sweep stores it for the readers after it."""
    return a is None or a.dtype != jnp.float32


class _Unfixed(typing.NamedTuple):
    """The two-level pass's states before the fix-up (gla.13), for a reader that fixes them where it reads them:
    the segments' local states [NS, H, K, V] float32, their entering states [N·NSEG, H, K, V], the decay D_c by slot
    [NS, H, K] and each slot's segment row [NS] (`fixup_kernels.fixed_state`)."""
    local: jax.Array
    starts: jax.Array
    dec: jax.Array
    seg: jax.Array


def _for_reader(states):
    """`_state_sweep`'s states as `chunk_o_kernel` and `chunk_dv_kernel` take them: (the states array, the FIXUP
    arrays (entering states, D_c, segment rows) or Nones, whether the reader fixes the states itself)."""
    if isinstance(states, _Unfixed):
        return states.local, (states.starts, states.dec, states.seg), True
    return states, (None, None, None), False


def _segments(static: _Static, N: int, H: int, TT: int) -> int:
    """Segments per sequence of the state sweeps: `Tuning.segments`, or `state_segments`' choice."""
    if static.tuning.segments is not None:
        return static.tuning.segments
    return state_segments(N * H, triton.cdiv(TT, static.chunk_size), sm_count())


def _state_sweep(x, y, a, init, cu, bounds, static: _Static, tune, *, reverse: bool, states_dtype=jnp.float32,
                 fix: bool = True):
    """(final, states [NS, H, K, V], b) of the forward state sweep (gla.4: x, y = k, v; init = h0; states at
    chunk starts) or, with `reverse`, of the backward one (gla.7: x, y = q, do; init = dH at the end; states =
    dH at chunk ends): one sweep per sequence, or the two-level pass of (gla.13). The states are stored in
    `states_dtype` (rounded from the float32 running state), the final state in float32; without `fix` the
    two-level pass returns them before its fix-up (`_Unfixed`), for their reader (the o or the dv kernel) to fix.
    The sweep forms the gate's cumulative sums b (gla.3) from the log-decay a as it goes and returns them, float32,
    zeros without a gate: every row [TT, H, K], or where `_b_local` only b_L by chunk slot [NS, H, K]."""
    TT, H, _ = x.shape
    K, V, BK = _dims(x, y)
    N = cu.shape[0] - 1
    NS = bounds.shape[0]
    f32 = jnp.float32
    state = lambda n, dtype=f32: jax.ShapeDtypeStruct((n, H, K, V), dtype)  # noqa: E731
    local = _b_local(a)
    b = jax.ShapeDtypeStruct((NS if local else TT, H, K), f32)
    n_seg = _segments(static, N, H, TT)
    common = dict(H=H, K=K, V=V, BT=static.chunk_size, F32_DOT=_f32_dot(x))
    sweep_grid = lambda meta: (triton.cdiv(V, meta["BV"]), N * H * n_seg, triton.cdiv(K, meta["BK"]))  # noqa: E731
    if n_seg == 1:
        kernel, name = ((kernels.chunk_dh_kernel, "workbench_chunk_gla_dh") if reverse
                        else (kernels.chunk_h_kernel, "workbench_chunk_gla_h"))
        extra = dict(scale=static.scale) if reverse else {}
        return triton_call(x, y, a, init, cu, kernel=kernel, out_shape=[state(N), state(NS, states_dtype), b],
                           grid=sweep_grid, tune_inputs=tune, name=name, B_LOCAL=local, **extra, **common)
    # the segments' local states in float32: the fix-up adds the entering states' part before they are rounded
    local_states, ends, decay, b, dec, seg = triton_call(
        x, y, a, cu, kernel=kernels.chunk_segment_sweep_kernel,
        out_shape=[state(NS), state(N * n_seg), jax.ShapeDtypeStruct((N * n_seg, H, K), f32), b,
                   jax.ShapeDtypeStruct((NS, H, K), f32), jax.ShapeDtypeStruct((NS,), jnp.int32)],
        grid=sweep_grid, tune_inputs=tune, name="workbench_chunk_gla_segment_sweep",
        scale=static.scale if reverse else 1.0, NSEG=n_seg, REVERSE=reverse, B_LOCAL=local, **common)
    BV = 32
    starts, final = triton_call(
        ends, decay, init, kernel=kernels.chunk_state_pass_kernel, out_shape=[state(N * n_seg), state(N)],
        grid=(triton.cdiv(V, BV), N * H), name="workbench_chunk_gla_state_pass", H=H, K=K, V=V, BK=BK, BV=BV,
        NSEG=n_seg, REVERSE=reverse, MATRIX=False)
    if not fix:
        return final, _Unfixed(local_states, starts, dec, seg), b
    BK = min(BK, 64)
    # chunks of the longest sequence there can be: the batch's T, or with packed sequences every row
    longest = max(1, triton.cdiv(static.batch[1] if static.batch is not None else TT, static.chunk_size))
    states = triton_call(
        dec, cu, starts, local_states, kernel=fixup_kernels.chunk_state_fixup_kernel,
        out_shape=state(NS, states_dtype), input_output_aliases={3: 0} if states_dtype == f32 else {},
        grid=(triton.cdiv(V, BV) * triton.cdiv(triton.cdiv(longest, n_seg), FIXUP_CHUNKS), N * H * n_seg,
              triton.cdiv(K, BK)),
        name="workbench_chunk_gla_state_fixup", H=H, K=K, V=V, BT=static.chunk_size, BK=BK, BV=BV, NSEG=n_seg,
        CB=FIXUP_CHUNKS)
    return final, states, b


def flagged_slots_per_program(NS: int, H: int) -> int:
    """Chunk slots per program of the kernels that work only on chunks that are not direct (gla.12),
    `chunk_a_kernel` and `chunk_dqk_intra_kernel`: a power of two from 4 to 32, the largest that still gives
    two programs per multiprocessor. Each program reads its slots' flags in one load and returns where none is
    set (with the usual gates, every program): their registers, held for the marked chunks' sub-chunk work,
    fit two programs per multiprocessor, so four slots a program (the target: 2,096 programs) took eight
    waves of that load and return (NOTES.md, "The flagged chunks"). Fewer slots at small shapes keep every
    multiprocessor busy where every chunk is marked (strong gates), the marked chunks of a program being
    worked through one after the other."""
    per = NS * H / (2 * sm_count())
    cb = 4
    while cb < 32 and 2 * cb <= per:
        cb *= 2
    return cb


def _a(q, k, a, b, bounds, static: _Static):
    """The intra-chunk matrix A (gla.5, gla.11) of the chunks that are not direct or nearly (gla.12), in the
    inputs' dtype [TT, H, BT]; other chunks' rows are left unwritten (the o and dv kernels form them). b: the
    forward sweep's (`_state_sweep`)."""
    TT, H, _ = q.shape
    K, _, BK = _dims(q, q)
    BT = static.chunk_size
    NS = bounds.shape[0]
    local = _b_local(a)
    CB = flagged_slots_per_program(NS, H)
    A, _ = triton_call(
        q, k, a, b, bounds, kernel=kernels.chunk_a_kernel,
        out_shape=[jax.ShapeDtypeStruct((TT, H, BT), q.dtype),
                   jax.ShapeDtypeStruct((TT, H, K) if local else (1,), jnp.float32)],  # scratch: written, not read
        grid=(triton.cdiv(NS, CB), H), name="workbench_chunk_gla_a", num_warps=4, num_stages=1, NS=NS,
        scale=static.scale, F32_DOT=_f32_dot(q), H=H, K=K, BT=BT, BK=BK, CB=CB, B_LOCAL=local)
    return A


def _forward(q, k, v, a, h0, cu, static: _Static, save: bool):
    """(o, final_state, residuals or None): residuals (hs, A) only when a backward will follow. The gate's
    cumulative sums b are not kept (float32, twice a bfloat16 input's bytes): the backward forms them again; of a
    16-bit gate the forward's kernels form them where they read them (`_b_local`)."""
    TT, H, _ = q.shape
    K, V, BK = _dims(q, v)
    BT = static.chunk_size
    N = cu.shape[0] - 1
    bounds = slot_table(cu, TT, BT, static.batch)  # [NS, 2] int32; a constant for a fixed batch
    # what the GPU autotuner may time configs on (docs/autotune.md)
    tune = stand_ins(N, TT, BT, segments=_segments(static, N, H, TT))
    NS = bounds.shape[0]
    # (gla.3, gla.4, gla.13) The o kernel and dq's state term round the states to v's dtype before their products,
    # so they are stored so, for a backward too (NOTES.md, "States stored as the o kernel reads them"); the
    # two-level pass's states are fixed by the o kernel, which stores them only for a backward
    ht, hs, b = _state_sweep(k, v, a, h0, cu, bounds, static, tune, reverse=False, states_dtype=v.dtype, fix=False)
    A = _a(q, k, a, b, bounds, static)
    hs, fixup, unfixed = _for_reader(hs)
    o, hs_out = triton_call(
        q, k, v, a, b, hs, A, bounds, *fixup, kernel=kernels.chunk_o_kernel,
        out_shape=[jax.ShapeDtypeStruct(v.shape, v.dtype),
                   jax.ShapeDtypeStruct((NS, H, K, V) if unfixed and save else (1,), v.dtype)],
        grid=lambda meta: (triton.cdiv(V, meta["BV"]), NS, H), tune_inputs=tune, name="workbench_chunk_gla_o",
        scale=static.scale, V=V, F32_DOT=_f32_dot(q), H=H, K=K, BT=BT, BK=BK, B_LOCAL=_b_local(a),
        STORE_H=unfixed and save)
    return o, ht, ((hs_out if unfixed else hs, A) if save else None)


def _backward(q, k, v, a, h0, residuals, cu, do, dht, static: _Static):
    """Gradients of (q, k, v, a, h0); da in a's dtype (float32 without a gate), stored so by the dqkg kernel's
    rounding store, not by a conversion after it — except with an initial state and a 16-bit gate: then da
    leaves the kernel in float32, takes h0 unrounded in its state term at each sequence's first chunk
    (`_bounds.entering_state_term`) and is rounded after. residuals: the forward's (hs, A), or None to form
    them again (`Tuning(residuals="recompute")`)."""
    TT, H, _ = q.shape
    K, V, BK = _dims(q, v)
    BT = static.chunk_size
    N = cu.shape[0] - 1
    bounds = slot_table(cu, TT, BT, static.batch)  # [NS, 2] int32; a constant for a fixed batch
    # what the GPU autotuner may time configs on (docs/autotune.md)
    tune = stand_ins(N, TT, BT, segments=_segments(static, N, H, TT))
    NS = bounds.shape[0]
    f32 = jnp.float32
    if residuals is None:
        _, hs, b_forward = _state_sweep(k, v, a, h0, cu, bounds, static, tune, reverse=False, states_dtype=v.dtype)
        A = _a(q, k, a, b_forward, bounds, static)
    else:
        hs, A = residuals
    local = _b_local(a)
    common = dict(H=H, K=K, V=V, BT=BT, F32_DOT=_f32_dot(q), B_LOCAL=local)
    # b again (or b_L), from this sweep: the kernels below decide which chunks are direct from it, A's margin
    # covers where that differs from the forward's b (gla.12, `kernels._split_slots`)
    # (gla.13) the two-level pass's dH is fixed by the dv kernel, which stores it back in place for dqkg
    dh0, dhs, b = _state_sweep(q, do, a, dht, cu, bounds, static, tune, reverse=True, fix=False)
    dhs, fixup, unfixed = _for_reader(dhs)
    dv, dhs_out = triton_call(
        q, k, do, a, b, A, dhs, bounds, *fixup, kernel=kernels.chunk_dv_kernel,
        out_shape=[jax.ShapeDtypeStruct(v.shape, v.dtype),
                   jax.ShapeDtypeStruct((NS, H, K, V) if unfixed else (1,), f32)],
        input_output_aliases={6: 1} if unfixed else {}, grid=lambda meta: (triton.cdiv(V, meta["BV"]), NS, H),
        tune_inputs=tune, name="workbench_chunk_gla_dv", scale=static.scale, BK=BK, **common)
    dhs = dhs_out if unfixed else dhs
    BV = max(16, triton.next_power_of_2(V))
    CB = flagged_slots_per_program(NS, H)
    dq_s, dk_s, _ = triton_call(
        q, k, v, do, a, b, bounds, kernel=kernels.chunk_dqk_intra_kernel,
        out_shape=[jax.ShapeDtypeStruct((TT, H, K), f32)] * 2  # the third: scratch, written, not read
        + [jax.ShapeDtypeStruct((TT, H, K) if local else (1,), f32)], grid=(triton.cdiv(NS, CB), H),
        name="workbench_chunk_gla_dqk_intra", num_warps=4, num_stages=1, NS=NS, CB=CB, scale=static.scale, BK=BK,
        BV=BV, **common)
    restore = static.initial_state and a is not None and TT > 0  # without a gate da is not a gradient
    dq, dk, da = triton_call(
        q, k, v, do, a, b, hs, dhs, dq_s, dk_s, bounds, kernel=kernels.chunk_dqkg_kernel,
        out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct(k.shape, k.dtype),
                   jax.ShapeDtypeStruct((TT, H, K), f32 if a is None or restore else a.dtype)],
        grid=lambda meta: (triton.cdiv(K, meta["BK"]), NS, H), tune_inputs=tune, name="workbench_chunk_gla_dqkg",
        scale=static.scale, BV=BV, **common)
    if restore:
        rows, valid = first_chunk_rows(cu, BT)
        b_first = jnp.sum(jnp.where(valid[..., None, None], a[jnp.minimum(rows, TT - 1)].astype(f32), 0.0), axis=1)
        da = entering_state_term(da, h0, hs, dhs, b_first, cu, BT).astype(a.dtype)
    return dq, dk, dv, da, dh0


# ----------------------------------------------------------------------------- custom VJP


def _reference_packed(q, k, v, a, h0, cu, static: _Static):
    return chunked_packed(q, k, v, a, h0, cu, scale=static.scale, chunk_size=static.chunk_size, storage=q.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(6,))
def _chunk_gla_packed(q, k, v, a, h0, cu, static: _Static):
    o, ht, _ = _forward(q, k, v, a, h0, cu, static, save=False)
    return o, ht


def _chunk_gla_packed_fwd(q, k, v, a, h0, cu, static: _Static):
    o, ht, residuals = _forward(q, k, v, a, h0, cu, static, save=static.tuning.residuals == "keep")
    return (o, ht), (q, k, v, a, h0, cu, residuals)


def _chunk_gla_packed_bwd(static: _Static, residuals, cotangents):
    q, k, v, a, h0, cu, saved = residuals
    do, dht = cotangents
    if static.tuning.backward == "reference":
        _, vjp = jax.vjp(lambda q, k, v, a, h0: _reference_packed(q, k, v, a, h0, cu, static), q, k, v, a, h0)
        return summed_grads((*vjp((do, dht)), None), (q, k, v, a, h0))
    dq, dk, dv, da, dh0 = _backward(q, k, v, a, h0, saved, cu, do.astype(v.dtype), dht.astype(jnp.float32), static)
    return summed_grads((dq, dk, dv, da if a is not None else None, dh0, None), (q, k, v, a, h0))


_chunk_gla_packed.defvjp(_chunk_gla_packed_fwd, _chunk_gla_packed_bwd)

"""Kimi Delta Attention: `workbench.chunk_kda` and `workbench.recurrent_kda`.

The gated delta rule with a per-key decay g `[B, T, H, K]` and a write strength β `[B, T, H]`:

    S ← diag(exp g_t) S,   S ← S + β_t k_t (v_t − Sᵀ k_t)ᵀ,   o_t = Sᵀ (scale · q_t).

`recurrent_kda` runs it token by token; `chunk_kda` chunk by chunk, in the WY representation inside
each chunk, with a backward that fuses the WY backward with the dq/dk/dg computation. Triton
kernels by stage (`forward_kernels.py`, `sweep_kernels.py`, `backward_kernels.py`, `recurrent_kernels.py`,
shared steps in `steps.py`), the pure-JAX references (`reference.py`) and the derivation (`NOTES.md`).
This module is the glue: validation, packing, the custom VJPs.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Literal

import jax
import jax.numpy as jnp
import triton

from .. import _checks
from .._bounds import entering_state_term, first_chunk_rows, keep_inside, packed_bounds, slot_table, stand_ins
from .._sharding import SEQUENCE_HINT, linear_dims, linear_out_dims, per_device, summed_grads, vary_like
from ..launch import sm_count, triton_call
from .. import tl_chunked
from . import backward_kernels, forward_kernels, recurrent_kernels, steps, sweep_kernels
from .reference import chunk_kda_ref, chunked_packed, recurrent_kda_ref

__all__ = ["chunk_kda", "recurrent_kda", "Tuning", "CHUNK_SIZES", "state_segments"]

CHUNK_SIZES = (16, 32, 64)

# How the fused backward reads A and uses it in the three products the seed's review disputes
# (NOTES.md, "The review question"): (load through the transposed pointer, wrap in tl.trans).
# The tile must act as Aᵀ, so exactly one of the two is right.
WY_VARIANTS = {
    "transposed_pointer": (True, False),  # the seed's kernel: the pointer gives Aᵀ, used as is (default)
    "transposed_pointer+trans": (True, True),  # the review's tl.trans added to the seed's pointer
    "natural_pointer+trans": (False, True),  # the review's pointer and its tl.trans together
    "natural_pointer": (False, False),  # the review's pointer alone
}


@dataclasses.dataclass(frozen=True)
class Tuning:
    """Static choices of the Triton path that do not change the result.

    backward: "triton" runs the backward kernels; "reference" runs `jax.vjp` of the reference
        instead (on the same packed inputs), so the forward kernels can be tested alone and a wrong
        gradient bisected.
    fused_backward: (chunk_kda) True runs the WY backward and the state parts of dq/dk/dg in one
        kernel; False in two, dw passing through memory (for timing the fusion).
    whole_chunk: (chunk_kda) True forms L and Aqk of a chunk whose log-decays span at most
        `steps.WHOLE_RANGE` with two whole-chunk products, and their backward with four (NOTES.md,
        kda.17); False always sub-chunk by sub-chunk (for testing that path on mild gates, and timing).
    whole_in_fused: (chunk_kda) with `fused_backward` and `whole_chunk`, True forms the intra-chunk parts of a
        chunk whose every key column spans at most `steps.WHOLE_RANGE` in the fused backward kernel, after its
        state and WY parts, from what it just stored (the intra kernel then skips that chunk); False in the
        intra kernel, the state and WY parts passing through memory (for timing). Without an initial state
        only (its term joins dg between the two kernels).
    fused_forward: (chunk_kda) True runs everything before the state sweep (b, A, Aqk, w, u, k̂, q̄) in one
        kernel per chunk, each part reading what the one before stored while it is still in cache; False in
        three (the cumsum, intra and wu kernels; for timing the fusion).
    fused_output: (chunk_kda) with more than one segment, True forms the output in the forward re-sweep,
        chunk by chunk from the state and δ it holds (which it then stores only for a backward); False
        stores them for the output kernel (for timing the fusion). One sweep per sequence always uses the
        output kernel.
    segments: (chunk_kda) the two-level state pass (NOTES.md, kda.18): both state sweeps cut every sequence
        into this many segments, each swept from zero beside the identity, the true entering states
        carried across them, then each swept again from its own; 1 is one sweep per sequence; None
        (default): `state_segments` from the sequences × heads in flight and the GPU's SM count, and one
        sweep for K > 128 (more than 1 there is a ValueError: NOTES.md, "Shared memory at K = 256").
    residuals: (chunk_kda) what the forward keeps for the backward. "states" (default): A, Aqk and the
        chunk-start states (in the inputs' dtype), the backward forming the gate's cumulative sums b, w and δ
        again from them and the inputs (one kernel that streams each chunk once) (1.5× the inputs and output at
        B1 T64k H16 K = V = 128 bf16; forward+backward about 4 % slower than "keep" on an H200); "keep": also w
        and δ, the backward forming b alone again (one cumsum kernel) (1.9×);
        "recompute": A and Aqk only (the intra-chunk solve, the forward's costliest part) and, with the
        two-level pass, each segment's entering state, the backward forming b, w and u again (the cumsum and WY
        kernels) and sweeping each segment's states and δ again from its entering state (1.1×; NOTES.md,
        "Memory"). The same gradients, bit for bit where the kernels are deterministic.
    """

    backward: Literal["triton", "reference"] = "triton"
    fused_backward: bool = True
    fused_forward: bool = True
    fused_output: bool = True
    whole_chunk: bool = True
    whole_in_fused: bool = True
    segments: int | None = None
    residuals: Literal["states", "keep", "recompute"] = "states"

    def __post_init__(self):
        if self.segments is not None and (type(self.segments) is not int or self.segments < 1):
            raise ValueError(f"Tuning.segments: expected None or an int ≥ 1, got {self.segments!r}")
        if self.residuals not in ("states", "keep", "recompute"):
            raise ValueError(f"Tuning.residuals: expected 'states', 'keep' or 'recompute', got {self.residuals!r}")


# Measured on an H100 (B = 1, H = 16, K = V = 128, bf16; docs/performance.md): forward 5.33 → 4.49 ms at
# 1024 chunks and 1.42 → 1.33 at 256 with 16 segments (32: slower than 16); 64 chunks: one sweep 0.41 ms,
# 8 segments 0.46. The segment sweep carries a [K, V + K] state: three times a sweep's work per chunk.
SWEEP_PROGRAMS = 4  # V blocks of a state sweep at V = 128 with its 32- or 64-wide blocks
MIN_SPLIT_CHUNKS = 256  # below, one sweep per sequence (64 chunks ran faster as one sweep)
MIN_SEGMENT_CHUNKS = 16
MAX_SEGMENTS = 16


def state_segments(pairs: int, chunks: int, sms: int) -> int:
    """(kda.18) Segments per sequence for both state sweeps: 1 while `pairs` (sequences × heads) keep the
    GPU's `sms` multiprocessors busy or the longest possible sequence has fewer than MIN_SPLIT_CHUNKS
    `chunks`; else the largest power of two up to MAX_SEGMENTS that leaves every segment at least
    MIN_SEGMENT_CHUNKS long."""
    if pairs * SWEEP_PROGRAMS >= sms or chunks < MIN_SPLIT_CHUNKS:
        return 1
    n = 1
    while 2 * n <= MAX_SEGMENTS and chunks // (2 * n) >= MIN_SEGMENT_CHUNKS:
        n *= 2
    return n


@dataclasses.dataclass(frozen=True)
class _Static:
    scale: float
    chunk_size: int
    tuning: Tuning
    wy_variant: str = "transposed_pointer"  # internal: NOTES.md, "The review question"
    batch: tuple[int, int] | None = None  # (B, T) of a fixed-length batch, whose bounds are known when traced
    initial_state: bool = False  # whether one was given (else h0 = 0, which 16-bit states hold exactly)


def _validate(q, k, v, g, beta, scale, initial_state, cu_seqlens, impl) -> int:
    """The conventions of `workbench.recurrent` for q, k, v, scale, initial_state and cu_seqlens; then g and β."""
    N = _checks.linear_attention(q, k, v, None, None, None, None, scale, initial_state, cu_seqlens, impl)
    B, T, H, K = q.shape
    shapes = f"from q {tuple(q.shape)}"
    dtypes = _checks.float_dtypes(impl)
    _checks.array("g", g, 4, dtypes, "[B, T, H, K]")
    _checks.shape("g", g, (B, T, H, K), "[B, T, H, K]", shapes)
    _checks.array("beta", beta, 3, dtypes, "[B, T, H]")
    _checks.shape("beta", beta, (B, T, H), "[B, T, H]", shapes)
    return N


def _chunk_size(chunk_size, q):
    if type(chunk_size) is not int or chunk_size not in CHUNK_SIZES:
        raise ValueError(f"chunk_size: expected one of {CHUNK_SIZES}, got {chunk_size!r} (q {tuple(q.shape)})")


def _packed(q, k, v, g, beta, initial_state, cu, inside):
    """(rows [B·T, H, ·] of every input, zero outside every sequence; h0 [N, H, K, V] float32)."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    N = cu.shape[0] - 1
    h0 = (vary_like(jnp.zeros((N, H, K, V), jnp.float32), q, k, v) if initial_state is None
          else initial_state.astype(jnp.float32))
    rows = [keep_inside(x, inside).reshape(B * T, *x.shape[2:]) for x in (q, k, v, g, beta)]
    return rows, h0


def chunk_kda(q, k, v, g, beta, *, scale=None, initial_state=None, cu_seqlens=None, chunk_size=64,
              implementation=None, tuning: Tuning | None = None):
    """Kimi Delta Attention, chunk by chunk (the WY representation inside each chunk).

    Args:
      q, k: `[B, T, H, K]`; v: `[B, T, H, V]` (float32, bfloat16 or float16, one dtype).
      g: `[B, T, H, K]` natural-log decays (≤ 0); beta: `[B, T, H]`, usually in (0, 1).
      scale: multiplies q; None means `K ** -0.5`.
      initial_state: `[N, H, K, V]` (N = B, or the number of sequences with `cu_seqlens`).
      cu_seqlens: int32 `[N+1]` bounds of packed sequences (then B must be 1); may be traced (any
        values: the bounds rule of API.md applies).
      chunk_size: 16, 32 or 64 rows per chunk; T need not be a multiple of it.
      implementation: None/"triton" (Triton kernels; interpreter on CPU) or "reference" (JAX).
      tuning: static kernel choices (`Tuning`), for tests, bisecting and timing.

    Returns:
      `(o, final_state)`: o `[B, T, H, V]` in the dtype of v; final_state `[N, H, K, V]` float32.

    Gradients flow to q, k, v, g, beta and initial_state from both outputs.

    Example:
      >>> import jax, jax.numpy as jnp, workbench
      >>> q, k, v = (jax.random.normal(jax.random.key(i), (1, 40, 2, 16)) for i in range(3))
      >>> k = k / jnp.linalg.norm(k, axis=-1, keepdims=True)
      >>> g = -jax.nn.softplus(jax.random.normal(jax.random.key(3), (1, 40, 2, 16)))
      >>> beta = jax.nn.sigmoid(jax.random.normal(jax.random.key(4), (1, 40, 2)))
      >>> o, state = workbench.chunk_kda(q, k, v, g, beta, chunk_size=16)
      >>> o.shape, state.shape
      ((1, 40, 2, 16), (1, 2, 16, 16))
    """
    impl = _checks.implementation_name(implementation)
    _validate(q, k, v, g, beta, scale, initial_state, cu_seqlens, impl)
    _chunk_size(chunk_size, q)
    _segments(tuning, q, impl)
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    static = _Static(scale=scale, chunk_size=chunk_size, tuning=tuning or Tuning())
    body = functools.partial(_chunk_kda, static=static, impl=impl)
    return per_device("chunk_kda", body, dict(q=q, k=k, v=v, g=g, beta=beta, initial_state=initial_state,
                                              cu_seqlens=cu_seqlens),
                      linear_dims(cu_seqlens is not None), linear_out_dims(cu_seqlens is not None),
                      hint=SEQUENCE_HINT, kernels=impl != "reference")


def _segments(tuning: Tuning | None, q, impl: str) -> None:
    """(kda.18) The two-level state pass needs K ≤ WIDE_KEYS: its state pass multiplies [K, K] float32
    transfer matrices, which at K = 256 ask 576 KiB of shared memory (a GPU block has 227 KiB)."""
    n = None if tuning is None else tuning.segments
    if impl == "triton" and n is not None and n > 1 and q.shape[-1] > tl_chunked.WIDE_KEYS:
        raise ValueError(f"tuning: Tuning.segments={n} (the two-level state pass) needs K ≤ {tl_chunked.WIDE_KEYS}: "
                         f"its [K, K] float32 transfer matrices outgrow a GPU's shared memory; got q "
                         f"{tuple(q.shape)} (K = {q.shape[-1]}); use segments=None or 1 (one sweep per sequence)")


def _chunk_kda(q, k, v, g, beta, initial_state, cu_seqlens, *, static: _Static, impl: str = "triton"):
    """`chunk_kda` on one device's arrays (all of them, or its shard of the batch and heads)."""
    B, T, H, _ = q.shape
    cu, inside = packed_bounds(cu_seqlens, B, T)  # traced bounds: the bounds rule (API.md)
    if cu_seqlens is None:
        static = dataclasses.replace(static, batch=(B, T))
    static = dataclasses.replace(static, initial_state=initial_state is not None)
    if impl == "reference":
        return chunk_kda_ref(q, k, v, g, beta, scale=static.scale, initial_state=initial_state,
                             cu_seqlens=None if cu_seqlens is None else cu, chunk_size=static.chunk_size)
    rows, h0 = _packed(q, k, v, g, beta, initial_state, cu, inside)
    o, ht = _chunk_kda_packed(*rows, h0, cu, static)
    return keep_inside(o.reshape(B, T, H, v.shape[-1]), inside), ht


def chunk_kda_wy_variant(q, k, v, g, beta, *, variant: str, scale=None, initial_state=None, cu_seqlens=None,
                         chunk_size=64):
    """`chunk_kda` (Triton) with the fused backward reading A as `variant` of `WY_VARIANTS`: the
    review question's four ways, two of them wrong. Internal: for its test and notebook only."""
    if variant not in WY_VARIANTS:
        raise ValueError(f"variant: expected one of {sorted(WY_VARIANTS)}, got {variant!r}")
    _validate(q, k, v, g, beta, scale, initial_state, cu_seqlens, "triton")
    _chunk_size(chunk_size, q)
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    return _chunk_kda(q, k, v, g, beta, initial_state, cu_seqlens,
                      static=_Static(scale=scale, chunk_size=chunk_size, tuning=Tuning(), wy_variant=variant))


# ----------------------------------------------------------------------------- chunked kernels


def _dims(q, v):
    """(K, V, BK): the key tile covers all of K, padded to a power of two ≥ 16 (the tl.dot minimum)."""
    K, V = q.shape[-1], v.shape[-1]
    return K, V, max(16, triton.next_power_of_2(K))


def _f32_dot(q) -> str:
    """Precision of products the reference keeps in float32: full float32 for float32 inputs, tf32
    otherwise (its rounding is a quarter of the bfloat16 rounding that follows)."""
    return "ieee" if q.dtype == jnp.float32 else "tf32"


def _inv_dot(q) -> str:
    """Precision of A's inversion products (kda.5) and of dL's (kda.7): full float32 for float32 inputs; three
    tf32 passes (tf32x3, float32 to about 1e-6 relative, on tensor cores) for bfloat16 inputs, whose A is rounded
    to bfloat16 (2^-9) before any product uses it, and whose dL enters tf32 products."""
    return "ieee" if q.dtype == jnp.float32 else "tf32x3"


def _whole_span(static: _Static) -> float:
    """(kda.17) The chunk span up to which the intra kernels take whole-chunk products; −1: never."""
    return steps.WHOLE_RANGE if static.tuning.whole_chunk else -1.0


def _state_sweep(q, k, khat, w, u, do, b, Aqk, init, cu, bounds, static: _Static, tune, *, reverse: bool,
                 states_dtype, qbar=None, save: bool = True):
    """(final, states [NS, H, K, V], δ [TT, H, V], o, starts) of the forward sweep (kda.4: from h0, hs at chunk
    starts, δ) or, with `reverse`, of the backward one (kda.9: from dH at the end, dH at chunk ends, dδ): one
    sweep per sequence, or the two-level pass of (kda.18) with `static.tuning.segments` segments. o is None
    unless the forward's re-sweep formed the output (`Tuning.fused_output`, given `qbar`); then states and δ
    are None unless `save`. starts: the two-level pass's true entering state of every segment, float32
    [N · NSEG, H, K, V] (what `_resweep` sweeps the states and δ again from); None for one sweep."""
    values = do if reverse else u
    TT, H, _ = w.shape
    K, V, BK = _dims(w, values)
    N = cu.shape[0] - 1
    NS = bounds.shape[0]
    f32 = jnp.float32
    state = lambda n, dt=f32, cols=V: jax.ShapeDtypeStruct((n, H, K, cols), dt)  # noqa: E731
    rows_v = jax.ShapeDtypeStruct((TT, H, V), values.dtype)
    n_seg = static.tuning.segments
    if n_seg is None:  # one sweep for wide keys: the pass's [K, K] transfer matrices outgrow shared memory
        n_seg = 1 if K > tl_chunked.WIDE_KEYS else state_segments(N * H, triton.cdiv(TT, static.chunk_size),
                                                                     sm_count())
    common = dict(H=H, K=K, V=V, BT=static.chunk_size, BK=BK, F32_DOT=_f32_dot(w))
    if n_seg == 1:
        grid = lambda meta: (triton.cdiv(V, meta["BV"]), N * H)  # noqa: E731
        if reverse:
            return (*triton_call(q, k, w, b, Aqk, do, init, cu, bounds, kernel=sweep_kernels.chunk_kda_dh_kernel,
                                 out_shape=[state(N), state(NS), rows_v], grid=grid, tune_inputs=tune,
                                 name="workbench_kda_dh", scale=static.scale, **common), None, None)
        return (*triton_call(khat, w, u, b, init, cu, bounds, kernel=sweep_kernels.chunk_kda_h_kernel,
                             out_shape=[state(N), state(NS, states_dtype), rows_v], grid=grid, tune_inputs=tune,
                             name="workbench_kda_h", **common), None, None)
    segment = dict(scale=static.scale, NSEG=n_seg, REVERSE=reverse, **common)
    A_sweep = Aqk if reverse else None  # the forward sweeps read no Aqk (the fused output below does)
    ends, trans = triton_call(
        q, k, khat, w, u, do, b, A_sweep, cu, bounds, kernel=sweep_kernels.chunk_kda_segment_kernel,
        out_shape=[state(N * n_seg), state(N * n_seg, cols=K)],
        grid=lambda meta: (triton.cdiv(V + K, meta["BV"]), N * H * n_seg), tune_inputs=tune,
        name="workbench_kda_segment_sweep", **segment)
    starts, final = triton_call(
        ends, trans, init, kernel=tl_chunked.chunk_state_pass_kernel, out_shape=[state(N * n_seg), state(N)],
        grid=(triton.cdiv(V, 32), N * H), name="workbench_kda_state_pass", H=H, K=K, V=V, BK=BK, BV=32, NSEG=n_seg,
        REVERSE=reverse, MATRIX=True, num_warps=8 if K > 64 else 4)  # at K = 128, 4 spill the [K, K] matrix (NOTES)
    grid = lambda meta: (triton.cdiv(V, meta["BV"]), N * H * n_seg)  # noqa: E731
    if not reverse and qbar is not None and static.tuning.fused_output:
        unused = jax.ShapeDtypeStruct((1,), states_dtype)  # never written: STORE is off
        o, states, delta = triton_call(
            khat, w, u, b, qbar, Aqk, starts, cu, bounds, kernel=sweep_kernels.chunk_kda_resweep_o_kernel,
            out_shape=[rows_v] + ([state(NS, states_dtype), rows_v] if save else [unused, unused]), grid=grid,
            tune_inputs=tune, name="workbench_kda_resweep_o", NSEG=n_seg, STORE=save, **common)
        return (final, states, delta, o, starts) if save else (final, None, None, o, starts)
    states, delta = _resweep(q, k, khat, w, u, do, b, A_sweep, starts, cu, bounds, static, tune, reverse=reverse,
                             states_dtype=states_dtype)
    return final, states, delta, None, starts


def _resweep(q, k, khat, w, u, do, b, Aqk, starts, cu, bounds, static: _Static, tune, *, reverse: bool,
             states_dtype):
    """(states [NS, H, K, V], δ [TT, H, V]) (REVERSE: dH, dδ): every segment of the two-level pass swept again
    from its true entering state in `starts` [N · NSEG, H, K, V] (kda.18's last step), in parallel."""
    values = do if reverse else u
    TT, H, _ = w.shape
    K, V, BK = _dims(w, values)
    N = cu.shape[0] - 1
    n_seg = starts.shape[0] // N
    states = jax.ShapeDtypeStruct((bounds.shape[0], H, K, V), states_dtype)
    return triton_call(
        q, k, khat, w, u, do, b, Aqk, starts, cu, bounds, kernel=sweep_kernels.chunk_kda_resweep_kernel,
        out_shape=[states, jax.ShapeDtypeStruct((TT, H, V), values.dtype)],
        grid=lambda meta: (triton.cdiv(V, meta["BV"]), N * H * n_seg), tune_inputs=tune,
        name="workbench_kda_resweep", scale=static.scale, NSEG=n_seg, REVERSE=reverse, H=H, K=K, V=V,
        BT=static.chunk_size, BK=BK, F32_DOT=_f32_dot(w))


def _forward(q, k, v, g, beta, h0, cu, static: _Static, save: bool = True):
    """(o, final_state, residuals (b, A, Aqk, w, hs, δ), starts). The chunk-start states hs are stored in the
    inputs' dtype, the precision the output's product reads them at; the backward's dg term h ⊙ dH reads the
    same rounded states, but for each sequence's first, whose h0 it restores (`_backward`; NOTES.md, "Memory").
    `save` False keeps nothing for a backward (the fused re-sweep
    then stores neither states nor δ). starts: the two-level pass's segment-entering states (`_state_sweep`),
    None for one sweep per sequence."""
    TT, H, _ = q.shape
    K, V, BK = _dims(q, v)
    BT = static.chunk_size
    N = cu.shape[0] - 1
    bounds = slot_table(cu, TT, BT, static.batch)  # [NS, 2] int32; a constant for a fixed batch
    tune = stand_ins(N, TT, BT)  # what the GPU autotuner may time configs on (docs/autotune.md)
    NS = bounds.shape[0]
    f32 = jnp.float32
    common = dict(H=H, K=K, BT=BT, BK=BK)
    b_shape = jax.ShapeDtypeStruct((TT, H, K), f32)
    A_shapes = [jax.ShapeDtypeStruct((TT, H, BT), f32), jax.ShapeDtypeStruct((TT, H, BT), q.dtype)]
    rows_k = jax.ShapeDtypeStruct(k.shape, k.dtype)
    wu_shapes = [rows_k, jax.ShapeDtypeStruct(v.shape, v.dtype), rows_k, rows_k]  # w, u, q̄, k̂
    intra = dict(scale=static.scale, F32_DOT=_f32_dot(q), WHOLE_SPAN=_whole_span(static), INV_DOT=_inv_dot(q),
                 **common)
    if static.tuning.fused_forward:
        b, A, Aqk, w, u, qbar, khat = triton_call(
            q, k, v, g, beta, bounds, kernel=forward_kernels.chunk_kda_fwd_prep_kernel, out_shape=[b_shape, *A_shapes, *wu_shapes],
            grid=(NS, H), tune_inputs=tune, name="workbench_kda_fwd_prep", V=V, **intra)
    else:
        b = _cumsum(g, bounds, static, tune)
        A, Aqk = triton_call(q, k, b, beta, bounds, kernel=forward_kernels.chunk_kda_intra_kernel, out_shape=A_shapes,
                             grid=(NS, H), tune_inputs=tune, name="workbench_kda_intra", **intra)
        w, u, qbar, khat = _wu(q, k, v, b, beta, A, bounds, static, tune)
    ht, hs, delta, o, starts = _state_sweep(None, None, khat, w, u, None, b, Aqk, h0, cu, bounds, static, tune,
                                            reverse=False, states_dtype=q.dtype, qbar=qbar,
                                            save=save)
    if o is None:
        o = triton_call(qbar, Aqk, delta, hs, bounds, kernel=forward_kernels.chunk_kda_o_kernel,
                        out_shape=jax.ShapeDtypeStruct(v.shape, v.dtype),
                        grid=lambda meta: (triton.cdiv(V, meta["BV"]), NS, H), tune_inputs=tune,
                        name="workbench_kda_o", V=V, F32_DOT=_f32_dot(q), **common)
    return o, ht, (b, A, Aqk, w, hs, delta), starts


def _cumsum(g, bounds, static: _Static, tune):
    """(kda.2) b: the gate's chunk-local cumulative sums, float32."""
    TT, H, K = g.shape
    return triton_call(g, bounds, kernel=tl_chunked.chunk_cumsum_kernel,
                       out_shape=jax.ShapeDtypeStruct((TT, H, K), jnp.float32), grid=(bounds.shape[0], H),
                       tune_inputs=tune, name="workbench_kda_cumsum", H=H, K=K, BT=static.chunk_size,
                       BK=_dims(g, g)[2])


def _wu(q, k, v, b, beta, A, bounds, static: _Static, tune):
    """(w, u, q̄, k̂) of every chunk from its A (the WY vectors and the gate-scaled rows)."""
    TT, H, K = k.shape
    rows_k = jax.ShapeDtypeStruct(k.shape, k.dtype)
    return triton_call(q, k, v, b, beta, A, bounds, kernel=forward_kernels.chunk_kda_wu_kernel,
                       out_shape=[rows_k, jax.ShapeDtypeStruct(v.shape, v.dtype), rows_k, rows_k],
                       grid=(bounds.shape[0], H), tune_inputs=tune, name="workbench_kda_wu", scale=static.scale, H=H,
                       K=K, V=v.shape[-1], BT=static.chunk_size, F32_DOT=_f32_dot(q))


def _recomputed(q, k, v, g, beta, h0, cu, A, Aqk, starts, static: _Static):
    """The residuals of `_forward` (b, A, Aqk, w, hs, δ) formed again from the inputs and the kept A, Aqk and
    segment-entering states (`Tuning.residuals="recompute"`): the cumsum and WY kernels, then the states and δ
    of every segment swept again from its entering state (the two-level pass's last step alone; with one sweep
    per sequence, `starts` None, the whole sweep) — the kernels of the unfused forward, whose results equal the
    fused one's."""
    TT = q.shape[0]
    N = cu.shape[0] - 1
    bounds = slot_table(cu, TT, static.chunk_size, static.batch)
    tune = stand_ins(N, TT, static.chunk_size)
    b = _cumsum(g, bounds, static, tune)
    w, u, _, khat = _wu(q, k, v, b, beta, A, bounds, static, tune)
    if starts is None:
        _, hs, delta, _, _ = _state_sweep(None, None, khat, w, u, None, b, Aqk, h0, cu, bounds, static, tune,
                                          reverse=False, states_dtype=q.dtype)
    else:
        hs, delta = _resweep(None, None, khat, w, u, None, b, None, starts, cu, bounds, static, tune, reverse=False,
                             states_dtype=q.dtype)
    return b, A, Aqk, w, hs, delta


def _backward(q, k, v, g, beta, h0, cu, residuals, do, dht, static: _Static, dg_dtype=jnp.float32):
    """Gradients of (q, k, v, g, beta, h0): dg in `dg_dtype` (g's) and dβ in β's, rounded by the last kernel's
    stores (float32 inside every kernel before them), not by conversions after it. Given an initial state, dg's
    state term at each sequence's first chunk takes h0 unrounded (`_bounds.entering_state_term`). residuals:
    `_forward`'s (b, A, Aqk, w, hs, δ); b None where the forward did not keep it (formed here by the cumsum
    kernel), b, w and δ None where it kept A, Aqk and the states alone (formed here: `_backward_prep`)."""
    b, A, Aqk, w, hs, delta = residuals
    TT, H, _ = q.shape
    K, V, _ = _dims(q, v)
    BT = static.chunk_size
    N = cu.shape[0] - 1
    bounds = slot_table(cu, TT, BT, static.batch)  # [NS, 2] int32; a constant for a fixed batch
    tune = stand_ins(N, TT, BT)  # what the GPU autotuner may time configs on (docs/autotune.md)
    if w is None:
        b, w, delta = _backward_prep(g, k, v, beta, A, hs, bounds, static)
    elif b is None:
        b = _cumsum(g, bounds, static, tune)
    NS = bounds.shape[0]
    f32 = jnp.float32
    rows_k = jax.ShapeDtypeStruct((TT, H, K), f32)
    rows_1 = jax.ShapeDtypeStruct((TT, H), f32)
    matrix = jax.ShapeDtypeStruct((TT, H, BT), f32)
    dv_shape = jax.ShapeDtypeStruct(v.shape, v.dtype)
    common = dict(H=H, K=K, V=V, BT=BT, F32_DOT=_f32_dot(q))
    dh0, dhs, ddelta, _, _ = _state_sweep(q, k, None, w, None, do, b, Aqk, dht, cu, bounds, static, tune,
                                          reverse=True, states_dtype=f32)
    whole_in = (static.tuning.fused_backward and static.tuning.whole_in_fused and _whole_span(static) >= 0
                and not (static.initial_state and TT))
    done_shapes = [jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct(k.shape, k.dtype),
                   jax.ShapeDtypeStruct((TT, H, K), dg_dtype), jax.ShapeDtypeStruct((TT, H), beta.dtype)]
    done = None
    if static.tuning.fused_backward:
        a_t_pointer, trans_a = WY_VARIANTS[static.wy_variant]
        dq_s, dk_s, dv, dg_s, dbeta_s, dAqk, dL, *done = triton_call(
            q, k, v, b, beta, A, delta, ddelta, do, hs, dhs, bounds, kernel=backward_kernels.chunk_kda_bwd_wy_dqkg_fused_kernel,
            out_shape=[rows_k, rows_k, dv_shape, rows_k, rows_1, matrix, matrix,
                       *(done_shapes if whole_in else [jax.ShapeDtypeStruct((1,), f32)] * 4)],
            grid=(NS, H), tune_inputs=tune, name="workbench_kda_bwd_wy_dqkg_fused", scale=static.scale,
            A_T_POINTER=a_t_pointer, TRANS_A=trans_a, WHOLE_IN=whole_in, WHOLE_SPAN=_whole_span(static),
            DL_DOT=_inv_dot(q), **common)
    else:
        dq_s, dk_i, dg_i, dw, dAqk = triton_call(
            q, k, v, b, delta, ddelta, do, hs, dhs, bounds, kernel=backward_kernels.chunk_kda_bwd_inter_kernel,
            out_shape=[rows_k, rows_k, rows_k, rows_k, matrix], grid=(NS, H), tune_inputs=tune,
            name="workbench_kda_bwd_inter", scale=static.scale, **common)
        dk_s, dg_s, dv, dbeta_s, dL = triton_call(
            q, k, v, b, beta, A, ddelta, dw, dk_i, dg_i, bounds, kernel=backward_kernels.chunk_kda_bwd_wy_kernel,
            out_shape=[rows_k, rows_k, dv_shape, rows_1, matrix], grid=(NS, H), tune_inputs=tune,
            name="workbench_kda_bwd_wy", DL_DOT=_inv_dot(q), **common)
    if static.initial_state and TT:
        dg_s = entering_state_term(dg_s, h0, hs, dhs, _first_chunk_b_last(b, cu, BT), cu, BT)
    common.pop("V")
    # with whole_in the intra kernel fills in the chunks the fused kernel left (its outputs are those arrays)
    dq, dk, dg, dbeta = triton_call(
        q, k, b, beta, dAqk, dL, dq_s, dk_s, dg_s, dbeta_s, bounds, *(done if whole_in else [None] * 4),
        kernel=backward_kernels.chunk_kda_bwd_intra_kernel, out_shape=done_shapes,
        input_output_aliases={11 + i: i for i in range(4)} if whole_in else {}, grid=(NS, H), tune_inputs=tune,
        name="workbench_kda_bwd_intra", scale=static.scale, WHOLE_SPAN=_whole_span(static), SKIP_WHOLE=whole_in,
        **common)
    return dq, dk, dv, dg, dbeta, dh0


def _backward_prep(g, k, v, beta, A, hs, bounds, static: _Static):
    """(b, w, δ) formed again from the inputs and the kept A and chunk-start states (`chunk_kda_bwd_prep_kernel`,
    one launch); their values are the forward's (its kernels' products and roundings, NOTES.md "Memory")."""
    TT, H, K = k.shape
    V = v.shape[-1]
    BK = _dims(k, v)[2]
    BKC, BV, num_warps, num_stages = _bwd_prep_config(K, V, k.dtype)
    return triton_call(
        g, k, v, beta, A, hs, bounds, kernel=backward_kernels.chunk_kda_bwd_prep_kernel,
        out_shape=[jax.ShapeDtypeStruct((TT, H, K), jnp.float32), jax.ShapeDtypeStruct(k.shape, k.dtype),
                   jax.ShapeDtypeStruct(v.shape, v.dtype)],
        grid=(bounds.shape[0], H), name="workbench_kda_bwd_prep", H=H, K=K, V=V, BT=static.chunk_size, BK=BK,
        BKC=BKC, BV=BV, F32_DOT=_f32_dot(k), num_warps=num_warps, num_stages=num_stages)


def _bwd_prep_config(K: int, V: int, dtype) -> tuple[int, int, int, int]:
    """(BKC, BV, warps, stages) of `chunk_kda_bwd_prep_kernel`, one config (a kernel that streams each tile
    once). 16-bit inputs: 64 key and value columns at a time, 4 warps, 2 stages. float32 (full float32
    products, on the FMA units): 32 key columns, 16 value columns from K = 128 on, 8 warps and 1 stage, the
    least spilling of those compiled for sm_90 (NOTES.md, "Memory")."""
    BK = max(16, triton.next_power_of_2(K))
    BV = min(64, max(16, triton.next_power_of_2(V)))
    if jnp.dtype(dtype).itemsize == 4:
        return min(32, BK), 16 if BK >= 128 else min(32, BV), 8, 1
    return min(64, BK), BV, 4, 2


def _first_chunk_b_last(b, cu, BT: int):
    """b_L of each sequence's first chunk [N, H, K]: b (the chunk-local cumulative sums) at its last row."""
    _, valid = first_chunk_rows(cu, BT)
    last = cu[:-1] + jnp.maximum(jnp.sum(valid, axis=1) - 1, 0)  # an empty sequence's: any row (no row takes it)
    return b[jnp.minimum(last, b.shape[0] - 1)]


def _reference_packed(q, k, v, g, beta, h0, cu, static: _Static):
    return chunked_packed(q, k, v, g, beta, h0, cu, scale=static.scale, chunk_size=static.chunk_size,
                          storage=q.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(7,))
def _chunk_kda_packed(q, k, v, g, beta, h0, cu, static: _Static):
    o, ht, _, _ = _forward(q, k, v, g, beta, h0, cu, static, save=False)
    return o, ht


def _chunk_kda_packed_fwd(q, k, v, g, beta, h0, cu, static: _Static):
    recompute = static.tuning.residuals == "recompute"
    o, ht, residuals, starts = _forward(q, k, v, g, beta, h0, cu, static, save=not recompute)
    if recompute:  # A, Aqk and the segments' entering states (float32 [N · NSEG, H, K, V]: a few MiB)
        _, A, Aqk, *_ = residuals
        residuals = (A, Aqk, starts)
    elif static.tuning.residuals == "keep":  # all but b (float32 [TT, H, K]), which the backward forms again
        residuals = (None, *residuals[1:])
    else:  # A, Aqk and the chunk-start states: the backward forms b, w and δ again (`_backward_prep`)
        _, A, Aqk, _, hs, _ = residuals
        residuals = (None, A, Aqk, None, hs, None)
    return (o, ht), (q, k, v, g, beta, h0, cu, residuals)


def _chunk_kda_packed_bwd(static: _Static, residuals, cotangents):
    q, k, v, g, beta, h0, cu, saved = residuals
    do, dht = cotangents
    if static.tuning.residuals == "recompute" and static.tuning.backward != "reference":
        saved = _recomputed(q, k, v, g, beta, h0, cu, *saved, static)
    if static.tuning.backward == "reference":
        _, vjp = jax.vjp(lambda *x: _reference_packed(*x, cu, static), q, k, v, g, beta, h0)
        return summed_grads((*vjp((do, dht)), None), (q, k, v, g, beta, h0))
    dq, dk, dv, dg, dbeta, dh0 = _backward(q, k, v, g, beta, h0, cu, saved, do.astype(v.dtype),
                                           dht.astype(jnp.float32), static, dg_dtype=g.dtype)
    return summed_grads((dq, dk, dv, dg, dbeta, dh0, None), (q, k, v, g, beta, h0))


_chunk_kda_packed.defvjp(_chunk_kda_packed_fwd, _chunk_kda_packed_bwd)


# ----------------------------------------------------------------------------- recurrent form


def recurrent_kda(q, k, v, g, beta, *, scale=None, initial_state=None, cu_seqlens=None, implementation=None,
                  tuning: Tuning | None = None):
    """Kimi Delta Attention token by token: the definition, as a Triton sweep per sequence and head.

    Arguments and returns as `chunk_kda` (without `chunk_size`); `tuning.backward` as there
    (`fused_backward` does not apply). Gradients flow to q, k, v, g, beta and initial_state.

    Example:
      >>> import jax, jax.numpy as jnp, workbench
      >>> q, k, v = (jax.random.normal(jax.random.key(i), (1, 12, 2, 8)) for i in range(3))
      >>> k = k / jnp.linalg.norm(k, axis=-1, keepdims=True)
      >>> g = -jax.nn.softplus(jax.random.normal(jax.random.key(3), (1, 12, 2, 8)))
      >>> beta = jax.nn.sigmoid(jax.random.normal(jax.random.key(4), (1, 12, 2)))
      >>> o, state = workbench.recurrent_kda(q, k, v, g, beta)
      >>> o.shape, state.shape
      ((1, 12, 2, 8), (1, 2, 8, 8))
    """
    impl = _checks.implementation_name(implementation)
    _validate(q, k, v, g, beta, scale, initial_state, cu_seqlens, impl)
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    body = functools.partial(_recurrent_kda, static=_Static(scale=scale, chunk_size=0, tuning=tuning or Tuning()),
                             impl=impl)
    return per_device("recurrent_kda", body, dict(q=q, k=k, v=v, g=g, beta=beta, initial_state=initial_state,
                                                  cu_seqlens=cu_seqlens),
                      linear_dims(cu_seqlens is not None), linear_out_dims(cu_seqlens is not None),
                      hint=SEQUENCE_HINT, kernels=impl != "reference")


def _recurrent_kda(q, k, v, g, beta, initial_state, cu_seqlens, *, static: _Static, impl: str):
    """`recurrent_kda` on one device's arrays (all of them, or its shard of the batch and heads)."""
    B, T, H, _ = q.shape
    cu, inside = packed_bounds(cu_seqlens, B, T)  # traced bounds: the bounds rule (API.md)
    if impl == "reference":
        return recurrent_kda_ref(q, k, v, g, beta, scale=static.scale, initial_state=initial_state,
                                 cu_seqlens=None if cu_seqlens is None else cu)
    rows, h0 = _packed(q, k, v, g, beta, initial_state, cu, inside)
    o, ht = _recurrent_kda_packed(*rows, h0, cu, static)
    return keep_inside(o.reshape(B, T, H, v.shape[-1]), inside), ht


def _n_checkpoints(TT: int, N: int) -> int:
    """Checkpoint slots: sequence n's chunk c of CHUNK steps lives at bos // CHUNK + n + c."""
    return TT // recurrent_kernels.CHUNK + N + 1


def _recurrent_forward(q, k, v, g, beta, h0, cu, static: _Static, save: bool):
    TT, H, K = q.shape
    V = v.shape[-1]
    N = cu.shape[0] - 1
    ckpt = jax.ShapeDtypeStruct((_n_checkpoints(TT, N), H, K, V) if save else (0,), jnp.float32)
    o, ht, ckpt = triton_call(
        q, k, v, g, beta, h0, cu, kernel=recurrent_kernels.recurrent_kda_fwd_kernel,
        out_shape=[jax.ShapeDtypeStruct(v.shape, v.dtype), jax.ShapeDtypeStruct((N, H, K, V), jnp.float32), ckpt],
        grid=lambda meta: (triton.cdiv(V, meta["BV"]), N * H), name="workbench_recurrent_kda_fwd",
        tune_inputs=stand_ins(N, TT), scale=static.scale, H=H, K=K, V=V, BK=triton.next_power_of_2(K),
        CHUNK=recurrent_kernels.CHUNK)
    return o, ht, (ckpt if save else None)


def _recurrent_backward(q, k, v, g, beta, ckpt, cu, do, dht, static: _Static):
    TT, H, K = q.shape
    V = v.shape[-1]
    N = cu.shape[0] - 1
    BK = triton.next_power_of_2(K)
    BV = min(max(16, triton.next_power_of_2(V)), max(16, 4096 // BK))  # a [BK, BV] state tile in registers
    NV = triton.cdiv(V, BV)
    f32 = jnp.float32
    dq, dk, dg, dbeta, dv, dh0, _ = triton_call(
        q, k, v, g, beta, do, dht, ckpt, cu, kernel=recurrent_kernels.recurrent_kda_bwd_kernel,
        out_shape=[jax.ShapeDtypeStruct((NV, TT, H, K), f32)] * 3 + [
            jax.ShapeDtypeStruct((NV, TT, H), f32), jax.ShapeDtypeStruct(v.shape, v.dtype),
            jax.ShapeDtypeStruct((N, H, K, V), f32), jax.ShapeDtypeStruct((NV * N * H, recurrent_kernels.CHUNK, BK, BV), f32)],
        grid=(NV, N * H), name="workbench_recurrent_kda_bwd", num_warps=4, tune_inputs=stand_ins(N, TT),
        scale=static.scale, H=H, K=K, V=V, BK=BK, BV=BV, CHUNK=recurrent_kernels.CHUNK)
    return dq.sum(0), dk.sum(0), dv, dg.sum(0), dbeta.sum(0), dh0  # partial sums over value blocks


@functools.partial(jax.custom_vjp, nondiff_argnums=(7,))
def _recurrent_kda_packed(q, k, v, g, beta, h0, cu, static: _Static):
    o, ht, _ = _recurrent_forward(q, k, v, g, beta, h0, cu, static, save=False)
    return o, ht


def _recurrent_kda_packed_fwd(q, k, v, g, beta, h0, cu, static: _Static):
    o, ht, ckpt = _recurrent_forward(q, k, v, g, beta, h0, cu, static, save=True)
    return (o, ht), (q, k, v, g, beta, h0, cu, ckpt)


def _recurrent_kda_packed_bwd(static: _Static, residuals, cotangents):
    q, k, v, g, beta, h0, cu, ckpt = residuals
    do, dht = cotangents
    if static.tuning.backward == "reference":
        def reference(q, k, v, g, beta, h0):
            o, ht = recurrent_kda_ref(q[None], k[None], v[None], g[None], beta[None], scale=static.scale,
                                      initial_state=h0, cu_seqlens=cu)
            return o[0], ht

        _, vjp = jax.vjp(reference, q, k, v, g, beta, h0)
        return summed_grads((*vjp((do, dht)), None), (q, k, v, g, beta, h0))
    dq, dk, dv, dg, dbeta, dh0 = _recurrent_backward(q, k, v, g, beta, ckpt, cu, do.astype(v.dtype),
                                                     dht.astype(jnp.float32), static)
    return summed_grads((dq.astype(q.dtype), dk.astype(k.dtype), dv, dg.astype(g.dtype), dbeta.astype(beta.dtype), dh0,
                         None), (q, k, v, g, beta, h0))


_recurrent_kda_packed.defvjp(_recurrent_kda_packed_fwd, _recurrent_kda_packed_bwd)

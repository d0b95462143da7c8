"""Fused recurrent (gated) linear attention: `workbench.recurrent`.

    S ← S ⊙ exp(G_t) + k_t v_tᵀ,   G_t[i, j] = g_t + g_gamma + gk_t[i] + gv_t[j]
    o_t = S_tᵀ (scale · q_t)

Triton forward and backward kernels (`kernels.py`), the pure-JAX reference (`reference.py`) and
the derivation (`NOTES.md`). This module is the glue: validation, packing, the custom VJP.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Literal

import jax
import jax.numpy as jnp
import triton

from .. import _checks
from .._bounds import keep_inside, packed_bounds, stand_ins
from .._sharding import SEQUENCE_HINT, linear_dims, linear_out_dims, per_device, summed_grads, vary_like
from ..launch import triton_call
from . import kernels
from .reference import recurrent_ref

__all__ = ["recurrent", "Tuning"]


@dataclasses.dataclass(frozen=True)
class Tuning:
    """Static choices of the Triton path that do not change the result.

    backward: "triton" runs the backward kernel; "reference" runs `jax.vjp` of the reference
        instead, so the forward kernel can be tested alone and a wrong gradient bisected.
    block_k: key-block size of the backward kernel (None: chosen from K). It fixes the shape of
        the partial sums, so it is a static choice rather than an autotuned one.
    """

    backward: Literal["triton", "reference"] = "triton"
    block_k: int | None = None


@dataclasses.dataclass(frozen=True)
class _Static:
    scale: float
    reverse: bool
    tuning: Tuning


def recurrent(q, k, v, g=None, g_gamma=None, gk=None, gv=None, *, scale=None, initial_state=None,
              reverse=False, cu_seqlens=None, implementation=None, tuning: Tuning | None = None):
    """Fused recurrent gated linear attention, one step per token.

    Args:
      q, k: `[B, T, H, K]`; v: `[B, T, H, V]` (float32, bfloat16 or float16, one dtype).
      g: `[B, T, H]`, gk: `[B, T, H, K]`, gv: `[B, T, H, V]`: natural-log decays (≤ 0), optional.
      g_gamma: `[H]` constant per-head log decay (not differentiated).
      scale: multiplies q; None means `K ** -0.5`.
      initial_state: `[N, H, K, V]` (N = B, or the number of sequences with `cu_seqlens`).
      reverse: run each sequence from its last token to its first.
      cu_seqlens: int32 `[N+1]` bounds of packed sequences (then B must be 1); may be traced (any
        values: the bounds rule of API.md applies).
      implementation: None/"triton" (Triton kernels; interpreter on CPU) or "reference" (JAX).
      tuning: static kernel choices (`Tuning`), for tests and bisecting.

    Returns:
      `(o, final_state)`: o `[B, T, H, V]` in the dtype of v; final_state `[N, H, K, V]` float32.

    Gradients flow to q, k, v, g, gk, gv and initial_state from both outputs.

    Example:
      >>> import jax, jax.numpy as jnp, workbench
      >>> q, k, v = (jax.random.normal(jax.random.key(i), (1, 16, 2, 8)) for i in range(3))
      >>> gk = -jax.nn.softplus(jax.random.normal(jax.random.key(3), (1, 16, 2, 8)))
      >>> o, state = workbench.recurrent(q, k, v, gk=gk)
      >>> o.shape, state.shape
      ((1, 16, 2, 8), (1, 2, 8, 8))
    """
    impl = _checks.implementation_name(implementation)
    _checks.linear_attention(q, k, v, g, g_gamma, gk, gv, scale, initial_state, cu_seqlens, impl)
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    if g_gamma is not None:  # a constant (API.md): no gradient flows to it
        g_gamma = jax.lax.stop_gradient(g_gamma).astype(jnp.float32)
    body = functools.partial(_recurrent, scale=scale, reverse=bool(reverse), impl=impl, tuning=tuning or Tuning())
    arrays = dict(q=q, k=k, v=v, g=g, g_gamma=g_gamma, gk=gk, gv=gv, initial_state=initial_state,
                  cu_seqlens=cu_seqlens)
    return per_device("recurrent", body, arrays, linear_dims(cu_seqlens is not None),
                      linear_out_dims(cu_seqlens is not None), hint=SEQUENCE_HINT, kernels=impl != "reference")


def _recurrent(q, k, v, g, g_gamma, gk, gv, initial_state, cu_seqlens, *, scale, reverse, impl, tuning):
    """`recurrent` on one device's arrays (all of them, or its shard of the batch and heads)."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    N = B if cu_seqlens is None else cu_seqlens.shape[0] - 1
    # Every kernel sees packed sequences; a fixed-length batch is cu_seqlens = arange(B+1)·T. Traced
    # bounds go through the bounds rule (API.md); rows outside every sequence are zeroed in and out.
    cu, inside = packed_bounds(cu_seqlens, B, T)
    if impl == "reference":
        return recurrent_ref(q, k, v, g, g_gamma, gk, gv, scale=scale, initial_state=initial_state,
                             reverse=reverse, cu_seqlens=None if cu_seqlens is None else cu)
    q, k, v, g, gk, gv = (keep_inside(x, inside) for x in (q, k, v, g, gk, gv))
    pack = lambda x: None if x is None else x.reshape(1, B * T, *x.shape[2:])  # noqa: E731
    h0 = (vary_like(jnp.zeros((N, H, K, V), jnp.float32), q, k, v) if initial_state is None
          else initial_state.astype(jnp.float32))
    static = _Static(scale=scale, reverse=reverse, tuning=tuning)
    o, ht = _recurrent_packed(pack(q), pack(k), pack(v), pack(g), pack(gk), pack(gv), g_gamma, h0, cu, static)
    return keep_inside(o.reshape(B, T, H, V), inside), ht


# ----------------------------------------------------------------------------- custom VJP


def _block_k(K: int, tuning: Tuning) -> int:
    BK = tuning.block_k or min(8, triton.next_power_of_2(K))
    if BK & (BK - 1) or BK < 1:
        raise ValueError(f"tuning.block_k: must be a power of two, got {BK}")
    return BK


def _fold_gates(g, gk, g_gamma, shape):
    """(rec.2) One per-key log-gate gk_eff = gk + g + g_gamma (float32); gk itself when it is alone."""
    if g is None and g_gamma is None:
        return gk  # as given: the kernels convert on load
    scalar = jnp.zeros(shape[:3], jnp.float32)  # summed in the reference's order: (g + g_gamma) + gk
    if g is not None:
        scalar = scalar + g.astype(jnp.float32)
    if g_gamma is not None:
        scalar = scalar + g_gamma
    gk_eff = jnp.broadcast_to(scalar[..., None], shape)
    return gk_eff if gk is None else gk_eff + gk.astype(jnp.float32)


def _n_checkpoints(TT: int, N: int) -> int:
    """Slots for the forward's checkpoints: sequence n's chunk c lives at bos // CHUNK + n + c."""
    return TT // kernels.CHUNK + N + 1


def _forward(q, k, v, gk_eff, gv, h0, cu, static: _Static, save: bool):
    """(o, final_state, checkpoints or None): checkpoints only when a backward will follow."""
    _, TT, H, K = q.shape
    V = v.shape[-1]
    N = cu.shape[0] - 1
    grid = lambda meta: (triton.cdiv(V, meta["BV"]), N * H)  # noqa: E731
    ckpt = (jax.ShapeDtypeStruct((_n_checkpoints(TT, N), H, K, V), jnp.float32) if save
            else jax.ShapeDtypeStruct((0,), jnp.float32))
    o, ht, ckpt = triton_call(
        q, k, v, gk_eff, gv, h0, cu,
        kernel=kernels.recurrent_fwd_kernel,
        out_shape=[jax.ShapeDtypeStruct(v.shape, v.dtype), jax.ShapeDtypeStruct((N, H, K, V), jnp.float32), ckpt],
        grid=grid, name="workbench_recurrent_fwd", tune_inputs=stand_ins(N, TT),
        scale=static.scale, H=H, K=K, V=V, BK=triton.next_power_of_2(K), CHUNK=kernels.CHUNK,
        REVERSE=static.reverse,
    )
    return o, ht, (ckpt if save else None)


def _backward(q, k, v, gk_eff, gv, ckpt, cu, do, dht, static: _Static):
    """Gradients of (q, k, v, gk_eff, gv, h0) and dg = Σ_i dgk_eff, summed in the kernel."""
    _, TT, H, K = q.shape
    V = v.shape[-1]
    N = cu.shape[0] - 1
    BK = _block_k(K, static.tuning)
    BV = triton.next_power_of_2(V)
    NK = triton.cdiv(K, BK)
    f32 = jnp.float32
    unused = jax.ShapeDtypeStruct((0,), f32)
    dq, dk, dv, dh0, dgk, dg, dgv, _ = triton_call(
        q, k, v, gk_eff, gv, do, dht, ckpt, cu,
        kernel=kernels.recurrent_bwd_kernel,
        out_shape=[
            jax.ShapeDtypeStruct(q.shape, q.dtype),
            jax.ShapeDtypeStruct(k.shape, k.dtype),
            jax.ShapeDtypeStruct((*v.shape[:3], NK, V), f32),
            jax.ShapeDtypeStruct((N, H, K, V), f32),
            jax.ShapeDtypeStruct(q.shape, f32) if gk_eff is not None else unused,
            jax.ShapeDtypeStruct((*q.shape[:3], NK), f32) if gk_eff is not None else unused,
            jax.ShapeDtypeStruct((*v.shape[:3], NK, V), f32) if gv is not None else unused,
            jax.ShapeDtypeStruct((NK * N * H, kernels.CHUNK // 4, BK, BV), f32),  # scratch
        ],
        grid=(NK, N * H), name="workbench_recurrent_bwd", tune_inputs=stand_ins(N, TT),
        scale=static.scale, H=H, K=K, V=V, BK=BK, BV=BV, CHUNK=kernels.CHUNK, REVERSE=static.reverse,
    )
    dv = dv.sum(-2)  # partial sums over key blocks
    dgk = dgk if gk_eff is not None else None
    dg = dg.sum(-1) if gk_eff is not None else None
    dgv = dgv.sum(-2) if gv is not None else None
    return dq, dk, dv, dgk, dg, dgv, dh0


def _reference_packed(q, k, v, g, gk, gv, g_gamma, h0, cu, static: _Static):
    return recurrent_ref(q, k, v, g, g_gamma, gk, gv, scale=static.scale, initial_state=h0,
                         reverse=static.reverse, cu_seqlens=cu)


@functools.partial(jax.custom_vjp, nondiff_argnums=(9,))
def _recurrent_packed(q, k, v, g, gk, gv, g_gamma, h0, cu, static: _Static):
    o, ht, _ = _forward(q, k, v, _fold_gates(g, gk, g_gamma, q.shape), gv, h0, cu, static, save=False)
    return o, ht


def _recurrent_packed_fwd(q, k, v, g, gk, gv, g_gamma, h0, cu, static: _Static):
    o, ht, ckpt = _forward(q, k, v, _fold_gates(g, gk, g_gamma, q.shape), gv, h0, cu, static, save=True)
    return (o, ht), (q, k, v, g, gk, gv, g_gamma, h0, ckpt, cu)


def _recurrent_packed_bwd(static: _Static, residuals, cotangents):
    q, k, v, g, gk, gv, g_gamma, h0, ckpt, cu = residuals
    do, dht = cotangents
    if static.tuning.backward == "reference":
        def reference(q, k, v, g, gk, gv, h0):
            return _reference_packed(q, k, v, g, gk, gv, g_gamma, h0, cu, static)

        _, vjp = jax.vjp(reference, q, k, v, g, gk, gv, h0)
        dq, dk, dv, dg, dgk, dgv, dh0 = vjp((do, dht))
        return summed_grads((dq, dk, dv, dg, dgk, dgv, None, dh0, None), residuals[:8])
    dq, dk, dv, dgk_eff, dg_eff, dgv, dh0 = _backward(
        q, k, v, _fold_gates(g, gk, g_gamma, q.shape), gv, ckpt, cu, do.astype(v.dtype),
        dht.astype(jnp.float32), static)
    cast = lambda d, x: None if x is None else d.astype(x.dtype)  # noqa: E731
    return summed_grads((dq, dk, cast(dv, v), cast(dg_eff, g), cast(dgk_eff, gk), cast(dgv, gv), None, dh0, None),
                        residuals[:8])


_recurrent_packed.defvjp(_recurrent_packed_fwd, _recurrent_packed_bwd)

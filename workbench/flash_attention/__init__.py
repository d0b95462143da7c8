"""Flash attention with every mask: `workbench.flash_attention` and `workbench.dropout_keep_mask`.

    s_ij = scale · q_i·k_j (+ bias_ij),  s ← c·tanh(s / c) with softcap c,  masked entries −inf,
    o_i = Σ_j softmax_j(s_i, sink) v_j,   lse_i = log(Σ_j exp s_ij + exp sink)

Triton forward and backward kernels (`kernels.py`; their per-tile steps in `steps.py`), the Hopper forward in
Gluon for plain and causal attention (`gluon_kernels.py`, chosen on a GPU that runs it), the pure-JAX reference
(`reference.py`), the dropout hash both share (`dropout.py`) and the derivation (`NOTES.md`).
This module is the glue: validation, packing a batch as sequences, sharding, the custom VJP.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Literal

import jax
import jax.numpy as jnp
import triton

from .. import _checks, compiler
from .._bounds import inside_rows, keep_inside, packed_bounds
from .._sharding import Dims, explicitly_sharded, per_device, summed_like
from ..launch import INTERPRET, absent, triton_call
from . import gluon_backward, gluon_kernels, kernels
from ._validate import Static, validate
from .dropout import dropout_keep_mask, dropout_seeds, dropout_threshold, keep_from_seeds
from .reference import attention_ref

__all__ = ["flash_attention", "dropout_keep_mask", "gluon_unavailable", "Tuning"]

LOG2E = 1.4426950408889634


@dataclasses.dataclass(frozen=True)
class Tuning:
    """Static choices of the Triton path that do not change the result.

    backward: "triton" runs the backward kernels of `kernels.py` (every mask, every dtype, the CPU too);
        "reference" runs `jax.vjp` of the reference instead (on the same dropout mask), so the forward kernel
        can be tested alone; "gluon" runs the Hopper backward of `gluon_backward.py` (Triton 3.9 or later,
        compute capability 9.0, compiled only) for what the Gluon forward computes with Tq = Tk; another call is
        a ValueError that says what it lacks. None means "gluon" where it applies on the GPU this runs on (it
        was the faster at every shape measured: NOTES.md, "The Hopper backward") and dq is None, else "triton".
    split_rows: the forward's row blocks in two halves that share each K, V tile (True) or whole
        (False); None means whole blocks (kernels.py, FWD_BANDED_CONFIGS, has the measurements).
    dq: how the backward forms dQ. "atomic": the dK/dV pass adds each tile's dS K into float32 rows
        with atomics (5 products per tile, one pass; float additions in a run-dependent order, so dq
        may differ between runs in its last bits); "pass": a second pass per query block owns its
        rows (7 products per tile, two passes; bit-for-bit reproducible). None means "atomic".
    forward_loads: how the forward reads K and V. "pointers": masked pointer loads; "tma": tensor
        descriptors made on the device (Hopper's TMA copy engine on a GPU; rows past the sequence and
        columns past D read as 0, as the masked loads give). Descriptors need rows of a multiple of 16
        bytes (D a multiple of 8 in 16-bit dtypes, of 4 in float32); "tma" with other rows is a
        ValueError. None means "tma" where the rows allow it, else "pointers".
    forward: which forward kernel runs. "triton": `kernels.py` (every mask, every dtype, the CPU too);
        "gluon": the Hopper kernel of `gluon_kernels.py` (two warp groups taking turns; Triton 3.9 or later,
        compute capability 9.0, compiled only), for plain or causal attention (any Tq, Tk), D 64 or 128,
        bfloat16 or float16 and no other mask — another call is a ValueError that says what it lacks. None
        means "gluon" where it applies on the GPU this runs on and is the faster there (a forward alone at any
        T; with a backward to follow, T ≥ 4096: NOTES.md, "The Hopper forward"), else "triton". split_rows and
        forward_loads choose among the Triton forward's variants: either one given means "triton" (with
        "gluon", a ValueError).
    """

    backward: Literal["triton", "reference", "gluon"] | None = None
    split_rows: bool | None = None
    dq: Literal["atomic", "pass"] | None = None
    forward_loads: Literal["pointers", "tma"] | None = None
    forward: Literal["triton", "gluon"] | None = None

    def __post_init__(self):
        if self.backward not in (None, "triton", "reference", "gluon"):
            raise ValueError(f"Tuning.backward: expected None, 'triton', 'reference' or 'gluon', got "
                             f"{self.backward!r}")
        if self.backward == "gluon" and self.dq is not None:
            raise ValueError(f"Tuning.backward='gluon': dq ({self.dq!r}) chooses between the Triton backward's ways "
                             f"of forming dQ; leave it None")
        if self.split_rows not in (None, True, False):
            raise ValueError(f"Tuning.split_rows: expected None, True or False, got {self.split_rows!r}")
        if self.dq not in (None, "atomic", "pass"):
            raise ValueError(f"Tuning.dq: expected None, 'atomic' or 'pass', got {self.dq!r}")
        if self.forward_loads not in (None, "pointers", "tma"):
            raise ValueError(f"Tuning.forward_loads: expected None, 'pointers' or 'tma', got {self.forward_loads!r}")
        if self.forward not in (None, "triton", "gluon"):
            raise ValueError(f"Tuning.forward: expected None, 'triton' or 'gluon', got {self.forward!r}")


@dataclasses.dataclass(frozen=True)
class _Static:
    spec: Static
    varlen: bool
    tuning: Tuning


def flash_attention(q, k, v, *, causal=False, scale=None, sliding_window=None, softcap=None, sinks=None,
                    bias=None, segment_ids=None, cu_seqlens_q=None, cu_seqlens_k=None, dropout_rate=0.0,
                    dropout_key=None, return_lse=False, implementation=None, tuning: Tuning | None = None):
    """Softmax attention computed tile by tile (online softmax), with its own backward.

    Args:
      q: `[B, Tq, H, D]`; k, v: `[B, Tk, Hkv, D]` with `H % Hkv == 0` (GQA/MQA); one float dtype;
        any D ≤ 256 on the Triton path.
      causal: keep `j − (Tk − Tq) ≤ i` (aligned bottom-right; per sequence with cu_seqlens).
      scale: multiplies q·k; None means `D ** -0.5`.
      sliding_window: `(left, right)` keeps `i − left ≤ j − (Tk − Tq) ≤ i + right`; an int w means
        `(w, 0)` when causal, else `(w, w)`.
      softcap: c > 0 maps each logit s to `c · tanh(s / c)` (after the bias).
      sinks: `[H]` raw logits that join each row's softmax denominator and carry no value.
      bias: `[B|1, H|1, Tq, Tk]` added to the scaled logits.
      segment_ids: `(q_ids [B, Tq], kv_ids [B, Tk])` integer; a query sees keys with its id only.
      cu_seqlens_q, cu_seqlens_k: int32 `[N+1]` bounds of packed sequences (B must be 1); may be traced
        (any values: the bounds rule of API.md applies).
      dropout_rate, dropout_key: dropout on the normalised probabilities, rescaled by 1/(1 − rate);
        the keep-mask is `dropout_keep_mask(dropout_key, (B, H, Tq, Tk), dropout_rate)`.
      return_lse: also return the log-sum-exp `[B, H, Tq]` float32 (natural log, sinks included).
      implementation: None/"triton" (Triton kernels; interpreter on CPU) or "reference" (JAX).
      tuning: static kernel choices (`Tuning`), for tests and bisecting.

    Returns:
      o `[B, Tq, H, D]` in q's dtype, or `(o, lse)` with return_lse. A row that sees no key has
      o = 0, lse = −inf (or its sink) and zero gradients. Gradients flow to q, k, v, bias, sinks
      (also from lse).

    Example:
      >>> import jax, workbench
      >>> q, k, v = (jax.random.normal(jax.random.key(i), (1, 40, 2, 16)) for i in range(3))
      >>> o, lse = workbench.flash_attention(q, k, v, causal=True, sliding_window=8, return_lse=True)
      >>> o.shape, lse.shape
      ((1, 40, 2, 16), (1, 2, 40))
    """
    impl = _checks.implementation_name(implementation)
    spec = validate(q, k, v, causal=causal, scale=scale, sliding_window=sliding_window, softcap=softcap,
                    sinks=sinks, bias=bias, segment_ids=segment_ids, cu_seqlens_q=cu_seqlens_q,
                    cu_seqlens_k=cu_seqlens_k, dropout_rate=dropout_rate, dropout_key=dropout_key,
                    return_lse=return_lse, impl=impl)
    seeds = dropout_seeds(dropout_key) if spec.dropout_rate > 0 else None
    q_seg, kv_seg = (None, None) if segment_ids is None else segment_ids
    arrays = dict(q=q, k=k, v=v, sinks=sinks, bias=bias, q_seg=q_seg, kv_seg=kv_seg, cu_seqlens_q=cu_seqlens_q,
                  cu_seqlens_k=cu_seqlens_k, seeds=seeds)
    if seeds is not None and explicitly_sharded(q, k, v, bias):
        raise ValueError(f"dropout_rate: dropout on inputs sharded over explicit mesh axes is not supported: the "
                         f"keep-mask hashes each element's global (batch, head) position, which a device's shard "
                         f"does not know (q {jax.typeof(q)}); gather them, or run without dropout")
    body = functools.partial(_flash_attention, spec=spec, impl=impl, tuning=tuning or Tuning())
    o, lse = per_device("flash_attention", body, arrays, _DIMS, (Dims("B T H D"), Dims("B H T", 0, 1)),
                        hint="for a sequence sharded across devices use workbench.ring_attention or "
                             "workbench.sharded_ring_attention", kernels=impl != "reference")
    return (o, lse) if spec.return_lse else o


_DIMS = {"q": Dims("B Tq H D"), "k": Dims("B Tk Hkv D"), "v": Dims("B Tk Hkv D"), "sinks": Dims("H", None, 0),
         "bias": Dims("B H Tq Tk", 0, 1), "q_seg": Dims("B Tq", 0, None), "kv_seg": Dims("B Tk", 0, None),
         "cu_seqlens_q": Dims("N+1", None, None), "cu_seqlens_k": Dims("N+1", None, None),
         "seeds": Dims("2", None, None)}


def _flash_attention(q, k, v, sinks, bias, q_seg, kv_seg, cu_seqlens_q, cu_seqlens_k, seeds, *, spec: Static,
                     impl: str, tuning: Tuning):
    """(o, lse) of `flash_attention` on one device's arrays (all of them, or its shard of the batch and heads)."""
    B, Tq, H, _ = q.shape
    Tk = k.shape[1]
    varlen = cu_seqlens_q is not None
    # Every kernel sees packed sequences (a batch row is one). Traced bounds go through the bounds rule
    # (API.md): a query row outside every sequence sees nothing, a key outside is seen by no query.
    cu_q, inside_q = packed_bounds(cu_seqlens_q, B, Tq, "cu_seqlens_q")
    cu_k, inside_k = packed_bounds(cu_seqlens_k, B, Tk, "cu_seqlens_k")
    if impl == "reference":
        mask = None if seeds is None else keep_from_seeds(seeds, (B, H, Tq, Tk), spec.dropout_rate)
        return _reference(q, k, v, sinks, bias, q_seg, kv_seg, *((cu_q, cu_k) if varlen else (None, None)),
                          mask, spec)
    static = _Static(spec=spec, varlen=varlen, tuning=tuning)
    q, k, v = keep_inside(q, inside_q), keep_inside(k, inside_k), keep_inside(v, inside_k)
    return _flash(q, k, v, sinks, bias, q_seg, kv_seg, cu_q, cu_k, seeds, static)


def _reference(q, k, v, sinks, bias, q_seg, kv_seg, cu_q, cu_k, mask, spec: Static):
    segments = None if q_seg is None else (q_seg, kv_seg)
    return attention_ref(q, k, v, scale=spec.scale, causal=spec.causal, window=spec.window, softcap=spec.softcap,
                         sinks=sinks, bias=bias, segment_ids=segments, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                         dropout_rate=spec.dropout_rate, dropout_mask=mask)


# ----------------------------------------------------------------------------- kernel launches


def _launch_args(q, k, sinks, bias, q_seg, kv_seg, seeds, static: _Static):
    """Arrays and scalars every kernel takes after its own tensors, in kernel-argument order."""
    spec = static.spec
    B, Tq, H, D = q.shape
    Tk, HKV = k.shape[1], k.shape[2]
    if bias is not None:
        Bb, Hb = bias.shape[:2]
        bias_stride_b = 0 if Bb == 1 else Hb * Tq * Tk
        bias_stride_h = 0 if Hb == 1 else Tq * Tk
    else:
        bias_stride_b = bias_stride_h = 0
    flat = lambda x: absent() if x is None else x.reshape(-1).astype(jnp.int32)  # noqa: E731
    window_left, window_right = spec.window if spec.window is not None else (0, 0)
    arrays = dict(bias=absent() if bias is None else bias, q_seg=flat(q_seg), kv_seg=flat(kv_seg),
                  sinks=absent() if sinks is None else sinks.astype(jnp.float32),
                  seeds=(jnp.zeros((2,), jnp.int32) if seeds is None
                         else jax.lax.bitcast_convert_type(seeds, jnp.int32)))
    scalars = dict(scale=spec.scale, softcap=spec.softcap or 1.0, window_left=window_left,
                   window_right=window_right, keep_threshold=dropout_threshold(spec.dropout_rate),
                   inv_keep=1.0 / (1.0 - spec.dropout_rate), bias_stride_b=bias_stride_b,
                   bias_stride_h=bias_stride_h, TQ_OUT=Tq, TK_OUT=Tk)
    meta = dict(H=H, HKV=HKV, D=D, BD=max(16, triton.next_power_of_2(D)), CAUSAL=spec.causal,
                WINDOW=spec.window is not None, SOFTCAP=spec.softcap is not None,
                DROPOUT=spec.dropout_rate > 0, VARLEN=static.varlen, F32=q.dtype == jnp.float32)
    return arrays, scalars, meta


def _packed(x):
    return x.reshape(1, x.shape[0] * x.shape[1], *x.shape[2:])


def _forward_kernel(static: _Static):
    return kernels.flash_fwd_split_kernel if static.tuning.split_rows else kernels.flash_fwd_banded_kernel


def _forward_loads(q, tuning: Tuning) -> str:
    """"tma" or "pointers" (Tuning.forward_loads): descriptors need rows of a multiple of 16 bytes."""
    D = q.shape[-1]
    rows_fit = (D * q.dtype.itemsize) % 16 == 0
    if tuning.forward_loads is None:
        return "tma" if rows_fit else "pointers"
    if tuning.forward_loads == "tma" and not rows_fit:
        raise ValueError(f"Tuning.forward_loads='tma': tensor descriptors need rows of a multiple of 16 bytes, "
                         f"got D = {D} in {q.dtype.name} (q shape {tuple(q.shape)})")
    return tuning.forward_loads


def _triton_misfit() -> str | None:
    return None if compiler.compiles_gluon() else f"Triton {triton.__version__} (Gluon kernels need 3.9 or later)"


def _gpu_misfit() -> str | None:
    from ..gpu_call import capability  # only where kernels run compiled

    cc = capability()
    return None if cc == 90 else f"a GPU of compute capability {cc} (its matrix products are Hopper's, 9.0)"


def gluon_unavailable() -> str | None:
    """Why this machine cannot run the Gluon kernels (None: it can): the Triton version, the interpreter, the GPU."""
    if INTERPRET:
        return _triton_misfit() or "Triton's interpreter (Gluon kernels run only compiled, on a GPU)"
    return _triton_misfit() or _gpu_misfit()


def _gluon_misfit(q, k, sinks, bias, q_seg, seeds, static: _Static) -> str | None:
    """What keeps the Gluon forward from this call (None: nothing), said for a ValueError."""
    spec = static.spec
    if (misfit := _triton_misfit()) is not None:
        return misfit
    others = [name for name, present in (
        ("cu_seqlens", static.varlen), ("sliding_window", spec.window is not None),
        ("softcap", spec.softcap is not None), ("sinks", sinks is not None), ("bias", bias is not None),
        ("segment_ids", q_seg is not None), ("dropout_rate", seeds is not None)) if present]
    if others:
        return f"a mask it does not compute ({', '.join(others)})"
    if q.dtype not in (jnp.bfloat16, jnp.float16):
        return f"dtype {q.dtype.name} (it computes bfloat16 and float16)"
    if q.shape[-1] not in (64, 128):
        return f"D = {q.shape[-1]} (it computes 64 and 128)"
    return None if INTERPRET else _gpu_misfit()


def _refuse_misfit(field: str, shapes: str, misfit: str | None, q, k) -> None:
    """The ValueError for `Tuning(<field>="gluon")` on a call the Gluon kernel does not compute (misfit: what
    the call has, from `_gluon_misfit`; None: nothing, no error)."""
    if misfit is not None:
        raise ValueError(f"Tuning.{field}='gluon': the Gluon {field} computes plain or causal attention with "
                         f"{shapes}, bfloat16 or float16, on Hopper; this call has {misfit} "
                         f"(q shape {tuple(q.shape)} {q.dtype.name}, k shape {tuple(k.shape)})")


# With a backward to follow (the float32 copy of o written too) the Gluon forward was slower in forward+backward
# at T 1024 and faster from 4096 on (H200, NOTES.md "The Hopper forward"); alone it was faster at every T measured.
GLUON_WITH_BACKWARD_MIN_T = 4096


def _forward_choice(q, k, sinks, bias, q_seg, seeds, static: _Static, keep_f32: bool) -> str:
    """"gluon" or "triton" (Tuning.forward)."""
    tuning = static.tuning
    asked = tuning.forward
    variant = tuning.split_rows is not None or tuning.forward_loads is not None  # of the Triton forward
    if asked == "gluon":
        if variant:
            raise ValueError(f"Tuning.forward='gluon': split_rows ({tuning.split_rows!r}) and forward_loads "
                             f"({tuning.forward_loads!r}) choose among the Triton forward's variants; leave them None")
        _refuse_misfit("forward", "D 64 or 128", _gluon_misfit(q, k, sinks, bias, q_seg, seeds, static), q, k)
        return "gluon"
    if asked == "triton" or variant or INTERPRET:
        return "triton"
    faster = not keep_f32 or q.shape[1] >= GLUON_WITH_BACKWARD_MIN_T
    return "gluon" if faster and _gluon_misfit(q, k, sinks, bias, q_seg, seeds, static) is None else "triton"


def _forward_gluon(q, k, v, static: _Static, keep_f32: bool):
    """`_forward` by the Gluon kernel (`_gluon_misfit` found nothing against it)."""
    B, Tq, H, D = q.shape
    config = dict(gluon_kernels.CONFIG)
    causal = static.spec.causal
    sections = gluon_kernels.heads_per_section(k.shape[1], D, H, k.shape[2], q.dtype.itemsize)
    grid, blocks = gluon_kernels.grid(B, Tq, H), triton.cdiv(Tq, gluon_kernels.BLOCK_M) * B * H
    o, lse, o_f32, _ = triton_call(
        q, k, v, B, Tq, k.shape[1], static.spec.scale, sections, kernel=gluon_kernels.flash_fwd_pingpong_kernel,
        out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((B, H, Tq), jnp.float32),
                   jax.ShapeDtypeStruct(q.shape if keep_f32 else (0,), jnp.float32),
                   jax.ShapeDtypeStruct((1,) if causal else (0,), jnp.int32)],  # causal: the blocks taken
        grid=grid, zeroed_outputs=(3,) if causal and grid[0] < blocks else (), name="workbench_flash_fwd_gluon",
        num_warps=config.pop("num_warps"), maxnreg=config.pop("maxnreg"), H=H, HKV=k.shape[2], D=D,
        CAUSAL=causal, KEEP_F32=keep_f32, **config,
    )
    return o, lse, (o_f32 if keep_f32 else None)


def _forward(q, k, v, sinks, bias, q_seg, kv_seg, cu_q, cu_k, seeds, static: _Static, keep_f32: bool = False):
    """(o, lse, o in float32 or None): the float32 copy only when a backward will follow (fa.5)."""
    if _forward_choice(q, k, sinks, bias, q_seg, seeds, static, keep_f32) == "gluon":
        return _forward_gluon(q, k, v, static, keep_f32)
    B, Tq, H, D = q.shape
    N = cu_q.shape[0] - 1
    arrays, scalars, meta = _launch_args(q, k, sinks, bias, q_seg, kv_seg, seeds, static)
    loads = _forward_loads(q, static.tuning)
    o, lse, o_f32 = triton_call(
        _packed(q), _packed(k), _packed(v), cu_q, cu_k, arrays["bias"], arrays["q_seg"], arrays["kv_seg"],
        arrays["sinks"], arrays["seeds"],
        kernel=_forward_kernel(static),
        out_shape=[jax.ShapeDtypeStruct((1, B * Tq, H, D), q.dtype), jax.ShapeDtypeStruct((B, H, Tq), jnp.float32),
                   jax.ShapeDtypeStruct((1, B * Tq, H, D) if keep_f32 else (0,), jnp.float32)],
        grid=lambda m: (triton.cdiv(B * Tq if static.varlen else Tq, m["BM"]), N * H),
        name="workbench_flash_fwd", KEEP_F32=keep_f32, TMA=loads == "tma", **scalars, **meta,
    )
    o, o_f32 = o.reshape(q.shape), (o_f32.reshape(q.shape) if keep_f32 else None)
    if static.varlen:  # rows outside every sequence (the bounds rule) are never written: an empty row's values
        inside = inside_rows(cu_q, B * Tq)
        o, o_f32 = keep_inside(o, inside), keep_inside(o_f32, inside)
        lse = jnp.where(inside[None, None, :], lse, -jnp.inf if sinks is None else sinks.astype(jnp.float32)[:, None])
    return o, lse, o_f32


def _dsinks(sinks, lse, delta):
    """(fa.7) dsink_h = −Σ_{b,i} exp(sink_h − lse) (Delta − dlse); delta here is already Delta − dlse."""
    if sinks is None:
        return None
    p_sink = jnp.where(lse == -jnp.inf, 0.0, jnp.exp(sinks.astype(jnp.float32)[None, :, None] - lse))
    return -(p_sink * delta).sum((0, 2)).astype(sinks.dtype)


def _gluon_backward_misfit(q, k, sinks, bias, q_seg, seeds, static: _Static) -> str | None:
    """What keeps the Gluon backward from this call (None: nothing): the forward's misfits, and Tq ≠ Tk."""
    misfit = _gluon_misfit(q, k, sinks, bias, q_seg, seeds, static)
    if misfit is None and k.shape[1] != q.shape[1]:
        misfit = f"Tq = {q.shape[1]} and Tk = {k.shape[1]} (it computes Tq = Tk)"
    return misfit


def _backward_choice(q, k, sinks, bias, q_seg, seeds, static: _Static) -> str:
    """"gluon" or "triton" (Tuning.backward; "reference" is decided before)."""
    tuning = static.tuning
    if tuning.backward == "gluon":
        _refuse_misfit("backward", "Tq = Tk, D 64 or 128",
                       _gluon_backward_misfit(q, k, sinks, bias, q_seg, seeds, static), q, k)
        return "gluon"
    if tuning.backward == "triton" or tuning.dq is not None or INTERPRET:
        return "triton"
    return "gluon" if _gluon_backward_misfit(q, k, sinks, bias, q_seg, seeds, static) is None else "triton"


def _backward_gluon(q, k, v, do, lse2, delta, static: _Static, grad_dtype):
    """dq, dk, dv by the Gluon kernel (`_backward_choice` chose it)."""
    B, T, H, D = q.shape
    config = dict(gluon_backward.CONFIG)
    lse2, delta = gluon_backward.padded_stats(lse2, delta)
    dk, dv, dq = triton_call(
        q, k, v, do.astype(q.dtype), lse2, delta, B, T, lse2.shape[-1], static.spec.scale,
        kernel=gluon_backward.flash_bwd_pingpong_kernel,
        out_shape=[jax.ShapeDtypeStruct(k.shape, grad_dtype or k.dtype)] * 2
        + [jax.ShapeDtypeStruct(q.shape, jnp.float32)],
        grid=(triton.cdiv(T, gluon_backward.BLOCK_N), B * k.shape[2]), zeroed_outputs=(2,),
        name="workbench_flash_bwd_gluon", num_warps=config.pop("num_warps"), maxnreg=config.pop("maxnreg"), H=H,
        HKV=k.shape[2], D=D, CAUSAL=static.spec.causal, DEFER=gluon_backward.DEFER_DQ[static.spec.causal], **config,
    )
    return (dq * static.spec.scale).astype(grad_dtype or q.dtype), dk, dv  # (fa.5) dQ = scale · dS K


def _backward(q, k, v, sinks, bias, q_seg, kv_seg, cu_q, cu_k, seeds, o, lse, do, dlse, static: _Static,
              grad_dtype=None):
    """(fa.5–fa.10) Gradients of q, k, v, sinks, bias; `o` is the forward's float32 output.
    dq, dk, dv are written in `grad_dtype` (default: their input's dtype)."""
    B, Tq, H, D = q.shape
    Tk, HKV = k.shape[1], k.shape[2]
    N = cu_q.shape[0] - 1
    f32 = jnp.float32
    # (fa.5) Delta_i = rowsum(dO ∘ O) with O before its rounding to q's dtype (a bfloat16 O would put
    # its rounding error into every dS of the row, and into dsinks summed over rows); an lse
    # cotangent shifts it: Delta − dlse
    delta = jnp.einsum("bthd,bthd->bht", o, do.astype(f32), precision=jax.lax.Precision.HIGHEST) - dlse.astype(f32)
    lse2 = jnp.where(lse == -jnp.inf, jnp.inf, lse * LOG2E)  # (fa.10) a row that saw nothing: P = 0
    if _backward_choice(q, k, sinks, bias, q_seg, seeds, static) == "gluon":
        return (*_backward_gluon(q, k, v, do, lse2, delta, static, grad_dtype), None, None)
    arrays, scalars, meta = _launch_args(q, k, sinks, bias, q_seg, kv_seg, seeds, static)
    tensors = (_packed(q), _packed(k), _packed(v), _packed(do.astype(q.dtype)), lse2, delta, cu_q, cu_k,
               arrays["bias"], arrays["q_seg"], arrays["kv_seg"], arrays["seeds"])
    dbias_shape = (B, H, Tq, Tk) if bias is not None else (0,)
    atomic = static.tuning.dq in (None, "atomic")
    # with atomic dQ the dK/dV pass also adds dQ (float32, unscaled) and writes dbias, into zeroed outputs
    dk, dv, dq, dbias = triton_call(
        *tensors, kernel=kernels.flash_bwd_dkdv_dq_kernel if atomic else kernels.flash_bwd_dkdv_pass_kernel,
        out_shape=[jax.ShapeDtypeStruct((1, B * Tk, HKV, D), grad_dtype or k.dtype)] * 2
        + [jax.ShapeDtypeStruct((1, B * Tq, H, D) if atomic else (0,), f32),
           jax.ShapeDtypeStruct(dbias_shape if atomic else (0,), f32)],
        grid=lambda m: (triton.cdiv(B * Tk if static.varlen else Tk, m["BN"]), N * HKV),
        zeroed_outputs=(2, 3) if atomic else (), name="workbench_flash_bwd_dkdv", ATOMIC_DQ=atomic,
        **scalars, **meta,
    )
    if atomic:
        dq = (dq * static.spec.scale).astype(grad_dtype or q.dtype)  # (fa.5) dQ = scale · dS K
    else:
        dq, dbias = triton_call(
            *tensors, kernel=kernels.flash_bwd_dq_kernel,
            out_shape=[jax.ShapeDtypeStruct((1, B * Tq, H, D), grad_dtype or q.dtype),
                       jax.ShapeDtypeStruct(dbias_shape, f32)],
            grid=lambda m: (triton.cdiv(B * Tq if static.varlen else Tq, m["BM"]), N * H),
            zeroed_outputs=(1,), name="workbench_flash_bwd_dq", **scalars, **meta,
        )
    dsinks = _dsinks(sinks, lse, delta)
    if bias is not None:  # (fa.8) summed over the dimensions the bias broadcasts
        axes = tuple(a for a in (0, 1) if bias.shape[a] == 1 and dbias.shape[a] != 1)
        dbias = dbias.sum(axes, keepdims=True).astype(bias.dtype)
    else:
        dbias = None
    return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape), dsinks, dbias


# ----------------------------------------------------------------------------- custom VJP


@functools.partial(jax.custom_vjp, nondiff_argnums=(10,))
def _flash(q, k, v, sinks, bias, q_seg, kv_seg, cu_q, cu_k, seeds, static: _Static):
    o, lse, _ = _forward(q, k, v, sinks, bias, q_seg, kv_seg, cu_q, cu_k, seeds, static)
    return o, lse


def _flash_fwd(q, k, v, sinks, bias, q_seg, kv_seg, cu_q, cu_k, seeds, static: _Static):
    o, lse, o_f32 = _forward(q, k, v, sinks, bias, q_seg, kv_seg, cu_q, cu_k, seeds, static, keep_f32=True)
    return (o, lse), (q, k, v, sinks, bias, q_seg, kv_seg, cu_q, cu_k, seeds, o_f32, lse)


def _flash_bwd(static: _Static, residuals, cotangents):
    q, k, v, sinks, bias, q_seg, kv_seg, cu_q, cu_k, seeds, o, lse = residuals
    do, dlse = cotangents
    if static.tuning.backward == "reference":
        B, Tq, H, _ = q.shape
        mask = (None if seeds is None
                else keep_from_seeds(seeds, (B, H, Tq, k.shape[1]), static.spec.dropout_rate))
        cu_ref = (cu_q, cu_k) if static.varlen else (None, None)

        def reference(q, k, v, sinks, bias):
            return _reference(q, k, v, sinks, bias, q_seg, kv_seg, *cu_ref, mask, static.spec)

        _, vjp = jax.vjp(reference, q, k, v, sinks, bias)
        dq, dk, dv, dsinks, dbias = vjp((do, dlse))
    else:
        dq, dk, dv, dsinks, dbias = _backward(q, k, v, sinks, bias, q_seg, kv_seg, cu_q, cu_k, seeds, o, lse,
                                              do, dlse, static)
    grads = (summed_like(g, x) for g, x in zip((dq, dk, dv, dsinks, dbias), (q, k, v, sinks, bias)))
    return *grads, None, None, None, None, None


_flash.defvjp(_flash_fwd, _flash_bwd)


# ----------------------------------------------------------------------------- blocks (ring attention)


def _block_launch(q, k, causal: bool, scale: float):
    B, Tq, Tk = q.shape[0], q.shape[1], k.shape[1]
    spec = Static(scale=scale, causal=causal, window=None, softcap=None, dropout_rate=0.0, return_lse=True)
    cu_q = jnp.arange(B + 1, dtype=jnp.int32) * Tq
    cu_k = jnp.arange(B + 1, dtype=jnp.int32) * Tk
    # the ring's blocks keep the Triton kernels: its two-GPU tests have not run with the Gluon ones
    return cu_q, cu_k, _Static(spec=spec, varlen=False, tuning=Tuning(forward="triton", backward="triton"))


def attention_block(q, k, v, *, causal: bool, scale: float):
    """Internal entry point (ring attention): the forward kernel on one block of keys, no VJP.

    q `[B, Tq, H, D]`, k, v `[B, Tk, Hkv, D]`, already validated; causal aligned bottom-right (fa.1).
    Returns (o float32 `[B, Tq, H, D]`, lse float32 `[B, H, Tq]`): the partial result over these
    keys, in float32 so that partial results merge (fa.3) without a rounding to q's dtype each.
    """
    cu_q, cu_k, static = _block_launch(q, k, causal, scale)
    _, lse, o_f32 = _forward(q, k, v, None, None, None, None, cu_q, cu_k, None, static, keep_f32=True)
    return o_f32, lse


def attention_block_backward(q, k, v, o, lse, do, *, causal: bool, scale: float):
    """Internal entry point (ring attention): float32 (dq, dk, dv) of one block of keys.

    o (float32 `[B, Tq, H, D]`) and lse are those of the WHOLE key set, merged over every block
    (fa.3): then P_ij = exp(s_ij − lse_i) are entries of the full softmax and Delta = rowsum(dO ∘ O)
    is the full row's, so this block's dk, dv are exact and its dq is its share of the sum (fa.5).
    """
    cu_q, cu_k, static = _block_launch(q, k, causal, scale)
    dq, dk, dv, _, _ = _backward(q, k, v, None, None, None, None, cu_q, cu_k, None, o, lse, do,
                                 jnp.zeros_like(lse), static, grad_dtype=jnp.float32)
    return dq, dk, dv

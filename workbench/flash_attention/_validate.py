"""Input validation of `workbench.flash_attention`: every failure is a ValueError whose message
starts with the argument's name and shows what it got (API.md, Conventions).

`validate` runs before anything is traced or launched and returns the static configuration.
"""

from __future__ import annotations

import dataclasses
import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np

from .. import _checks
from .dropout import check_key

MAX_HEAD_DIM_TRITON = 256


@dataclasses.dataclass(frozen=True)
class Static:
    """The static (hashable) configuration of one call, after validation."""

    scale: float
    causal: bool
    window: tuple[int, int] | None  # (left, right) after the int rule; None = no window
    softcap: float | None
    dropout_rate: float
    return_lse: bool


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _is_real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _is_bool(x) -> bool:
    return isinstance(x, (bool, np.bool_))


def _shapes(q, k, v) -> str:
    return f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"


def _window(sliding_window, causal: bool):
    """(left, right) from None, an int w ≥ 1 ((w, 0) if causal else (w, w)) or a pair of ints ≥ 0."""
    w = sliding_window
    if w is None:
        return None
    if _is_int(w):
        if w < 1:
            raise ValueError(f"sliding_window: an int window must be ≥ 1, got {w!r}")
        return (int(w), 0) if causal else (int(w), int(w))
    if isinstance(w, (tuple, list)) and len(w) == 2 and all(_is_int(x) for x in w):
        if min(w) < 0:
            raise ValueError(f"sliding_window: (left, right) must both be ≥ 0, got {tuple(w)!r}")
        return int(w[0]), int(w[1])
    raise ValueError(f"sliding_window: expected None, an int ≥ 1 or a pair (left, right) of ints ≥ 0, "
                     f"got {w!r}")


def _cu_seqlens(name: str, cu, batch: int, total: int, shapes: str):
    """`_checks.cu_seqlens`, with the message naming `name` (cu_seqlens_q or cu_seqlens_k)."""
    try:
        _checks.cu_seqlens(cu, batch, total, shapes)
    except ValueError as err:
        message = str(err)
        raise ValueError(name + message.removeprefix("cu_seqlens")) from None


def validate(q, k, v, *, causal, scale, sliding_window, softcap, sinks, bias, segment_ids,
             cu_seqlens_q, cu_seqlens_k, dropout_rate, dropout_key, return_lse, impl) -> Static:
    """Check every argument of `flash_attention`; return the static configuration (scale resolved)."""
    impl = _checks.implementation_name(impl)
    dtypes = _checks.float_dtypes(impl)
    _checks.array("q", q, 4, dtypes, "[B, Tq, H, D]")
    _checks.array("k", k, 4, dtypes, "[B, Tk, Hkv, D]")
    _checks.array("v", v, 4, dtypes, "[B, Tk, Hkv, D]")
    shapes = _shapes(q, k, v)
    for name, x in (("k", k), ("v", v)):
        if x.dtype != q.dtype:
            raise ValueError(f"{name}: dtype must equal q's (q, k, v share one dtype), got q {q.dtype}, "
                             f"k {k.dtype}, v {v.dtype}")
    B, Tq, H, D = q.shape
    Tk, Hkv = k.shape[1], k.shape[2]
    if k.shape[0] != B:
        raise ValueError(f"k: batch size must equal q's, got {shapes}")
    if tuple(v.shape) != tuple(k.shape):
        raise ValueError(f"v: expected the shape of k [B, Tk, Hkv, D], got {shapes}")
    if k.shape[3] != D:
        raise ValueError(f"k: head dim must equal q's D={D}, got {shapes}")
    if D == 0:
        raise ValueError(f"q: head dim D must be ≥ 1, got {shapes}")
    if H == 0:
        raise ValueError(f"q: number of heads H must be ≥ 1, got {shapes}")
    if Hkv == 0:
        raise ValueError(f"k: number of kv heads Hkv must be ≥ 1, got {shapes}")
    if H % Hkv:
        raise ValueError(f"k: q's heads H={H} must be a multiple of k's heads Hkv={Hkv}, got {shapes}")
    if impl == "triton" and D > MAX_HEAD_DIM_TRITON:
        raise ValueError(f"q: the Triton kernels support D ≤ {MAX_HEAD_DIM_TRITON}, got D={D} ({shapes})")

    if not _is_bool(causal):
        raise ValueError(f"causal: must be a Python bool, got {causal!r} ({type(causal).__name__})")
    causal = bool(causal)
    if scale is not None and not isinstance(scale, jax.core.Tracer) and not _is_real(scale):
        raise ValueError(f"scale: must be a Python float or None, got {type(scale).__name__}")
    _checks.positive_scale(scale)
    scale = D ** -0.5 if scale is None else float(scale)
    window = _window(sliding_window, causal)
    if softcap is not None:
        if not _is_real(softcap):
            raise ValueError(f"softcap: must be a Python float (static) or None, got {type(softcap).__name__}")
        if not math.isfinite(softcap) or softcap <= 0:
            raise ValueError(f"softcap: must be finite and > 0, got {softcap!r}")
        softcap = float(softcap)

    if sinks is not None:
        _checks.array("sinks", sinks, 1, dtypes, "[H]")
        _checks.shape("sinks", sinks, (H,), "[H]", f"H from {shapes}")
    if bias is not None:
        _checks.array("bias", bias, 4, dtypes, "[B|1, H|1, Tq, Tk]")
        b_B, b_H, b_Tq, b_Tk = bias.shape
        if b_B not in (1, B) or b_H not in (1, H) or (b_Tq, b_Tk) != (Tq, Tk):
            raise ValueError(f"bias: expected shape [B|1, H|1, Tq, Tk] with B={B}, H={H}, Tq={Tq}, Tk={Tk} "
                             f"from {shapes}, got {tuple(bias.shape)}")
    if segment_ids is not None:
        if not isinstance(segment_ids, (tuple, list)) or len(segment_ids) != 2:
            raise ValueError(f"segment_ids: expected a pair (q_ids [B, Tq], kv_ids [B, Tk]), "
                             f"got {type(segment_ids).__name__}")
        for side, ids, expected in (("q_ids", segment_ids[0], (B, Tq)), ("kv_ids", segment_ids[1], (B, Tk))):
            if not hasattr(ids, "shape") or not hasattr(ids, "dtype"):
                raise ValueError(f"segment_ids: {side} must be an integer array {expected}, "
                                 f"got {type(ids).__name__}")
            if not jnp.issubdtype(ids.dtype, jnp.integer):
                raise ValueError(f"segment_ids: {side} must have an integer dtype, got {ids.dtype} "
                                 f"(shape {tuple(ids.shape)})")
            if tuple(ids.shape) != expected:
                raise ValueError(f"segment_ids: {side} expected shape {expected} from {shapes}, "
                                 f"got {tuple(ids.shape)}")
    if (cu_seqlens_q is None) != (cu_seqlens_k is None):
        given, missing = ("cu_seqlens_q", "cu_seqlens_k") if cu_seqlens_k is None else ("cu_seqlens_k",
                                                                                        "cu_seqlens_q")
        raise ValueError(f"{missing}: must be given together with {given} (packed q and k/v)")
    if cu_seqlens_q is not None:
        _cu_seqlens("cu_seqlens_q", cu_seqlens_q, B, Tq, shapes)
        _cu_seqlens("cu_seqlens_k", cu_seqlens_k, B, Tk, shapes)
        if cu_seqlens_q.shape != cu_seqlens_k.shape:
            raise ValueError(f"cu_seqlens_k: must hold as many sequences as cu_seqlens_q, got shapes "
                             f"{tuple(cu_seqlens_q.shape)} and {tuple(cu_seqlens_k.shape)}")

    if not _is_real(dropout_rate):
        raise ValueError(f"dropout_rate: must be a Python float in [0, 1) (static), "
                         f"got {type(dropout_rate).__name__}")
    if not 0.0 <= dropout_rate < 1.0:
        raise ValueError(f"dropout_rate: must be in [0, 1), got {dropout_rate!r}")
    if dropout_rate > 0 and dropout_key is None:
        raise ValueError(f"dropout_key: required when dropout_rate > 0, got None (dropout_rate={dropout_rate})")
    if dropout_key is not None:
        check_key(dropout_key)
    if not _is_bool(return_lse):
        raise ValueError(f"return_lse: must be a Python bool, got {return_lse!r} ({type(return_lse).__name__})")
    return Static(scale=scale, causal=causal, window=window, softcap=softcap,
                  dropout_rate=float(dropout_rate), return_lse=bool(return_lse))

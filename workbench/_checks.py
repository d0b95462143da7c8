"""Input validation shared by every op: each failure is a ValueError naming the argument and shapes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

KERNEL_DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)
REFERENCE_DTYPES = KERNEL_DTYPES + (jnp.float64,)


def implementation_name(implementation: str | None) -> str:
    impl = "triton" if implementation is None else implementation
    if impl not in ("triton", "reference"):
        raise ValueError(f"implementation: expected None, 'triton' or 'reference', got {implementation!r}")
    return impl


def float_dtypes(impl: str):
    return KERNEL_DTYPES if impl == "triton" else REFERENCE_DTYPES


def array(name: str, x, ndim: int, dtypes, shape_doc: str):
    """Check that `x` is an array of rank `ndim` with a dtype in `dtypes`."""
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise ValueError(f"{name}: expected an array {shape_doc}, got {type(x).__name__}")
    if x.ndim != ndim:
        raise ValueError(f"{name}: expected rank {ndim} {shape_doc}, got shape {tuple(x.shape)}")
    if not any(x.dtype == d for d in dtypes):
        names = ", ".join(jnp.dtype(d).name for d in dtypes)
        raise ValueError(f"{name}: dtype must be one of {names}, got {x.dtype} (shape {tuple(x.shape)})")


def shape(name: str, x, expected: tuple, shape_doc: str, context: str = ""):
    if tuple(x.shape) != tuple(expected):
        extra = f" ({context})" if context else ""
        raise ValueError(f"{name}: expected shape {tuple(expected)} {shape_doc}{extra}, got {tuple(x.shape)}")


def positive_scale(scale):
    if scale is None:
        return
    if isinstance(scale, jax.core.Tracer):
        raise ValueError("scale: must be a Python float (static), got a traced value")
    if not np.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale: must be a finite positive float or None, got {scale!r}")


def cu_seqlens(cu, batch: int, total_t: int, shapes: str):
    """Validate `cu_seqlens` [N+1] for packed inputs of length `total_t` (values when concrete)."""
    if not hasattr(cu, "shape") or cu.ndim != 1 or cu.shape[0] < 2:
        got = tuple(cu.shape) if hasattr(cu, "shape") else type(cu).__name__
        raise ValueError(f"cu_seqlens: expected a 1-D integer array [N+1] with N >= 1, got {got}")
    if not jnp.issubdtype(cu.dtype, jnp.integer):
        raise ValueError(f"cu_seqlens: dtype must be int32, got {cu.dtype} (shape {tuple(cu.shape)})")
    if batch != 1:
        raise ValueError(f"cu_seqlens: packed inputs need batch size 1, got {shapes}")
    if isinstance(cu, jax.core.Tracer):
        return
    values = np.asarray(cu)
    if values[0] != 0:
        raise ValueError(f"cu_seqlens: must start at 0, got {values.tolist()}")
    if np.any(np.diff(values) < 0):
        raise ValueError(f"cu_seqlens: must be non-decreasing, got {values.tolist()}")
    if values[-1] != total_t:
        raise ValueError(
            f"cu_seqlens: last entry must equal the packed length {total_t} of {shapes}, got {values.tolist()}"
        )


def linear_attention(q, k, v, g, g_gamma, gk, gv, scale, initial_state, cu, impl) -> int:
    """Validate the inputs every linear-attention op shares (q, k [B, T, H, K], v [B, T, H, V], the optional
    gates, scale, initial state [N, H, K, V], cu_seqlens `cu`); return N, the number of sequences."""
    dtypes = float_dtypes(impl)
    array("q", q, 4, dtypes, "[B, T, H, K]")
    B, T, H, K = q.shape
    shapes = f"q {tuple(q.shape)}"
    array("k", k, 4, dtypes, "[B, T, H, K]")
    shape("k", k, q.shape, "[B, T, H, K]", f"must match {shapes}")
    array("v", v, 4, dtypes, "[B, T, H, V]")
    if tuple(v.shape[:3]) != (B, T, H):
        raise ValueError(f"v: expected shape [B, T, H, V] with B, T, H = {(B, T, H)} from {shapes}, "
                         f"got {tuple(v.shape)}")
    V = v.shape[-1]
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v: must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if impl == "triton" and max(K, V) > 256:
        raise ValueError(f"q, v: the Triton kernels support K, V ≤ 256, got K={K}, V={V}")
    for name, x, expected, doc in (("g", g, (B, T, H), "[B, T, H]"), ("gk", gk, (B, T, H, K), "[B, T, H, K]"),
                                   ("gv", gv, (B, T, H, V), "[B, T, H, V]"), ("g_gamma", g_gamma, (H,), "[H]")):
        if x is not None:
            array(name, x, len(expected), REFERENCE_DTYPES if impl == "reference"
                          else KERNEL_DTYPES, doc)
            shape(name, x, expected, doc, f"from {shapes}, v {tuple(v.shape)}")
    positive_scale(scale)
    if cu is not None:
        cu_seqlens(cu, B, T, f"{shapes}")
        N = cu.shape[0] - 1
    else:
        N = B
    if initial_state is not None:
        array("initial_state", initial_state, 4, REFERENCE_DTYPES, "[N, H, K, V]")
        shape("initial_state", initial_state, (N, H, K, V), "[N, H, K, V]",
                      f"N={N} {'sequences in cu_seqlens' if cu is not None else 'batch'}")
    return N

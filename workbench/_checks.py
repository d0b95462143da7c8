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


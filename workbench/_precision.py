"""Rounding to a storage dtype inside a wider computation, the way a kernel rounds a tile it stores.

The references mimic a kernel that rounds an operand (k̂ = k ⊙ exp(b_L − b), A, …) to the inputs'
dtype before a matrix product. `x.astype(bf16).astype(f32)` does that on CPU, but XLA on GPU drops
such a round trip (`xla_allow_excess_precision`, on by default: the pair of converts is simplified
away), so the reference silently keeps float32 and becomes far more accurate than the kernel it
budgets. `lax.reduce_precision` is an op XLA keeps; it rounds like the cast except that it flushes
the target dtype's subnormals to zero, which `round_to` puts back (float16: |x| < 2⁻¹⁴).
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax


def round_to(x, dtype):
    """x rounded to `dtype`'s precision (round to nearest even, overflow to ±inf), kept in x's dtype.

    For float32 x, bitwise equal to `x.astype(dtype).astype(x.dtype)` on every non-NaN value (NaN
    stays NaN, its payload may differ), and not removable by XLA. (For float64 x it rounds once, where
    XLA's f64 → f16/bf16 convert rounds twice, through f32.) A no-op when `dtype` is at least as wide
    as x's.
    """
    x = jnp.asarray(x)
    src, dst = jnp.finfo(x.dtype), jnp.finfo(dtype)
    if dst.nexp >= src.nexp and dst.nmant >= src.nmant:
        return x
    y = lax.reduce_precision(x, exponent_bits=dst.nexp, mantissa_bits=dst.nmant)
    if dst.nexp < src.nexp:
        # dtype's subnormals are multiples of its smallest subnormal (a power of two, so the scaling is
        # exact); reduce_precision would flush them to zero
        step = float(dst.smallest_subnormal)
        y = jnp.where(jnp.abs(x) < float(dst.smallest_normal), jnp.round(x / step) * step, y)
    return y

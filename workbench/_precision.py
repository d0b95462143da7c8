"""Rounding to a storage dtype inside a wider computation, the way a kernel rounds a tile it stores.

The references mimic a kernel that rounds an operand (k̂ = k ⊙ exp(b_L − b), A, …) to the inputs'
dtype before a matrix product. `x.astype(bf16).astype(f32)` does that on CPU, but XLA on GPU drops
such a round trip (`xla_allow_excess_precision`, on by default: the pair of converts is simplified
away), so the reference silently keeps float32 and becomes far more accurate than the kernel it
budgets. `lax.reduce_precision` is an op XLA keeps; it rounds like the cast except that it flushes
the target dtype's subnormals to zero, which `round_to` puts back (float16: |x| < 2⁻¹⁴).
"""

from __future__ import annotations

import functools

import jax
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


def highest_precision(fn):
    """Run `fn` with JAX's matrix products at full precision (HIGHEST), whatever the caller's default.

    A reference is the yardstick of the error budget: on a GPU, XLA's default precision runs float32
    products in TF32 (about 1e-3 relative), which would make a float32 reference less accurate than
    the kernels it budgets. The precision is fixed in the traced program, so it holds under `jit` and
    in the transposed products of its gradient.
    """
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with jax.default_matmul_precision("highest"):
            return fn(*args, **kwargs)

    return wrapped

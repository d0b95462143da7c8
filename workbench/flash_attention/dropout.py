"""The dropout keep-mask of `workbench.flash_attention`: a counter-based hash of the positions.

The mask is a pure function of two 32-bit seeds (drawn from the caller's `jax.random` key) and of
the element's position (b, h, i, j), so the Triton kernels recompute any tile of it in the
forward and again in the backward without storing it, and `dropout_keep_mask` returns the same
mask as a boolean array for the reference. Everything is uint32 arithmetic with wrap-around; the
Triton kernels implement the same steps bit for bit:

    fmix32(x):  x ^= x >> 16;  x *= 0x85EBCA6B;  x ^= x >> 13;  x *= 0xC2B2AE35;  x ^= x >> 16
    row = (b·H + h)·Tq + i,   col = j
    r   = fmix32(row · 0x9E3779B1 + s0)
    u   = fmix32(r ^ (col · 0x85EBCA77 + s1))
    keep  ⇔  (u >> 8) ≥ round(rate · 2²⁴)

fmix32 is MurmurHash3's 32-bit finalizer. The row hash r is computed once per row of a tile and
the column hash once per element. The top 24 bits of u are compared with the threshold, so
P(keep) = 1 − round(rate · 2²⁴) / 2²⁴ and rate 0 keeps everything.
"""

from __future__ import annotations

import functools
import numbers

import jax
import jax.numpy as jnp

FMIX_C1 = 0x85EBCA6B
FMIX_C2 = 0xC2B2AE35
ROW_MULT = 0x9E3779B1  # 2³² / golden ratio
COL_MULT = 0x85EBCA77
THRESHOLD_BITS = 24


def _u32(x):
    return jnp.asarray(x, jnp.uint32)


def fmix32(x):
    """MurmurHash3's finalizer on uint32 (wrap-around multiplication)."""
    x = x ^ (x >> 16)
    x = x * _u32(FMIX_C1)
    x = x ^ (x >> 13)
    x = x * _u32(FMIX_C2)
    return x ^ (x >> 16)


def check_key(key):
    """ValueError unless `key` is one typed `jax.random.key` or one raw uint32[2] `PRNGKey`."""
    if not hasattr(key, "dtype") or not hasattr(key, "shape"):
        raise ValueError(f"dropout_key: expected a jax.random key, got {type(key).__name__}")
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != ():
            raise ValueError(f"dropout_key: expected a single key, got a key array of shape {tuple(key.shape)}")
        return
    if key.dtype != jnp.uint32 or tuple(key.shape) != (2,):
        raise ValueError(f"dropout_key: expected a typed jax.random.key or a uint32[2] jax.random.PRNGKey, "
                         f"got {key.dtype} of shape {tuple(key.shape)}")


def dropout_seeds(key):
    """The two uint32 seeds (s0, s1) of the hash, drawn from a `jax.random` key (typed or raw)."""
    check_key(key)
    return jax.random.bits(key, (2,), jnp.uint32)


def _check_rate(rate):
    if isinstance(rate, bool) or not isinstance(rate, numbers.Real):
        raise ValueError(f"rate: must be a Python float in [0, 1) (static), got {type(rate).__name__}")
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"rate: must be in [0, 1), got {rate!r}")


def dropout_threshold(rate) -> int:
    """round(rate · 2²⁴): an element is kept when the top 24 bits of its hash are ≥ this."""
    _check_rate(rate)
    return int(round(float(rate) * 2 ** THRESHOLD_BITS))


def _check_shape(shape):
    if (not isinstance(shape, (tuple, list)) or len(shape) != 4
            or any(isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0 for n in shape)):
        raise ValueError(f"shape: expected 4 non-negative ints (B, H, Tq, Tk), got {shape!r}")
    return tuple(int(n) for n in shape)


def keep_from_seeds(seeds, shape, rate):
    """Boolean keep-mask [B, H, Tq, Tk] from seeds uint32[2] (see the module docstring)."""
    return _keep(jnp.asarray(seeds).astype(jnp.uint32), _check_shape(shape), dropout_threshold(rate))


@functools.partial(jax.jit, static_argnames=("shape", "threshold"))
def _keep(seeds, shape, threshold):
    B, H, Tq, Tk = shape
    b = jnp.arange(B, dtype=jnp.uint32)[:, None, None, None]
    h = jnp.arange(H, dtype=jnp.uint32)[None, :, None, None]
    i = jnp.arange(Tq, dtype=jnp.uint32)[None, None, :, None]
    col = jnp.arange(Tk, dtype=jnp.uint32)[None, None, None, :]
    row = (b * _u32(H) + h) * _u32(Tq) + i
    r = fmix32(row * _u32(ROW_MULT) + seeds[0])
    u = fmix32(r ^ (col * _u32(COL_MULT) + seeds[1]))
    return jnp.broadcast_to((u >> 8) >= _u32(threshold), (B, H, Tq, Tk))


def dropout_keep_mask(dropout_key, shape, rate):
    """The keep-mask [B, H, Tq, Tk] (bool) that `flash_attention` uses for `dropout_key` and `rate`.

    `shape` and `rate` are static; the key may be traced under `jit`. Kept elements are scaled by
    1 / (1 − rate) in attention.

    Example:
      >>> import jax, workbench
      >>> keep = workbench.dropout_keep_mask(jax.random.key(0), (1, 2, 4, 8), 0.25)
      >>> keep.shape, keep.dtype
      ((1, 2, 4, 8), dtype('bool'))
    """
    shape = _check_shape(shape)
    _check_rate(rate)
    return keep_from_seeds(dropout_seeds(dropout_key), shape, rate)

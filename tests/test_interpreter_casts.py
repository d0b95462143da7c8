"""The launcher's fix for the interpreter's bfloat16 casts (round to nearest even, float64 too)."""

import jax
import jax.numpy as jnp
import pytest
import triton
import triton.language as tl

from workbench import launch
from workbench.launch import triton_call


@triton.jit
def _cast_kernel(x, via_f32, via_f64, back, N: tl.constexpr):
    o = tl.arange(0, N)
    a = tl.load(x + o)
    tl.store(via_f32 + o, a.to(tl.bfloat16))
    tl.store(via_f64 + o, a.to(tl.float64).to(tl.bfloat16))
    tl.store(back + o, a.to(tl.bfloat16).to(tl.float32))


@pytest.mark.skipif(not launch.INTERPRET, reason="checks the interpreter path only")
def test_bfloat16_casts_round_to_nearest_even():
    # 1 + 2^-8 + 2^-9 is above the half-way point between two bfloat16 values: truncation gives
    # 1.0, round-to-nearest gives 1 + 2^-7. Random values cover the rest.
    special = jnp.array([1 + 2**-8 + 2**-9, -(1 + 2**-8 + 2**-9), 3.14159, 1e-30, -2.5, 0.0, 65504.0, 1e38],
                        jnp.float32)
    x = jnp.concatenate([special, jax.random.normal(jax.random.key(0), (120,), jnp.float32) * 100])
    n = x.shape[0]
    via_f32, via_f64, back = triton_call(
        x, kernel=_cast_kernel,
        out_shape=[jax.ShapeDtypeStruct((n,), jnp.bfloat16)] * 2 + [jax.ShapeDtypeStruct((n,), jnp.float32)],
        grid=(1,), N=n)
    expected = x.astype(jnp.bfloat16)
    assert bool(jnp.all(via_f32 == expected))
    assert bool(jnp.all(via_f64 == expected))
    assert bool(jnp.all(back == expected.astype(jnp.float32)))
    assert float(via_f32[0]) == 1 + 2**-7


@triton.jit
def _dot_kernel(a, b, c, N: tl.constexpr):
    o = tl.arange(0, N)
    tile = o[:, None] * N + o[None, :]
    tl.store(c + tile, tl.dot(tl.load(a + tile), tl.load(b + tile)))


def test_bfloat16_dot_multiplies_values():
    """The interpreter's tl.dot on bfloat16 tiles equals the exact float32 product of their values."""
    import torch

    a, b = (torch.randn(16, 16).bfloat16() for _ in range(2))
    c = torch.full((16, 16), float("nan"))
    _dot_kernel[(1,)](a, b, c, N=16)
    np.testing.assert_allclose(c.numpy(), (a.double() @ b.double()).numpy(), rtol=1e-6, atol=1e-6)

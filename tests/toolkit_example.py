"""A kernel that is not in the package, written with nothing but the public toolkit (docs/API.md, "Toolkit"):
a row-wise softplus with a Triton forward and backward, launched through `workbench.triton_call`, and the
`VERIFY_CASES` that `workbench verify --module tests.toolkit_example` runs (tests/test_toolkit.py).

`SCALE_GRADIENT` breaks the backward on purpose (a test sets it to 1.05 and expects verify to fail).
"""

import functools

import workbench  # first: decides compiled vs interpreted Triton before triton loads

import jax
import jax.numpy as jnp
import triton
import triton.language as tl

from workbench import testing
from workbench.verify import CheckCase

SCALE_GRADIENT = 1.0
BLOCK = 32


@triton.jit
def softplus_kernel(x, y, N: tl.constexpr, BLOCK: tl.constexpr):
    """y = log(1 + exp(x)) = max(x, 0) + log(1 + exp(−|x|)), float32 inside."""
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < N
    b_x = tl.load(x + o, mask=m, other=0.0).to(tl.float32)
    b_y = tl.maximum(b_x, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(b_x)))
    tl.store(y + o, b_y.to(y.dtype.element_ty), mask=m)


@triton.jit
def softplus_backward_kernel(x, dy, dx, N: tl.constexpr, BLOCK: tl.constexpr, SCALE: tl.constexpr):
    """dx = dy · sigmoid(x)."""
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < N
    b_x = tl.load(x + o, mask=m, other=0.0).to(tl.float32)
    b_dy = tl.load(dy + o, mask=m, other=0.0).to(tl.float32)
    tl.store(dx + o, (b_dy * SCALE / (1.0 + tl.exp(-b_x))).to(dx.dtype.element_ty), mask=m)


def _launch(kernel, *arrays, out, **constants):
    n = out.size
    return workbench.triton_call(*arrays, kernel=kernel, out_shape=jax.ShapeDtypeStruct(out.shape, out.dtype),
                                 grid=(triton.cdiv(n, BLOCK),), N=n, BLOCK=BLOCK, **constants)


@jax.custom_vjp
def softplus(x):
    """softplus through the Triton kernels (any shape; float32, bfloat16 or float16)."""
    return _launch(softplus_kernel, x, out=x)


def _forward(x):
    return softplus(x), x


def _backward(x, dy):
    return (_launch(softplus_backward_kernel, x, dy, out=x, SCALE=SCALE_GRADIENT),)


softplus.defvjp(_forward, _backward)


def softplus_reference(x):
    return jax.nn.softplus(x)


def _args(seed, shape, dtype):
    return (testing.normal(jax.random.key(seed), shape, jnp.dtype(dtype), scale=3.0),)


VERIFY_CASES = [
    CheckCase("vector_odd_length", softplus, softplus_reference, functools.partial(_args, 0, (45,))),
    CheckCase("matrix", softplus, softplus_reference, functools.partial(_args, 1, (8, 24))),
]

"""The kernels of tests/interpreter_cases.py (module level: the interpreter runs a kernel in its module's globals).
Imported only after TRITON_INTERPRET is set."""

import triton
import triton.language as tl

C = tl.constexpr(0.5)

@triton.jit
def cast(x, f32, f64, N: tl.constexpr):
    o = tl.arange(0, N)
    a = tl.load(x + o)
    tl.store(f32 + o, a.to(tl.bfloat16))
    tl.store(f64 + o, a.to(tl.float64).to(tl.bfloat16))

@triton.jit
def literal(x, y, N: tl.constexpr):
    o = tl.arange(0, N)
    tl.store(y + o, tl.load(x + o) * 0.1 + 2.0)

@triton.jit
def dot(a, b, c, N: tl.constexpr):
    o = tl.arange(0, N)
    tile = o[:, None] * N + o[None, :]
    tl.store(c + tile, tl.dot(tl.load(a + tile), tl.load(b + tile)))

@triton.jit
def dot_rows(a, b, c, M: tl.constexpr, N: tl.constexpr):
    rows, cols = tl.arange(0, M), tl.arange(0, N)
    a_tile = tl.load(a + rows[:, None] * N + cols[None, :])
    b_tile = tl.load(b + cols[:, None] * N + cols[None, :])
    tl.store(c + rows[:, None] * N + cols[None, :], tl.dot(a_tile, b_tile))

@triton.jit
def constant_product(x, y, N: tl.constexpr):
    o = tl.arange(0, N)
    tl.store(y + o, tl.exp2(C * tl.load(x + o)))

@triton.jit
def scalar_mask(x, n, y, N: tl.constexpr):
    o = tl.arange(0, N)
    m = (o < N) & (0 < n)
    tl.store(y + o, tl.load(x + o, mask=m, other=0.0), mask=m)

@triton.jit
def _twice(v):
    return v + v

@triton.jit
def helpers(x, y, N: tl.constexpr):
    o = tl.arange(0, N)
    v = tl.load(x + o)
    for _ in tl.static_range(8):
        v = _twice(v)
    tl.store(y + o, v)

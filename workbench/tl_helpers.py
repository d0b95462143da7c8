"""`@triton.jit` helpers shared by every kernel family: sequence bounds and time stepping.

Every kernel sees packed sequences: inputs are `[1, total_T, H, ...]` and `cu_seqlens` `[N+1]`
gives each sequence's bounds. A fixed-length batch is the special case `cu_seqlens = arange(B+1)*T`,
so no kernel needs a separate fixed-length prologue.
"""

import triton
import triton.language as tl

# A module-level constant is visible inside @triton.jit only when it is a tl.constexpr instance
# (an annotation `LOG2E: tl.constexpr = ...` is rejected by the compiler, though the interpreter takes it).
LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def exp_e(x):
    """eˣ as exp2(x · log2 e): what `tl.exp` compiles to, spelled out (one rounding of the product)."""
    return tl.exp2(x * LOG2E)


@triton.jit
def sequence_bounds(cu_seqlens, i_n):
    """(bos, eos) of sequence `i_n`, as int64 so that offsets past 2**31 elements stay exact."""
    bos = tl.load(cu_seqlens + i_n).to(tl.int64)
    eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
    return bos, eos


@triton.jit
def time_index(i, bos, eos, REVERSE: tl.constexpr):
    """Absolute row of the i-th step of a sequence: bos + i forward, eos - 1 - i when REVERSE."""
    if REVERSE:
        return eos - 1 - i
    else:
        return bos + i


# Cody–Waite split of ln 2: LN2_HI has few enough significant bits that n · LN2_HI is exact in
# float32 for |n| < 2⁸, so x − n ln 2 is formed with one rounding.
LN2_HI = tl.constexpr(0.693145751953125)
LN2_LO = tl.constexpr(1.428606765330187e-06)


@triton.jit
def exp_accurate(x):
    """exp(x) for float32 x with a relative error of about one ulp, also for large |x|.

    `tl.exp2(x * LOG2E)` (what `tl.exp` compiles to on NVIDIA GPUs) rounds the product first: its
    relative error grows like |x| · ε, about 20 ulp at a log-decay of −20. Reducing x to
    r = x − n ln 2 with |r| ≤ ln 2 / 2 first keeps the error at the ulp level; 2ⁿ scales exactly.
    """
    n = tl.floor(x * LOG2E + 0.5)
    r = (x - n * LN2_HI) - n * LN2_LO
    return tl.exp2(n) * tl.exp2(r * LOG2E)


# tanh(x) = x · (1 − x²/3 + 2x⁴/15 − 17x⁶/315 + 62x⁸/2835 − 1382x¹⁰/155925 + …) for |x| < TANH_SERIES;
# the first omitted term is below 2e-9 relative there. Past it, (1 − e)/(1 + e) with e = exp(−2|x|) ≤ 0.55
# loses at most a couple of ulp to cancellation.
TANH_SERIES = tl.constexpr(0.3)


@triton.jit
def tanh(x):
    """tanh of float32 x to a few ulp everywhere (Triton has no portable tanh; the interpreter lacks libdevice).

    The textbook `1 − 2 / (exp(2x) + 1)` cancels near 0: its relative error grows like ε / |x|, which a
    logit softcap of c ≈ 30 turns into logit errors of c · ε, fifty times a float32 reference's.
    """
    a = tl.abs(x)
    x2 = x * x
    series = x * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0 + x2 * (
        62.0 / 2835.0 + x2 * (-1382.0 / 155925.0))))))
    e = tl.exp2(-2.0 * LOG2E * a)
    tail = (1.0 - e) / (1.0 + e)
    tail = tl.where(x < 0, -tail, tail)
    return tl.where(a < TANH_SERIES, series, tail)


@triton.jit
def dot_f32_right(a, b, F32_DOT: tl.constexpr):
    """a @ b ([M, N] float32) for a in the inputs' dtype and b float32, as the reference forms it (b kept in
    float32). With a bfloat16: b as two bfloat16 parts, hi = bf16(b) and lo = bf16(b − hi), in two products
    with a — 16 bits of b's mantissa where tf32 keeps 11, on operands of half the registers of float32 ones
    (bfloat16 has float32's exponents; float16 has too few for a state or its gradient). Otherwise one product
    of float32 operands at F32_DOT."""
    if a.dtype == tl.bfloat16:
        b_hi = b.to(tl.bfloat16)
        return tl.dot(a, (b - b_hi.to(tl.float32)).to(tl.bfloat16), acc=tl.dot(a, b_hi, out_dtype=tl.float32),
                      out_dtype=tl.float32)
    return tl.dot(a.to(tl.float32), b, input_precision=F32_DOT)

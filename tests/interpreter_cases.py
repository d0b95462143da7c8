"""Kernels that each show one of `workbench.interpreter`'s fixes at work, and what a GPU computes for them.

Run as a script (tests/test_interpreter.py does, once with every fix and once without each): the package is
imported without its `__init__` (which would install every fix), the fixes named on the command line are
left out, each case runs on `interpreter.run` directly, and one JSON object {case: "ok" | "wrong" | error}
is printed. `affine_expected` is also the GPU tests' expectation (tests/test_gpu_launch.py).
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import numpy as np


def _operand(v, tile):
    """(type, value) of a run-time scalar as the kernel receives it: a float is float32, an int int32, a bool
    int1; an int equal to 1 is compiled in as a literal, which takes the tile's type."""
    if isinstance(v, bool):
        return np.bool_, float(v)
    if isinstance(v, int):
        return (tile, 1.0) if v == 1 else (np.int32, float(v))
    return np.float32, float(np.float32(v))


def _joined(a, b):
    """Triton's computation type of two tensor operands (`computation_type_impl`): float64, else float32, else
    float16 wins; bfloat16 stays bfloat16 only with bfloat16 and becomes float32 with anything else."""
    import ml_dtypes

    kinds = {np.dtype(a), np.dtype(b)}
    for kind in (np.float64, np.float32, np.float16):
        if np.dtype(kind) in kinds:
            return kind
    return ml_dtypes.bfloat16 if kinds == {np.dtype(ml_dtypes.bfloat16)} else np.float32


def affine_expected(x: np.ndarray, a, b, fused: bool = False) -> np.ndarray:
    """`x * a + b` stored to x's dtype, as Triton computes it with `a` and `b` run-time scalars typed as the
    launcher types them (`workbench.signature`, `_operand`): each operation in the computation type of its
    operands (`_joined`), rounded once to it (computed in float64, exact for these types), the store rounding
    again to x's dtype. `fused`: as a GPU may compute it, the product and the sum in one multiply-add (one
    rounding) where both are of one type (Triton compiles with fp fusion on)."""
    t_a, v_a = _operand(a, x.dtype)
    t1 = _joined(x.dtype, t_a)
    t_b, v_b = _operand(b, np.dtype(t1))
    t2 = _joined(t1, t_b)
    if fused and np.dtype(t1) == np.dtype(t2):
        return _fma(x, v_a, v_b, t2).astype(x.dtype)
    product = (x.astype(np.float64) * v_a).astype(t1).astype(np.float64)
    return (product + v_b).astype(t2).astype(x.dtype)


def literal_expected(x: np.ndarray, fused: bool = False) -> np.ndarray:
    """`x * 0.1 + 2.0` with Python literals, which take the tile's type (Triton's weak typing of constants);
    each operation rounds to that type (`fused`: one multiply-add, one rounding)."""
    kind = x.dtype
    tenth = float(np.asarray(0.1).astype(kind))
    if fused:
        return _fma(x, tenth, 2.0, kind)
    return ((x.astype(np.float64) * tenth).astype(kind).astype(np.float64) + 2.0).astype(kind)


def _fma(x: np.ndarray, a: float, b: float, kind) -> np.ndarray:
    """x * a + b rounded once to `kind` (exact rational arithmetic, then one correct rounding to float64, which
    for narrower kinds rounds again harmlessly: float64 has more than twice their bits plus two)."""
    from fractions import Fraction

    exact = [float(Fraction(float(v)) * Fraction(a) + Fraction(b)) for v in x.astype(np.float64).ravel()]
    return np.asarray(exact, np.float64).reshape(x.shape).astype(kind)


def _run(skip: set[str]) -> dict[str, str]:
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root))
    package = types.ModuleType("workbench")  # the package without its __init__, which installs every fix
    package.__path__ = [str(root / "workbench")]
    sys.modules["workbench"] = package
    from workbench import interpreter  # noqa: E402  (sets TRITON_INTERPRET before triton loads)

    import ml_dtypes
    import triton
    from triton.runtime import interpreter as interp

    calls = []  # calls of the interpreter's own language patching (counted under any fix that wraps it)
    original = interp._patch_lang
    interp._patch_lang = lambda fn: calls.append(fn) or original(fn)
    for name, fix in interpreter.FIXES.items():
        if name not in skip:
            fix()

    from tests.interpreter_kernels import cast, constant_product, dot, dot_rows, helpers, literal, scalar_mask

    H = interpreter.HostTensor
    rng = np.random.default_rng(0)
    out: dict[str, str] = {}

    def case(name, run, check):
        try:
            out[name] = "ok" if check(run()) else "wrong"
        except Exception as exc:  # noqa: BLE001 - every case reports
            out[name] = f"{type(exc).__name__}: {str(exc)[-200:]}"

    special = np.array([1 + 2**-8 + 2**-9, -(1 + 2**-8 + 2**-9), 3.14159, 1e-30, -2.5, 0, 65504, 1e38], np.float32)
    xs = np.concatenate([special, rng.normal(size=56).astype(np.float32) * 100])
    bf = ml_dtypes.bfloat16

    def run_cast():
        f32, f64 = H.copy_of(np.zeros(64, bf)), H.copy_of(np.zeros(64, bf))
        interpreter.run(cast, (1,), [H.copy_of(xs), f32, f64], {"N": 64})
        return f32.array, f64.array

    case("bfloat16_casts", run_cast, lambda r: (r[0] == xs.astype(bf)).all() and (r[1] == xs.astype(bf)).all())

    xb = (rng.normal(size=64) * 4).astype(bf)

    def run_literal():
        y = H.copy_of(np.zeros(64, bf))
        interpreter.run(literal, (1,), [H.copy_of(xb), y], {"N": 64})
        return y.array

    case("bfloat16_arithmetic", run_literal, lambda y: (y == literal_expected(xb)).all())

    a16, b16 = (rng.normal(size=(16, 16)).astype(bf) for _ in range(2))

    def run_dot():
        c = H.copy_of(np.full((16, 16), np.nan, np.float32))
        interpreter.run(dot, (1,), [H.copy_of(a16), H.copy_of(b16), c], {"N": 16})
        return c.array

    exact = a16.astype(np.float64) @ b16.astype(np.float64)
    case("bfloat16_dot", run_dot, lambda c: np.allclose(c, exact, rtol=1e-6, atol=1e-6))

    # Rows of 2²⁵, 1 and −2²⁵ at every ordered triple of 16 key positions, times ones: each row's sum is 1, but a
    # float32 sum that adds the 1 to ±2²⁵ before the two cancel loses it (2²⁵ ± 1 rounds to ±2²⁵). Whatever
    # order a BLAS adds in, some row meets 1 and a ±2²⁵ first; summed exactly, every row is 1.
    triples = [(i, j, k) for i in range(16) for j in range(16) for k in range(16) if len({i, j, k}) == 3]
    a32 = np.zeros((4096, 16), np.float32)
    for row, (i, j, k) in enumerate(triples):
        a32[row, [i, j, k]] = 2.0**25, 1.0, -(2.0**25)

    def run_dot_order():
        c = H.copy_of(np.full((4096, 16), np.nan, np.float32))
        interpreter.run(dot_rows, (1,), [H.copy_of(a32), H.copy_of(np.ones((16, 16), np.float32)), c],
                        {"M": 4096, "N": 16})
        return c.array

    ones_then_zeros = (np.arange(4096) < len(triples)).astype(np.float32)[:, None] * np.ones(16, np.float32)
    case("dot_order", run_dot_order, lambda c: (c == ones_then_zeros).all())

    x32 = rng.normal(size=16).astype(np.float32)

    def run_constant():
        y = H.copy_of(np.zeros(16, np.float32))
        interpreter.run(constant_product, (1,), [H.copy_of(x32), y], {"N": 16})
        return y.array

    case("constexpr_tensors", run_constant, lambda y: np.allclose(y, np.exp2(0.5 * x32), rtol=1e-6))

    def run_mask():
        y = H.copy_of(np.zeros(16, np.float32))
        interpreter.run(scalar_mask, (1,), [H.copy_of(x32), interpreter.scalar_argument(3, "n"), y], {"N": 16})
        return y.array

    case("scalar_masks", run_mask, lambda y: (y == x32).all())

    def run_helpers():
        calls.clear()
        y = H.copy_of(np.zeros(16, np.float32))
        interpreter.run(helpers, (1,), [H.copy_of(x32), y], {"N": 16})
        return y.array

    case("helper_patches", run_helpers, lambda y: (y == x32 * 256).all() and len(calls) == 1)
    out["triton"] = triton.__version__
    return out


if __name__ == "__main__":
    print(json.dumps(_run(set(sys.argv[1:]))))

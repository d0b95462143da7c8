"""workbench.interpreter: each fix still needed (a case goes wrong without it, on the installed Triton), and what
issue 46 found from outside: a kernel of any float dtype with a scalar of any kind gives what a GPU gives.

The cases run in a subprocess per fix left out (tests/interpreter_cases.py): the package's `__init__` installs
every fix, so a process without one must import the interpreter module alone."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import triton
import triton.language as tl

import workbench
from workbench import interpreter, launch, signature
from tests.interpreter_cases import affine_expected, literal_expected

ROOT = Path(__file__).resolve().parents[1]
# The cases each fix is needed for, on the installed Triton (the mask fix: from 3.9.0, whose loads refuse int masks).
NEEDS = {"bfloat16": {"bfloat16_casts", "bfloat16_arithmetic", "bfloat16_dot"},
         "dot_order": {"dot_order"},
         "constexpr_tensors": {"constexpr_tensors"},
         "memory_ops": {"scalar_masks"} if signature.triton_version() >= (3, 9, 0) else set(),
         "nested_patches": {"helper_patches"}}

pytestmark = pytest.mark.skipif(not launch.INTERPRET, reason="the interpreter's fixes: CPU path only")


def _cases(*skip: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "WORKBENCH_INTERPRET")}
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "interpreter_cases.py"), *skip], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result.pop("triton") == triton.__version__
    return result


CASES = {"bfloat16_casts", "bfloat16_arithmetic", "bfloat16_dot", "dot_order", "constexpr_tensors", "scalar_masks",
         "helper_patches"}


def test_every_case_is_right_with_every_fix():
    assert _cases() == dict.fromkeys(CASES, "ok")


@pytest.mark.parametrize("fix", sorted(NEEDS))
def test_each_fix_is_needed_on_this_triton(fix):
    assert set(NEEDS) == set(interpreter.FIXES)
    result = _cases(fix)
    assert {case for case, verdict in result.items() if verdict != "ok"} == NEEDS[fix], result


# ----------------------------------------------------------------------------- scalars, as on a GPU


@triton.jit
def affine(x_ptr, n, a, b, y_ptr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n)
    tl.store(y_ptr + i, x * a + b, mask=i < n)


@triton.jit
def literal(x_ptr, n, y_ptr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n)
    tl.store(y_ptr + i, x * 0.1 + 2.0, mask=i < n)


DTYPES = [jnp.bfloat16, jnp.float16, jnp.float32, jnp.float64]
SCALARS = {"floats": (1 / 3, 1.0), "ints": (3, 2), "bool and float": (True, 0.5), "one and zero": (1, 0.0)}
N = 37


def _x(dtype):
    return (jax.random.normal(jax.random.key(0), (N,), jnp.float32) * 3).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("kind", SCALARS)
def test_a_kernel_of_any_float_dtype_takes_scalars_of_any_kind(dtype, kind):
    """Issue 46: `x * a + b` with a bfloat16 `x` and Python floats failed in the interpreter (no `get_bf16`);
    and it must equal what a GPU computes, where a float scalar is a float32 argument."""
    a, b = SCALARS[kind]
    x = _x(dtype)
    y = workbench.triton_call(x, N, a, b, kernel=affine, out_shape=jax.ShapeDtypeStruct((N,), dtype), grid=(2,),
                              BLOCK=32)
    expected = affine_expected(np.asarray(x), a, b)
    np.testing.assert_array_equal(np.asarray(y), expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: jnp.dtype(d).name)
def test_python_literals_take_the_tiles_type(dtype):
    x = _x(dtype)
    y = workbench.triton_call(x, N, kernel=literal, out_shape=jax.ShapeDtypeStruct((N,), dtype), grid=(2,), BLOCK=32)
    np.testing.assert_array_equal(np.asarray(y), literal_expected(np.asarray(x)))


def test_a_float_scalar_is_float32_not_the_tiles_type():
    """With bfloat16 `x`, `x * (1/3)` in float32 then rounded once differs from rounding 1/3 to bfloat16 first:
    the interpreter must do the former, as a GPU does."""
    x = _x(jnp.bfloat16)
    y = np.asarray(workbench.triton_call(x, N, 1 / 3, 0.0, kernel=affine, out_shape=jax.ShapeDtypeStruct((N,), x.dtype),
                                         grid=(2,), BLOCK=32), np.float32)
    weak = (np.asarray(x, np.float32) * np.float32(ml_dtypes.bfloat16(1 / 3))).astype(ml_dtypes.bfloat16)
    assert (y != weak.astype(np.float32)).any()


def test_a_scalar_no_launch_can_carry_is_a_value_error_naming_it():
    x = _x(jnp.float32)
    out = jax.ShapeDtypeStruct((N,), jnp.float32)
    for bad, message in ((np.float16(0.5), "a: a scalar of dtype float16"), ("2", "a: a str"),
                         (2 ** 70, "a: integer .* does not fit in 64 bits")):
        with pytest.raises(ValueError, match=message):
            workbench.triton_call(x, N, bad, 1.0, kernel=affine, out_shape=out, grid=(2,), BLOCK=32)


# ----------------------------------------------------------------------------- host-made tensor descriptors


@triton.jit
def descriptor_copy(x_desc, M, y, N: tl.constexpr, BM: tl.constexpr):
    """y = x through a [BM, N] descriptor box per program (rows past M read as the padding), in a loop that a
    GPU warp-specializes."""
    i = tl.program_id(0)
    o_n = tl.arange(0, N)
    for j in tl.range(0, 2, warp_specialize=True):
        o_m = (2 * i + j) * BM + tl.arange(0, BM)
        b_x = x_desc.load([(2 * i + j) * BM, 0])  # [BM, N]
        tl.store(y + o_m[:, None] * N + o_n[None, :], b_x, mask=o_m[:, None] < M)


def test_a_host_descriptor_reads_boxes_as_on_a_gpu():
    if signature.triton_version() < signature.HOST_DESCRIPTORS_SINCE:
        with pytest.raises(ValueError, match="TensorDescriptor: host-made tensor descriptors need Triton >= 3.8"):
            workbench.TensorDescriptor(jnp.zeros((40, 32), jnp.bfloat16), (16, 32))
        return
    x = jax.random.normal(jax.random.key(1), (40, 32), jnp.float32).astype(jnp.bfloat16)
    y = workbench.triton_call(workbench.TensorDescriptor(x, (16, 32)), 40, kernel=descriptor_copy,
                              out_shape=jax.ShapeDtypeStruct((40, 32), jnp.bfloat16), grid=(2,), N=32, BM=16)
    np.testing.assert_array_equal(np.asarray(y), np.asarray(x))
    under_jit = jax.jit(lambda x: workbench.triton_call(
        workbench.TensorDescriptor(x, (16, 32)), 40, kernel=descriptor_copy,
        out_shape=jax.ShapeDtypeStruct((40, 32), jnp.bfloat16), grid=(2,), N=32, BM=16))(x)
    np.testing.assert_array_equal(np.asarray(under_jit), np.asarray(x))

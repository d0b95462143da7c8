"""The launcher itself on a CUDA GPU (skipped elsewhere): typed scalars give what the interpreter gives
(tests/interpreter_cases.py's expectations, which the CPU tests hold the interpreter to), a host-made tensor
descriptor in a warp-specialized loop, a matmul fed by descriptors with the compiler's warps, an empty grid,
compiled kernels loaded from disk by the next process, Gluon kernels (tests/gluon_example.py), and the
autotuner's fallback to jaxlib's autotuning."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl

import workbench
from workbench import gpu_call, signature
from tests.interpreter_cases import affine_expected, literal_expected
from tests.test_interpreter import DTYPES, N, SCALARS, affine, descriptor_copy, literal

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]


def _x(dtype):
    return (jax.random.normal(jax.random.key(0), (N,), jnp.float32) * 3).astype(dtype)


def _either_rounding(y, expected, what):
    """Each element as the interpreter computes it, or with the product and sum fused into one multiply-add
    (one rounding: Triton compiles with fp fusion on, and the compiler may or may not contract)."""
    y = np.asarray(y)
    ok = (y == expected(False)) | (y == expected(True))
    assert ok.all(), (what, y[~ok], expected(False)[~ok], expected(True)[~ok])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: jnp.dtype(d).name)
def test_scalars_of_every_kind_give_what_the_interpreter_gives(dtype):
    x = _x(dtype)
    for kind, (a, b) in SCALARS.items():
        y = workbench.triton_call(x, N, a, b, kernel=affine, out_shape=jax.ShapeDtypeStruct((N,), dtype), grid=(2,),
                                  BLOCK=32)
        _either_rounding(y, lambda fused: affine_expected(np.asarray(x), a, b, fused), kind)
    y = workbench.triton_call(x, N, kernel=literal, out_shape=jax.ShapeDtypeStruct((N,), dtype), grid=(2,), BLOCK=32)
    _either_rounding(y, lambda fused: literal_expected(np.asarray(x), fused), "literals")


def test_a_host_descriptor_in_a_warp_specialized_loop():
    x = jax.random.normal(jax.random.key(1), (40, 32), jnp.float32).astype(jnp.bfloat16)
    y = workbench.triton_call(workbench.TensorDescriptor(x, (16, 32)), 40, kernel=descriptor_copy,
                              out_shape=jax.ShapeDtypeStruct((40, 32), jnp.bfloat16), grid=(2,), N=32, BM=16)
    np.testing.assert_array_equal(np.asarray(y), np.asarray(x))


@triton.jit
def descriptor_matmul(a_desc, b_desc, M, N, K, c, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """c = a @ b for bfloat16 a [M, K], b [K, N], one [BM, BN] tile per program, its K loop warp-specialized
    (a producer loading through the descriptors, consumers multiplying)."""
    i_m, i_n = tl.program_id(0), tl.program_id(1)
    acc = tl.zeros([BM, BN], tl.float32)
    for k in tl.range(0, tl.cdiv(K, BK), warp_specialize=True):
        acc = tl.dot(a_desc.load([i_m * BM, k * BK]), b_desc.load([k * BK, i_n * BN]), acc)
    o_m, o_n = i_m * BM + tl.arange(0, BM), i_n * BN + tl.arange(0, BN)
    tl.store(c + o_m[:, None] * N + o_n[None, :], acc, mask=(o_m[:, None] < M) & (o_n[None, :] < N))


def test_a_warp_specialized_matmul_fed_by_host_descriptors_runs_with_the_compilers_warps():
    M, N_, K = 1000, 520, 768
    a = jax.random.normal(jax.random.key(2), (M, K), jnp.float32).astype(jnp.bfloat16)
    b = jax.random.normal(jax.random.key(3), (K, N_), jnp.float32).astype(jnp.bfloat16)
    # 64 × 128 tiles on 4 warps: Triton 3.8 and 3.9 specialize the loop into 12 warps (a producer and two
    # consumer groups; 128 × 128 tiles fail to compile there with host descriptors, checked on a CPU)
    c = workbench.triton_call(workbench.TensorDescriptor(a, (64, 64)), workbench.TensorDescriptor(b, (64, 128)),
                              M, N_, K, kernel=descriptor_matmul, out_shape=jax.ShapeDtypeStruct((M, N_), jnp.float32),
                              grid=(triton.cdiv(M, 64), triton.cdiv(N_, 128)), num_warps=4, num_stages=3,
                              BM=64, BN=128, BK=64)
    exact = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    assert np.abs(np.asarray(c) - exact).max() <= 1e-3 * np.abs(exact).max()
    (warps,) = {r.num_warps for r in gpu_call._COMPILED.values() if r.name.startswith("descriptor_matmul")}
    assert warps > 4, f"descriptor_matmul was not warp-specialized (runs {warps} warps), so this tests nothing"


def test_an_empty_grid_leaves_outputs_as_the_interpreter_does():
    x = _x(jnp.float32)
    y = workbench.triton_call(x, N, 2.0, 1.0, kernel=affine, out_shape=jax.ShapeDtypeStruct((N,), jnp.float32),
                              grid=(0,), BLOCK=32)
    assert jnp.isnan(y).all()


LOAD = """
import json, sys
import jax, jax.numpy as jnp
import workbench
from workbench import gpu_call
from tests.test_interpreter import affine, N
x = jnp.ones(N, jnp.bfloat16)
workbench.triton_call(x, N, 2.0, 1.0, kernel=affine, out_shape=jax.ShapeDtypeStruct((N,), jnp.bfloat16), grid=(2,),
                      BLOCK=32).block_until_ready()
print(json.dumps(dict(gpu_call.STATS)))
"""


def test_the_next_process_loads_compiled_kernels_from_disk(tmp_path):
    env = {**os.environ, "WORKBENCH_CACHE_DIR": str(tmp_path), "WORKBENCH_AUTOTUNE": "table",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    runs = [subprocess.run([sys.executable, "-c", LOAD], env=env, cwd=ROOT, capture_output=True, text=True,
                           timeout=300) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]
    first, second = (json.loads(r.stdout.strip().splitlines()[-1]) for r in runs)
    assert first == {"kernels_compiled": 1} and second == {"kernels_loaded": 1}
    assert signature.triton_version() >= (3, 7, 1)


def _gluon_ready() -> bool:
    return tuple(int(p) for p in triton.__version__.split(".")[:2]) >= (3, 9)


@pytest.mark.parametrize("maxnreg", [None, 32])
def test_a_gluon_kernel_launches_through_triton_call(maxnreg):
    """A Gluon kernel compiles from Gluon's own source and launches like any other, with or without a register
    cap; on a Triton older than 3.9 the launch says which version it needs."""
    from tests.gluon_example import scale_rows

    x = _x(jnp.float32)
    call = lambda: workbench.triton_call(x, N, 2.5, kernel=scale_rows, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),  # noqa: E731
                                         grid=(triton.cdiv(N, 4096),), num_warps=4, maxnreg=maxnreg, BLOCK=4096, NW=4)
    if not _gluon_ready():
        with pytest.raises(ValueError, match="Gluon kernel, which workbench compiles with Triton 3.9 or later"):
            call()
        return
    np.testing.assert_array_equal(np.asarray(call()), np.asarray(x) * np.float32(2.5))


@pytest.mark.skipif(not _gluon_ready(), reason="Gluon kernels need Triton 3.9 (the test above covers older ones)")
def test_a_warp_specialized_gluon_kernel_runs_with_its_partitions_warps_and_scratch():
    """Gluon's warp_specialize adds a loading warp (rounded up to a warp group: 8 warps where 4 were asked) and the
    TMA descriptor made on the device needs global scratch: the launch gives both."""
    from tests.gluon_example import double_rows_specialized

    x = jax.random.normal(jax.random.key(3), (256, 64), jnp.float32)
    y = workbench.triton_call(x, 256, kernel=double_rows_specialized, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(4,), num_warps=4, R=64, C=64, NW=4)
    np.testing.assert_array_equal(np.asarray(y), 2 * np.asarray(x))
    (compiled,) = [r for r in gpu_call._COMPILED.values() if r.name.startswith("double_rows_specialized")]
    assert compiled.num_warps > 4 and compiled.global_scratch_size > 0, compiled


@pytest.mark.skipif(not _gluon_ready(), reason="Gluon kernels need Triton 3.9 (the test above covers older ones)")
def test_a_launch_with_global_scratch_leaves_every_default_pool_keeping_freed_memory():
    """jaxlib allocates a kernel's global scratch from the device's default pool at every launch; the launcher has
    the pools keep what is freed (scratch_pool.py); before, each launch cost ~0.2 ms more host time on an H200."""
    from tests.gluon_example import double_rows_specialized
    from workbench import scratch_pool

    x = jax.random.normal(jax.random.key(4), (256, 64), jnp.float32)
    y = workbench.triton_call(x, 256, kernel=double_rows_specialized, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(4,), num_warps=4, R=64, C=64, NW=4)
    np.testing.assert_array_equal(np.asarray(y), 2 * np.asarray(x))
    thresholds = scratch_pool.release_thresholds(scratch_pool.driver())
    assert thresholds and min(thresholds) >= scratch_pool.RELEASE_THRESHOLD, thresholds


@triton.autotune(configs=[triton.Config({"BLOCK": 16}, num_warps=1), triton.Config({"BLOCK": 64}, num_warps=2)],
                 key=["n"])
@triton.jit
def flagged_double(x, flags, n, y, BLOCK: tl.constexpr):
    """y_i = 2 x_i where flags[i mod 4] != 0, else x_i: an integer input read by every program."""
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    f = tl.load(flags + o % 4, mask=m, other=0)
    v = tl.load(x + o, mask=m)
    tl.store(y + o, tl.where(f != 0, v * 2, v), mask=m)


def test_a_traced_integer_input_without_a_stand_in_falls_back_to_jaxlibs_autotuning():
    """Under jit an integer array made inside the program has no value to tune on and the caller gave no
    stand-in: the launch hands every config to jaxlib's autotuner (`gpu_call.launch_autotuned`), which times them
    on the real buffers at the first execution. The result must be the kernel's whichever config it keeps. (A
    branch whose kernels fell back so on an H200, 2026-11-29, then faulted with CUDA_ERROR_ILLEGAL_ADDRESS; this
    path had no GPU test.)"""
    from workbench import autotune

    n = 1000
    x = jax.random.normal(jax.random.key(5), (n,), jnp.float32)
    before = autotune.STATS["fallback"]

    def doubled(x):
        flags = (x[:4] > 0).astype(jnp.int32)  # traced: no concrete value at trace time
        return workbench.triton_call(x, flags, n, kernel=flagged_double, out_shape=jax.ShapeDtypeStruct((n,), x.dtype),
                                     grid=lambda meta: (triton.cdiv(n, meta["BLOCK"]),))

    with pytest.warns(UserWarning, match="autotuned at its first run, uncached: its integer argument"):
        y = jax.jit(doubled)(x)
    assert autotune.STATS["fallback"] > before
    xs = np.asarray(x)
    flags = xs[:4] > 0
    np.testing.assert_array_equal(np.asarray(y), np.where(flags[np.arange(n) % 4], 2 * xs, xs))
    np.testing.assert_array_equal(np.asarray(jax.jit(doubled)(x)), np.asarray(y))  # the kept config again

"""The launcher's own contract (`workbench.launch`), on toy kernels defined here.

Each test states one promise of `launch.triton_call` (jax-triton's calling convention, run in
Triton's interpreter on a CPU) and checks it with a kernel small enough to read at a glance:
jit, callable grids, autotune configs chosen with `interpreter_config`, heuristics on `None`
inputs, exact dtype round trips, NaN-filled outputs, custom VJPs, aliasing and vmap.
"""

import functools

import workbench  # noqa: F401  (first: configures Triton's interpreter before triton loads)
from workbench import launch

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl

N = 300  # not a multiple of any block size below
BLOCK = 64


def cdiv_grid(n):
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


# ----------------------------------------------------------------------------- toy kernels


@triton.jit
def add_kernel(x, y, out, n: tl.constexpr, BLOCK: tl.constexpr):
    o_i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m_i = o_i < n
    b_x = tl.load(x + o_i, mask=m_i)
    b_y = tl.load(y + o_i, mask=m_i)
    tl.store(out + o_i, b_x + b_y, mask=m_i)


@triton.jit
def axpy_kernel(x, alpha, y, out, n: tl.constexpr, BLOCK: tl.constexpr):
    """out = alpha * x + y, with `alpha` a positional Python scalar between the arrays."""
    o_i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m_i = o_i < n
    b_x = tl.load(x + o_i, mask=m_i)
    b_y = tl.load(y + o_i, mask=m_i)
    tl.store(out + o_i, alpha * b_x + b_y, mask=m_i)


@triton.jit
def mul_kernel(x, y, out, n: tl.constexpr, BLOCK: tl.constexpr):
    o_i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m_i = o_i < n
    tl.store(out + o_i, tl.load(x + o_i, mask=m_i) * tl.load(y + o_i, mask=m_i), mask=m_i)


@triton.jit
def copy_kernel(x, out, n: tl.constexpr, BLOCK: tl.constexpr):
    o_i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m_i = o_i < n
    tl.store(out + o_i, tl.load(x + o_i, mask=m_i), mask=m_i)


@triton.jit
def double_kernel(x, out, n: tl.constexpr, BLOCK: tl.constexpr):
    """out = x + x in float32: exact, and wrong if the dtype were misread on the way in or out.

    (Triton's interpreter keeps bfloat16 tiles as raw uint16 bits, so arithmetic happens after a
    cast to float32, as in every workbench kernel.)
    """
    o_i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m_i = o_i < n
    b_x = tl.load(x + o_i, mask=m_i).to(tl.float32)
    tl.store(out + o_i, (b_x + b_x).to(out.dtype.element_ty), mask=m_i)


def _prune_small_blocks(configs, named_args, **_):
    return [c for c in configs if c.kwargs["BLOCK"] >= 64]


AUTOTUNE_CONFIGS = [triton.Config({"BLOCK": b}) for b in (32, 64, 128)]


@triton.jit
def _add_and_record_program(x, y, out, pid_of, n: tl.constexpr, BLOCK: tl.constexpr):
    """out = x + y; pid_of[i] = the program that wrote element i (reveals the BLOCK in use)."""
    i_p = tl.program_id(0)
    o_i = i_p * BLOCK + tl.arange(0, BLOCK)
    m_i = o_i < n
    tl.store(out + o_i, tl.load(x + o_i, mask=m_i) + tl.load(y + o_i, mask=m_i), mask=m_i)
    tl.store(pid_of + o_i, i_p + tl.zeros([BLOCK], tl.int32), mask=m_i)


# Two autotuners over the same kernel: all configs, and configs pruned by size.
tuned_add_kernel = triton.autotune(configs=AUTOTUNE_CONFIGS, key=["n"])(_add_and_record_program)
pruned_add_kernel = triton.autotune(
    configs=[triton.Config({"BLOCK": b}) for b in (32, 64, 128)],
    key=["n"],
    prune_configs_by={"early_config_prune": _prune_small_blocks},
)(_add_and_record_program)


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (32, 128)], key=["n"])
@triton.heuristics({"HAS_Y": launch.given("y")})
@triton.jit
def optional_add_kernel(x, y, out, n: tl.constexpr, BLOCK: tl.constexpr, HAS_Y: tl.constexpr):
    """out = x + y, or x when y is None."""
    o_i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m_i = o_i < n
    b_o = tl.load(x + o_i, mask=m_i)
    if HAS_Y:
        b_o += tl.load(y + o_i, mask=m_i)
    tl.store(out + o_i, b_o, mask=m_i)


@triton.heuristics({"HAS_Y": launch.given("y")})
@triton.autotune(configs=[triton.Config({"BLOCK": 32})], key=["n"])
@triton.jit
def misordered_kernel(x, y, out, n: tl.constexpr, BLOCK: tl.constexpr, HAS_Y: tl.constexpr):
    o_i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + o_i, tl.load(x + o_i, mask=o_i < n), mask=o_i < n)


@triton.jit
def half_write_kernel(x, out, count, n: tl.constexpr, BLOCK: tl.constexpr):
    """Writes out[:n//2] = x[:n//2] and count[:n//2] = 1; leaves the second halves alone."""
    o_i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m_i = o_i < n // 2
    tl.store(out + o_i, tl.load(x + o_i, mask=m_i), mask=m_i)
    tl.store(count + o_i, 1 + tl.zeros([BLOCK], tl.int32), mask=m_i)


@triton.jit
def accumulate_kernel(x, acc, out, n: tl.constexpr, BLOCK: tl.constexpr):
    """out += x on the first half only, where out is aliased to `acc` (reads its own output)."""
    o_i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m_i = o_i < n // 2
    b_o = tl.load(out + o_i, mask=m_i)
    tl.store(out + o_i, b_o + tl.load(x + o_i, mask=m_i), mask=m_i)


# ----------------------------------------------------------------------------- helpers


def _inputs(n=N, dtype=jnp.float32, seed=0):
    kx, ky = jax.random.split(jax.random.key(seed))
    return jax.random.normal(kx, (n,), dtype), jax.random.normal(ky, (n,), dtype)


def add(x, y, **kw):
    n = x.shape[0]
    return launch.triton_call(x, y, kernel=add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(triton.cdiv(n, BLOCK),), n=n, BLOCK=BLOCK, **kw)


def mul(x, y):
    n = x.shape[0]
    return launch.triton_call(x, y, kernel=mul_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=cdiv_grid(n), n=n, BLOCK=BLOCK)


def tuned_add(kernel, x, y):
    n = x.shape[0]
    return launch.triton_call(
        x, y, kernel=kernel,
        out_shape=[jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(x.shape, jnp.int32)],
        grid=cdiv_grid(n), n=n,
    )


def bits(x):
    x = np.asarray(x)
    return x.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])


# ----------------------------------------------------------------------------- calling convention


def test_interpreter_is_used_on_this_machine():
    assert launch.INTERPRET, "these tests describe the CPU path; the GPU path is jax-triton's"


def test_add_under_jit():
    x, y = _inputs()
    out = jax.jit(add)(x, y)
    assert out.shape == x.shape and out.dtype == x.dtype
    np.testing.assert_array_equal(out, x + y)


def test_add_eager_and_jit_agree_on_a_second_shape():
    x, y = _inputs(n=BLOCK * 3 + 1, seed=1)
    np.testing.assert_array_equal(add(x, y), np.asarray(x) + np.asarray(y))
    np.testing.assert_array_equal(jax.jit(add)(x, y), np.asarray(x) + np.asarray(y))


def test_callable_grid_sees_meta_parameters():
    x, y = _inputs()
    seen = []

    def grid(meta):
        seen.append(meta["BLOCK"])
        return (triton.cdiv(N, meta["BLOCK"]),)

    out = launch.triton_call(x, y, kernel=add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                             grid=grid, n=N, BLOCK=32)
    np.testing.assert_array_equal(out, x + y)  # 10 programs of 32: a grid of 1 would leave NaN
    assert seen == [32]


def test_int_grid():
    x, y = _inputs(n=BLOCK * 4)
    out = launch.triton_call(x, y, kernel=add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                             grid=4, n=BLOCK * 4, BLOCK=BLOCK)
    np.testing.assert_array_equal(out, x + y)


def test_positional_python_scalar():
    x, y = _inputs()
    out = jax.jit(lambda x, y: launch.triton_call(
        x, 2.5, y, kernel=axpy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=cdiv_grid(N), n=N, BLOCK=BLOCK))(x, y)
    np.testing.assert_allclose(out, 2.5 * np.asarray(x) + np.asarray(y), rtol=1e-6, atol=1e-6)


def test_single_out_shape_returns_array_and_list_returns_list():
    x, y = _inputs()
    single = add(x, y)
    assert isinstance(single, jax.Array)
    listed = launch.triton_call(x, y, kernel=add_kernel, out_shape=[jax.ShapeDtypeStruct(x.shape, x.dtype)],
                                grid=cdiv_grid(N), n=N, BLOCK=BLOCK)
    assert isinstance(listed, list) and len(listed) == 1
    np.testing.assert_array_equal(listed[0], single)


# ----------------------------------------------------------------------------- autotune


@pytest.mark.parametrize("index", range(len(AUTOTUNE_CONFIGS)),
                         ids=[f"BLOCK{c.kwargs['BLOCK']}" for c in AUTOTUNE_CONFIGS])
def test_interpreter_config_runs_the_chosen_config(index):
    x, y = _inputs()
    with launch.interpreter_config(tuned_add_kernel, index) as config:
        out, pid_of = tuned_add(tuned_add_kernel, x, y)
        jax.block_until_ready((out, pid_of))
    assert config is AUTOTUNE_CONFIGS[index]
    np.testing.assert_array_equal(out, x + y)
    block = AUTOTUNE_CONFIGS[index].kwargs["BLOCK"]
    np.testing.assert_array_equal(pid_of, np.arange(N) // block)


def test_interpreter_config_is_read_when_a_jitted_kernel_runs():
    x, y = _inputs()
    fn = jax.jit(lambda x, y: tuned_add(tuned_add_kernel, x, y))
    used = []
    for index in (2, 0):
        with launch.interpreter_config(tuned_add_kernel, index):
            out, pid_of = jax.block_until_ready(fn(x, y))
        np.testing.assert_array_equal(out, x + y)
        used.append(int(np.asarray(pid_of)[-1]))
    assert used == [(N - 1) // 128, (N - 1) // 32]


def test_without_a_choice_the_first_config_runs_and_choices_nest():
    x, y = _inputs()
    _, pid_of = tuned_add(tuned_add_kernel, x, y)
    np.testing.assert_array_equal(pid_of, np.arange(N) // 32)
    with launch.interpreter_config(tuned_add_kernel, 2):
        with launch.interpreter_config(tuned_add_kernel, 1):
            _, inner = jax.block_until_ready(tuned_add(tuned_add_kernel, x, y))
        _, outer = jax.block_until_ready(tuned_add(tuned_add_kernel, x, y))
    _, after = tuned_add(tuned_add_kernel, x, y)
    np.testing.assert_array_equal(inner, np.arange(N) // 64)
    np.testing.assert_array_equal(outer, np.arange(N) // 128)
    np.testing.assert_array_equal(after, np.arange(N) // 32)


def test_default_config_is_the_first_that_survives_pruning():
    x, y = _inputs()
    out, pid_of = tuned_add(pruned_add_kernel, x, y)
    np.testing.assert_array_equal(out, x + y)
    np.testing.assert_array_equal(pid_of, np.arange(N) // 64)


@pytest.mark.parametrize("index", [-1, 3])
def test_interpreter_config_index_out_of_range(index):
    with pytest.raises(ValueError, match="index"):
        with launch.interpreter_config(tuned_add_kernel, index):
            pass


def test_autotune_configs_lists_configs():
    assert launch.autotune_configs(tuned_add_kernel) == AUTOTUNE_CONFIGS
    assert launch.autotune_configs(add_kernel) == []


# ----------------------------------------------------------------------------- heuristics and None


def optional_add(x, y):
    n = x.shape[0]
    return launch.triton_call(x, y, kernel=optional_add_kernel,
                              out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=cdiv_grid(n), n=n)


def test_given_and_none_argument():
    x, y = _inputs()
    np.testing.assert_array_equal(optional_add(x, y), x + y)
    np.testing.assert_array_equal(optional_add(x, None), x)
    np.testing.assert_array_equal(jax.jit(lambda x: optional_add(x, None))(x), x)


@pytest.mark.parametrize("index", [0, 1])
def test_heuristics_under_each_autotune_config(index):
    x, y = _inputs()
    with launch.interpreter_config(optional_add_kernel, index):
        with_y, without_y = jax.block_until_ready((optional_add(x, y), optional_add(x, None)))
    np.testing.assert_array_equal(with_y, x + y)
    np.testing.assert_array_equal(without_y, x)


def test_is_given_and_absent():
    assert not launch.is_given(None)
    assert not launch.is_given(launch.absent())
    assert launch.is_given(jnp.zeros((3,)))
    assert launch.is_given(jnp.zeros((0, 2)))  # empty, but not the placeholder's shape
    rule = launch.given("y")
    assert rule({"y": jnp.ones(2)}) and not rule({"y": launch.absent()})


def test_autotune_below_heuristics_is_refused():
    x, _ = _inputs()
    with pytest.raises(Exception, match="autotune outermost"):
        launch.triton_call(x, None, kernel=misordered_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                           grid=cdiv_grid(N), n=N)


# ----------------------------------------------------------------------------- dtypes


def _special_values(dtype):
    finfo = jnp.finfo(dtype)
    return jnp.array([0.0, -0.0, 1.0, -1.0, float(finfo.tiny), -float(finfo.tiny), float(finfo.eps),
                      float(finfo.max) / 4, -float(finfo.max) / 4, float(finfo.smallest_subnormal),
                      float("inf"), -float("inf")], dtype)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16], ids=lambda d: jnp.dtype(d).name)
def test_dtype_round_trips_exactly(dtype):
    x, _ = _inputs(dtype=dtype)
    x = jnp.concatenate([x * 1000, _special_values(dtype)])  # wide exponents, subnormals, ±0, ±inf
    n = x.shape[0]

    def call(kernel, x):
        return launch.triton_call(x, kernel=kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                  grid=cdiv_grid(n), n=n, BLOCK=BLOCK)

    copied = jax.jit(functools.partial(call, copy_kernel))(x)
    assert copied.dtype == x.dtype
    np.testing.assert_array_equal(bits(copied), bits(x))  # bit for bit: signed zeros, subnormals
    doubled = call(double_kernel, x)
    assert doubled.dtype == x.dtype
    normal = np.abs(np.asarray(x, np.float32)) >= float(jnp.finfo(dtype).tiny)  # FTZ is not the point
    np.testing.assert_array_equal(bits(doubled)[normal], bits(np.asarray(x) * 2)[normal])


# ----------------------------------------------------------------------------- unwritten outputs


def half_write(x, **kw):
    n = x.shape[0]
    return launch.triton_call(
        x, kernel=half_write_kernel,
        out_shape=[jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(x.shape, jnp.int32)],
        grid=cdiv_grid(n), n=n, BLOCK=BLOCK, **kw)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16], ids=lambda d: jnp.dtype(d).name)
def test_unwritten_output_is_nan(dtype):
    x, _ = _inputs(dtype=dtype)
    out, count = jax.jit(half_write)(x)
    out = np.asarray(out, np.float32)
    np.testing.assert_array_equal(out[:N // 2], np.asarray(x[:N // 2], np.float32))
    assert np.all(np.isnan(out[N // 2:]))
    np.testing.assert_array_equal(np.asarray(count)[:N // 2], 1)
    np.testing.assert_array_equal(np.asarray(count)[N // 2:], np.iinfo(np.int32).min)


@pytest.mark.parametrize("zeroed", [(0,), (0, 1), "callable"])
def test_zeroed_outputs_start_at_zero(zeroed):
    x, _ = _inputs()
    seen = []
    if zeroed == "callable":
        def zeroed(meta):
            seen.append(meta["BLOCK"])
            return (0,)
    out, count = half_write(x, zeroed_outputs=zeroed)
    assert seen == ([] if isinstance(zeroed, tuple) else [BLOCK])
    np.testing.assert_array_equal(out[:N // 2], x[:N // 2])
    np.testing.assert_array_equal(out[N // 2:], 0.0)
    expected_tail = 0 if zeroed == (0, 1) else np.iinfo(np.int32).min
    np.testing.assert_array_equal(np.asarray(count)[N // 2:], expected_tail)


# ----------------------------------------------------------------------------- autodiff, aliasing, vmap


@jax.custom_vjp
def square(x):
    return mul(x, x)


def _square_fwd(x):
    return mul(x, x), x


def _square_bwd(x, ct):
    return (mul(ct, x + x),)


square.defvjp(_square_fwd, _square_bwd)


def test_custom_vjp_under_grad_and_jit():
    x, w = _inputs(seed=3)
    loss = lambda x: jnp.vdot(square(x), w)  # noqa: E731  (random weights, not .sum())
    expected = 2 * np.asarray(x) * np.asarray(w)
    np.testing.assert_allclose(jax.grad(loss)(x), expected, rtol=1e-6)
    np.testing.assert_allclose(jax.jit(jax.grad(loss))(x), expected, rtol=1e-6)
    np.testing.assert_allclose(jax.jit(square)(x), np.asarray(x) ** 2, rtol=1e-6)


def test_custom_vjp_under_vjp_with_cotangent():
    x, ct = _inputs(seed=4)
    out, pullback = jax.vjp(square, x)
    (dx,) = pullback(ct)
    np.testing.assert_allclose(out, np.asarray(x) ** 2, rtol=1e-6)
    np.testing.assert_allclose(dx, 2 * np.asarray(x) * np.asarray(ct), rtol=1e-6)


def accumulate(x, acc):
    n = x.shape[0]
    return launch.triton_call(x, acc, kernel=accumulate_kernel, out_shape=jax.ShapeDtypeStruct(acc.shape, acc.dtype),
                              grid=cdiv_grid(n), input_output_aliases={1: 0}, n=n, BLOCK=BLOCK)


def test_input_output_aliases():
    x, acc = _inputs(seed=5)
    out = jax.jit(accumulate)(x, acc)
    expected = np.asarray(acc).copy()
    expected[:N // 2] += np.asarray(x)[:N // 2]
    np.testing.assert_allclose(out, expected, rtol=1e-6)  # unaliased, the tail would be NaN
    np.testing.assert_array_equal(out[N // 2:], acc[N // 2:])


def test_vmap_runs_sequentially():
    kx, ky = jax.random.split(jax.random.key(6))
    xs = jax.random.normal(kx, (3, N))
    ys = jax.random.normal(ky, (3, N))
    np.testing.assert_array_equal(jax.vmap(add)(xs, ys), xs + ys)
    np.testing.assert_array_equal(jax.jit(jax.vmap(add, in_axes=(0, None)))(xs, ys[1]), xs + ys[1])
    np.testing.assert_array_equal(jax.vmap(add, in_axes=(1, 1), out_axes=1)(xs.T, ys.T), (xs + ys).T)


def test_vmap_of_custom_vjp_grad():
    kx, kw = jax.random.split(jax.random.key(7))
    xs = jax.random.normal(kx, (2, N))
    w = jax.random.normal(kw, (N,))
    grads = jax.vmap(jax.grad(lambda x: jnp.vdot(square(x), w)))(xs)
    np.testing.assert_allclose(grads, 2 * np.asarray(xs) * np.asarray(w), rtol=1e-6)


# ----------------------------------------------------------------------------- rounding on the way out


@triton.jit
def narrow_kernel(x, out, n: tl.constexpr, BLOCK: tl.constexpr):
    """out = x (float32) narrowed to out's dtype, as every kernel stores a low-precision result."""
    o_i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m_i = o_i < n
    tl.store(out + o_i, tl.load(x + o_i, mask=m_i).to(out.dtype.element_ty), mask=m_i)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=lambda d: jnp.dtype(d).name)
def test_float32_narrowing_rounds_to_nearest_even(dtype):
    """`.to(bfloat16/float16)` in a kernel rounds like XLA's `astype` (and the GPU's cvt.rn).

    Truncation instead would double the RMS rounding error of every low-precision output and put
    the kernels over their error budget on this path only.
    """
    x = jax.random.normal(jax.random.key(8), (4 * BLOCK,), jnp.float32)
    out = launch.triton_call(x, kernel=narrow_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, dtype),
                             grid=cdiv_grid(x.shape[0]), n=x.shape[0], BLOCK=BLOCK)
    np.testing.assert_array_equal(bits(out), bits(x.astype(dtype)))


# ----------------------------------------------------------------------------- helpers called from kernels


@triton.jit
def _scaled_exp(b_x, scale):
    return tl.exp(b_x * scale)


@triton.jit
def _softmax_row(b_x, scale):
    b_e = _scaled_exp(b_x - tl.max(b_x, axis=0), scale)  # a helper calling a helper
    return b_e / tl.sum(b_e, axis=0)


@triton.jit
def softmax_rows_kernel(x, out, scale, n: tl.constexpr, BLOCK: tl.constexpr):
    """One row of x [rows, n] per program; the work is done by nested @triton.jit helpers."""
    o_j = tl.arange(0, BLOCK)
    m_j = o_j < n
    b_x = tl.load(x + tl.program_id(0) * n + o_j, mask=m_j, other=float("-inf"))
    tl.store(out + tl.program_id(0) * n + o_j, _softmax_row(b_x, scale).to(tl.float32), mask=m_j)


def softmax_rows(x, scale=0.5):
    rows, n = x.shape
    return launch.triton_call(x, kernel=softmax_rows_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(rows,), scale=scale, n=n, BLOCK=64)


@pytest.mark.skipif(not launch.INTERPRET, reason="checks the interpreter path only")
def test_helpers_called_from_a_kernel_do_not_repatch_the_language(monkeypatch):
    """The launcher's fix of the interpreter's per-call re-patching (`_patch_interpreter_nested_calls`):
    helpers still compute the right thing, `triton.language` is patched once per launch whatever the
    number of helper calls, and every builtin is back to its original after the launch."""
    from triton.runtime import interpreter as interp

    sweeps = []
    original_sweep = interp._patch_builtin
    monkeypatch.setattr(interp, "_patch_builtin", lambda *a: sweeps.append(1) or original_sweep(*a))
    before = {name: getattr(tl, name) for name in ("load", "store", "exp", "max", "sum", "arange")}
    tensor_before = dict(vars(tl.tensor))

    x = jax.random.normal(jax.random.key(9), (8, 50), jnp.float32)
    # a first run rewrites the helpers (and Triton's own, e.g. tl.max), which adds names to their globals
    jax.block_until_ready(softmax_rows(x[:1]))
    counts = []
    for rows in (1, 8):  # 8 programs call the helpers 8 times as often
        sweeps.clear()
        out = jax.block_until_ready(softmax_rows(x[:rows]))
        counts.append(len(sweeps))
        np.testing.assert_allclose(out, jax.nn.softmax(0.5 * x[:rows], axis=-1), rtol=1e-5, atol=1e-7)
    assert counts[0] == counts[1] > 0, counts
    assert {name: getattr(tl, name) for name in before} == before
    assert {name: vars(tl.tensor).get(name) for name in tensor_before} == tensor_before


def test_a_gluon_kernel_in_the_interpreter_is_a_value_error_naming_it():
    """Triton's interpreter does not run Gluon: on a machine without a GPU a Gluon launch says so, rather than
    failing inside the interpreter."""
    from tests.gluon_example import scale_rows

    x = jnp.ones(40, jnp.float32)
    with pytest.raises(ValueError, match=r"^kernel: scale_rows is a Gluon kernel, which runs only compiled, on a GPU"):
        workbench.triton_call(x, 40, 2.0, kernel=scale_rows, out_shape=jax.ShapeDtypeStruct((40,), jnp.float32),
                              grid=(1,), BLOCK=64, NW=4)

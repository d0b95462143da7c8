"""Traced sequence bounds of any value (API.md, "Sequence bounds"): no op reads or writes outside its
buffers, none returns NaN, the Triton path equals the reference under the same rule; checkify turns
invalid bounds into an error naming them; the interpreter's address check catches what the rule
prevents.

Each case runs in a worker process (tests/bounds_worker.py) with the address check on, so a crash
fails the case rather than killing pytest.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from hypothesis import example, given
from hypothesis import strategies as st
from jax.experimental import checkify

import workbench
import workbench.testing
from workbench import _bounds, launch
from workbench.strategies import any_bounds, cu_seqlens, fewer_examples, seeds
from workbench.testing import rms_rel

from . import bounds_worker

T = bounds_worker.T
# ci: one bounds length (each new length retraces and compiles every op twice); dev: several
LENGTHS = (3,) if os.environ.get("HYPOTHESIS_PROFILE", "ci") == "ci" else (2, 3, 4, 6)
WORKER_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def worker():
    """Send a case to a worker process; a worker that dies fails the case and is replaced."""
    context = multiprocessing.get_context("spawn")
    make = lambda: concurrent.futures.ProcessPoolExecutor(1, mp_context=context,  # noqa: E731
                                                          initializer=bounds_worker.start)
    pool = [make()]

    def run(*args):
        try:
            return pool[0].submit(bounds_worker.run, *args).result(timeout=WORKER_TIMEOUT_S)
        except concurrent.futures.process.BrokenProcessPool:
            pool[0] = make()
            pytest.fail(f"the worker process died running {args} (a crash: out-of-bounds access?)")

    yield run
    pool[0].shutdown(cancel_futures=True)


def _rule(bounds):
    """The bounds rule in NumPy, written apart from `_bounds.bounds_rule`, and the rows inside."""
    cu = np.maximum.accumulate(np.clip(np.asarray(bounds, np.int64), 0, T))
    rows = np.arange(T)
    return cu, (rows >= cu[0]) & (rows < cu[-1])


@pytest.mark.parametrize("op", bounds_worker.OPS)
@fewer_examples(3)
@given(seed=seeds, bounds=any_bounds(T, LENGTHS))
@example(seed=0, bounds=[0, 10, 500])  # the table: past the end,
@example(seed=1, bounds=[0, -8, T])    # negative,
@example(seed=2, bounds=[0, 30, 20])   # decreasing
def test_traced_bounds_of_any_value(worker, op, seed, bounds):
    """Forward and every gradient finite; zero on rows outside every sequence; Triton = reference."""
    _check_case(op, bounds, worker(op, seed, bounds))


# the table, then bounds before cu[0] and after cu[N] with an empty sequence between
GPU_CASES = ([0, 10, 500], [0, -8, T], [0, 30, 20], [5, 12, 12, 33], [-3, 90, 7, 2 * T])


@pytest.mark.gpu
@pytest.mark.parametrize("op", bounds_worker.OPS)
def test_traced_bounds_compiled(worker, op):
    """The same on a GPU, compiled: a wild address there is an illegal-address error or silent corruption
    of another buffer, so each case must come back finite and equal to the reference."""
    for seed, bounds in enumerate(GPU_CASES):
        _check_case(op, bounds, worker(op, seed, bounds), tolerance=2e-5)


def _check_case(op, bounds, result, tolerance=2e-6):
    """Every output and gradient of the Triton path finite, zero on rows outside every sequence, and within
    `tolerance` (RMS-relative; float32 rounding of two summation orders) of the reference's — for a bfloat16
    op, within 2e-2 (two bfloat16 roundings of values near 1 differ by up to 8e-3; the oracle-budget tests
    hold the precision, this test the addresses and the rule)."""
    if op in bounds_worker.BF16_OPS:
        tolerance = 2e-2
    _, inside = _rule(bounds)
    triton_side, reference = result["triton"], result["reference"]
    for name, got in triton_side.items():
        want = reference[name]
        if name == "out1" and op.startswith("flash_attention"):  # lse: −inf or the sink on empty rows, as the reference
            assert np.array_equal(np.isneginf(got), np.isneginf(want)), f"{op} lse: −inf rows differ"
            got, want = np.where(np.isneginf(got), 0, got), np.where(np.isneginf(want), 0, want)
        assert np.all(np.isfinite(got)), f"{op} {name}: not finite for bounds {bounds}"
        if got.ndim >= 2 and got.shape[:2] == (1, T):  # a per-row array: nothing outside every sequence
            assert not np.any(got[0, ~inside]), f"{op} {name}: nonzero on rows outside every sequence"
        err = rms_rel(got, want)
        assert err <= tolerance, f"{op} {name}: Triton vs reference RMS-relative {err:.2e} for bounds {bounds}"


def test_rule_keeps_valid_bounds_and_makes_any_valid():
    """`bounds_rule` leaves valid bounds unchanged, and makes anything non-decreasing within [0, T]."""
    valid = jnp.asarray([0, 0, 7, 7, 30, T], jnp.int32)
    assert np.array_equal(_bounds.bounds_rule(valid, T), valid)
    rng = np.random.default_rng(0)
    for _ in range(20):
        raw = rng.integers(-2 * T, 3 * T, size=rng.integers(2, 8))
        got = np.asarray(_bounds.bounds_rule(jnp.asarray(raw, jnp.int32), T))
        assert np.array_equal(got, _rule(raw)[0])
        assert got.min() >= 0 and got.max() <= T and np.all(np.diff(got) >= 0)


@fewer_examples(30, minimum=10)
@given(bounds=cu_seqlens(max_total=200, max_seqs=6), chunk_size=st.sampled_from([16, 32, 64]))
def test_the_slot_table_of_numpy_bounds_equals_the_traced_ones(bounds, chunk_size):
    """`chunk_slots` on NumPy bounds (a fixed-length batch's, known when traced) gives the same five arrays,
    int32 where the traced ones are, as on the same bounds under `jit` (packed sequences with empty ones)."""
    cu = np.asarray(bounds, np.int32)
    total = int(cu[-1])
    host = _bounds.chunk_slots(cu, total, chunk_size)
    traced = jax.jit(_bounds.chunk_slots, static_argnums=(1, 2))(jnp.asarray(cu), total, chunk_size)
    assert all(isinstance(x, np.ndarray) for x in host)
    for name, h, t in zip(("start", "end", "seq", "first", "last"), host, traced):
        assert h.dtype == t.dtype and np.array_equal(h, np.asarray(t)), (name, bounds, chunk_size)


@fewer_examples(30, minimum=10)
@given(bounds=cu_seqlens(max_total=300, max_seqs=6), chunk_size=st.sampled_from([16, 32, 64]),
       n_seg=st.sampled_from([1, 2, 3, 8]))
def test_segment_rows_name_each_chunks_segment(bounds, chunk_size, n_seg):
    """`segment_rows` (the autotuner's stand-in for what the two-level sweeps store by slot): sequence n's chunk c
    is in segment j = the run of ⌈chunks / n_seg⌉ holding it (`tl_chunked.segment_chunks`), row n · n_seg + j, a
    row of the [N · n_seg] buffers; unused slots 0. NumPy and traced bounds agree (packed sequences with empty
    ones)."""
    cu = np.asarray(bounds, np.int32)
    total, N = int(cu[-1]), len(cu) - 1
    want = np.zeros(total // chunk_size + N + 1, np.int32)
    for n in range(N):
        chunks = -(-(int(cu[n + 1]) - int(cu[n])) // chunk_size)
        per = -(-chunks // n_seg)
        for j in range(n_seg):
            for c in range(min(j * per, chunks), min(j * per + per, chunks)):
                want[int(cu[n]) // chunk_size + n + c] = n * n_seg + j
    host = _bounds.segment_rows(cu, total, chunk_size, n_seg)
    traced = jax.jit(_bounds.segment_rows, static_argnums=(1, 2, 3))(jnp.asarray(cu), total, chunk_size, n_seg)
    assert np.array_equal(host, want) and np.array_equal(np.asarray(traced), want), (bounds, chunk_size, n_seg)
    assert host.max(initial=0) < N * n_seg


@pytest.mark.parametrize("op", ["chunk_gla", "chunk_kda"])
def test_a_fixed_length_batch_holds_its_slot_table_as_a_constant(op):
    """Without `cu_seqlens` the bounds are arange(B+1)·T, known when the op is traced: the lowered forward and
    backward hold the chunk-slot table as a constant, with no loop searching the bounds (XLA runs such a loop as
    a chain of small kernels at every call: four rounds at B = 8). With traced `cu_seqlens` the search stays."""
    B, T, H, D = 8, 64, 2, 16
    x = jax.ShapeDtypeStruct((B, T, H, D), jnp.float32)
    if op == "chunk_gla":
        call = lambda q, cu: workbench.chunk_gla(q, q, q, gk=q, cu_seqlens=cu, chunk_size=16)[0]  # noqa: E731
    else:
        call = lambda q, cu: workbench.chunk_kda(q, q, q, q, jnp.ones(q.shape[:3], q.dtype), cu_seqlens=cu,  # noqa: E731
                                                 chunk_size=16)[0]
    loss = lambda q, cu: call(q, cu).sum()  # noqa: E731
    fixed = jax.jit(jax.grad(lambda q: loss(q, None))).lower(x).as_text()
    assert "stablehlo.while" not in fixed and "stablehlo.gather" not in fixed, op
    packed = jax.ShapeDtypeStruct((1, B * T, H, D), jnp.float32)
    traced = jax.jit(jax.grad(loss)).lower(packed, jax.ShapeDtypeStruct((B + 1,), jnp.int32)).as_text()
    assert "stablehlo.while" in traced, op


def _chunk_gla(q, cu):
    gk = -0.1 * jnp.ones_like(q)
    return workbench.chunk_gla(q, q, q, gk=gk, cu_seqlens=cu, chunk_size=16)[0]


def test_checkify_names_the_bad_entry():
    """Under checkify (user_checks), invalid traced bounds raise naming the argument and the entry; valid
    ones pass; without checkify the same call returns (the rule applies) with no check."""
    q = jax.random.normal(jax.random.key(0), (1, T, 1, 16), jnp.float32)
    checked = checkify.checkify(jax.jit(_chunk_gla), errors=checkify.user_checks)
    err, _ = checked(q, jnp.asarray([0, 10, T], jnp.int32))
    assert err.get() is None
    for bounds, entry, value in (([0, 10, 500], 2, 500), ([0, -8, T], 1, -8), ([0, 30, 20], 2, 20),
                                 ([3, 10, T], 0, 3)):
        err, _ = checked(q, jnp.asarray(bounds, jnp.int32))
        message = err.get()
        assert message is not None and message.startswith("cu_seqlens:"), message
        assert f"entry {entry} is {value}" in message, message
    o = jax.jit(_chunk_gla)(q, jnp.asarray([0, 10, 500], jnp.int32))
    assert np.all(np.isfinite(o))


@pytest.mark.parametrize("argument", ["cu_seqlens_q", "cu_seqlens_k"])
def test_checkify_names_the_attention_argument(argument):
    q = jax.random.normal(jax.random.key(0), (1, T, 1, 16), jnp.float32)
    good, bad = jnp.asarray([0, 20, T], jnp.int32), jnp.asarray([0, 20, T + 1], jnp.int32)
    bounds = {"cu_seqlens_q": good, "cu_seqlens_k": good, argument: bad}

    def attention(q, cu_q, cu_k):
        return workbench.flash_attention(q, q, q, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)

    err, _ = checkify.checkify(jax.jit(attention), errors=checkify.user_checks)(
        q, bounds["cu_seqlens_q"], bounds["cu_seqlens_k"])
    assert err.get() is not None and err.get().startswith(f"{argument}:"), err.get()


def test_no_check_without_checkify():
    """Outside checkify the check is dropped when lowering: no callback, no custom call, no host sync."""
    q = jax.random.normal(jax.random.key(0), (1, T, 1, 16), jnp.float32)
    lowered = jax.jit(lambda q, cu: workbench.flash_attention(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu,
                                                               implementation="reference")).lower(
        q, jnp.asarray([0, 20, T], jnp.int32)).as_text()
    assert "custom_call" not in lowered and "callback" not in lowered
    assert "cu_seqlens_q: traced bounds" not in lowered


# ----------------------------------------------------------------------------- the interpreter's address check


@triton.jit
def _copy_kernel(x, n, y, SHIFT: tl.constexpr, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    tl.store(y + o, tl.load(x + (o + SHIFT), mask=o < n), mask=o < n)


@pytest.mark.skipif(not launch.INTERPRET, reason="the address check is the interpreter's")
@pytest.mark.parametrize("shift, ok", [(0, True), (1, False), (-1, False)])
def test_address_check_reports_kernel_and_offsets(monkeypatch, shift, ok):
    """In bounds (masked-off lanes past the end included): runs. One element before or past: fails with
    the kernel's name, the argument and the element offset."""
    monkeypatch.setenv(launch.CHECK_BOUNDS_VARIABLE, "1")
    x = jnp.arange(12, dtype=jnp.float32)
    call = lambda: launch.triton_call(x, 12, kernel=_copy_kernel,  # noqa: E731
                                      out_shape=jax.ShapeDtypeStruct((12,), jnp.float32), grid=(1,),
                                      SHIFT=shift, BLOCK=16)
    if ok:
        assert np.array_equal(np.asarray(call()), np.arange(12))
        return
    with pytest.raises(Exception, match="_copy_kernel: load of 1 element") as info:
        jax.block_until_ready(call())
    assert ("element offset +12 of 'x'" if shift > 0 else "element offset -1") in str(info.value)


@pytest.mark.skipif(not launch.INTERPRET, reason="the address check is the interpreter's")
def test_address_check_finds_the_unguarded_glue():
    """What the check was built for: with the bounds rule bypassed (the glue before issue 22), bounds past
    the end reach the kernels, and the check stops the first out-of-bounds load with its kernel's name
    — in a subprocess, since without the check that run may crash."""
    script = textwrap.dedent(f"""
        import os
        os.environ["{launch.CHECK_BOUNDS_VARIABLE}"] = "1"
        import sys
        import jax, jax.numpy as jnp, workbench
        glue = sys.modules["workbench.chunk_gla"]
        glue.packed_bounds = lambda cu, B, T, name="cu_seqlens": (cu.astype(jnp.int32), None)
        q = jax.random.normal(jax.random.key(0), (1, {T}, 1, 16), jnp.float32)
        f = jax.jit(lambda q, cu: workbench.chunk_gla(q, q, q, gk=-0.1 * jnp.ones_like(q), cu_seqlens=cu,
                                                      chunk_size=16)[0])
        try:
            jax.block_until_ready(f(q, jnp.asarray([0, 10, 60], jnp.int32)))
            print("NO ERROR")
        except Exception as err:
            print("CAUGHT", "OutOfBoundsError" in str(err), "chunk_h_kernel" in str(err))
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert "CAUGHT True True" in run.stdout, run.stdout + run.stderr[-2000:]


# ----------------------------------------------------------------------------- references at full precision


def test_references_pin_highest_precision():
    """Every matrix product of the references, forward and backward, is HIGHEST even where the caller's
    default is bfloat16 (on a GPU the default runs float32 products in TF32)."""
    from workbench.chunk_gla.reference import chunk_gla_ref
    from workbench.flash_attention.reference import attention_ref
    from workbench.kda.reference import chunk_kda_ref, recurrent_kda_ref
    from workbench.recurrent.reference import recurrent_ref

    q = jax.random.normal(jax.random.key(0), (1, 16, 1, 8), jnp.float32)
    w = jax.random.normal(jax.random.key(1), (1, 16, 1, 8), jnp.float32)
    g, beta = -0.1 * jnp.ones_like(q), jnp.full((1, 16, 1), 0.5, jnp.float32)
    calls = {
        "recurrent_ref": lambda q: recurrent_ref(q, q, q, gk=g)[0],
        "chunk_gla_ref": lambda q: chunk_gla_ref(q, q, q, gk=g, chunk_size=16)[0],
        "chunk_kda_ref": lambda q: chunk_kda_ref(q, q, q, g, beta, chunk_size=16)[0],
        "recurrent_kda_ref": lambda q: recurrent_kda_ref(q, q, q, g, beta)[0],
        "attention_ref": lambda q: attention_ref(q, q, q, scale=0.5)[0],
    }
    for name, call in calls.items():
        with jax.default_matmul_precision("bfloat16"):
            jaxpr = jax.make_jaxpr(jax.grad(lambda q, call=call: jnp.sum(w * call(q))))(q)  # no product of ours
        dots = [e for e in _equations(jaxpr.jaxpr) if e.primitive.name == "dot_general"]
        assert dots, name
        for eqn in dots:
            precision = eqn.params["precision"]
            assert precision is not None and all(p == jax.lax.Precision.HIGHEST for p in precision), (name, precision)


def _equations(jaxpr):
    """Every equation of a jaxpr and of the jaxprs nested in its equations' parameters (scan, cond, …)."""
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            for item in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(item, "jaxpr", item)  # a ClosedJaxpr holds a Jaxpr
                if hasattr(inner, "eqns"):
                    yield from _equations(inner)


@pytest.mark.gpu
def test_float32_reference_is_float32_on_gpu():
    """`implementation="reference"` in float32 on a GPU is as accurate as on a CPU (TF32 products, the GPU's
    default, gave 4e-4 against a float64 oracle on an H100); the oracle runs on the CPU in float64."""
    x = {name: np.asarray(a) for name, a in
         workbench.testing.attention_inputs(3, 2, 256, 256, 4, 2, 64).items()}
    o = workbench.flash_attention(**{n: jnp.asarray(a) for n, a in x.items()}, causal=True,
                                  implementation="reference")
    with jax.default_device(jax.devices("cpu")[0]):
        exact = workbench.flash_attention(**{n: jnp.asarray(a, jnp.float64) for n, a in x.items()}, causal=True,
                                          implementation="reference")
    assert rms_rel(o, exact) < 1e-6


@pytest.mark.parametrize("implementation", ["triton", "reference"])
@pytest.mark.parametrize("op", ["recurrent", "chunk_gla", "chunk_kda"])
def test_no_rows_at_all(op, implementation):
    """cu_seqlens [0, 0]: one empty sequence, zero rows. The output is empty, the final state is the initial
    one, and the initial state's gradient is the final state's cotangent, all exactly. (The chunkwise
    references once failed here, in a gather and a scatter that met an empty operand.)"""
    cu = jnp.array([0, 0], jnp.int32)
    H, K, V = 2, 8, 4
    x = jnp.zeros((1, 0, H, K), jnp.float32)
    v = jnp.zeros((1, 0, H, V), jnp.float32)
    h0 = jax.random.normal(jax.random.key(0), (1, H, K, V), jnp.float32)
    ct = jax.random.normal(jax.random.key(1), (1, H, K, V), jnp.float32)
    if op == "chunk_kda":
        def f(h0):
            return workbench.chunk_kda(x, x, v, x, jnp.zeros((1, 0, H), jnp.float32), initial_state=h0, cu_seqlens=cu,
                                       implementation=implementation)
    else:
        def f(h0):
            return getattr(workbench, op)(x, x, v, gk=x, initial_state=h0, cu_seqlens=cu, implementation=implementation)
    (o, final), pull = jax.vjp(f, h0)
    (dh0,) = pull((jnp.zeros_like(o), ct))
    assert o.shape == (1, 0, H, V)
    np.testing.assert_array_equal(np.asarray(final), np.asarray(h0))
    np.testing.assert_array_equal(np.asarray(dh0), np.asarray(ct))

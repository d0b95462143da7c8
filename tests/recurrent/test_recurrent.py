"""Properties of `workbench.recurrent`: the Triton kernels against the float64 oracle, and the laws
the recurrence obeys (varlen = a loop over sequences, state passing, reverse = flipped time, …).

Every comparison covers the forward outputs *and* the gradient of every differentiable input, with
random cotangents for both `o` and `final_state` (never `.sum()`). Inputs come from a drawn integer
seed (`testing.recurrent_inputs`), so one number in a failure report reproduces them.

Sizes stay small (T ≤ 64, K, V ≤ 64, B·H ≤ 4): on a CPU the kernels run in Triton's interpreter.
"""

import workbench  # noqa: F401  (first: configures Triton's interpreter before triton loads)

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from workbench import launch, strategies, testing
from workbench.recurrent import Tuning, kernels

from tests.helpers import distinct_configs

DIFFERENTIABLE = ("q", "k", "v", "g", "gk", "gv", "initial_state")
PER_STEP = ("q", "k", "v", "g", "gk", "gv")  # inputs with a time axis (axis 1)
GRAD_NAME = {"q": "dq", "k": "dk", "v": "dv", "g": "dg", "gk": "dgk", "gv": "dgv", "initial_state": "dh0"}
ALL_GATES = ("g", "g_gamma", "gk", "gv")
EXACT = 1e-5  # RMS-relative gap allowed between two float32 computations of the same sums
# Gate gradients are reverse cumulative sums of q⊙dq − k⊙dk (NOTES.md rec.8, rec.9) whose terms
# cancel: two float32 evaluations in different orders differ by ~1e-5 of the result.
GATE_GRADS = ("dg", "dgk", "dgv")
GATE_EXACT = 2e-4


pytestmark = pytest.mark.usefixtures("ieee_float32")


# The oracle property: half the profile's examples per dtype, at least 3 (each example compiles three
# VJPs; the pinned cases and the gate sweep below hold the oracle budget on fixed problems too).
half = strategies.fewer_examples(2, minimum=3)
# The laws below compare the kernel with itself under a transformation; a third of the profile's
# examples each.
law = strategies.fewer_examples(3, minimum=2)


# ----------------------------------------------------------------------------- helpers


@st.composite
def small_shapes(draw, seq_lens=strategies.seq_lens):
    """(B, T, H, K, V) with B·H ≤ 4, K and V drawn independently (often K ≠ V)."""
    B = draw(strategies.batches)
    H = draw(st.sampled_from([1, 2] if B == 2 else [1, 2, 3]))
    return B, draw(seq_lens), H, draw(strategies.head_dims), draw(strategies.head_dims)


short_seq_lens = st.sampled_from([1, 7, 16])
fast_oracle_seq_lens = st.sampled_from([1, 7, 16])  # T=63 is pinned below


def cotangents(seed, inputs, cu_seqlens=None):
    """Random cotangents for (o, final_state), in the dtypes of those outputs."""
    v, q = inputs["v"], inputs["q"]
    N = q.shape[0] if cu_seqlens is None else len(cu_seqlens) - 1
    shapes = (jax.ShapeDtypeStruct(v.shape, v.dtype),
              jax.ShapeDtypeStruct((N, q.shape[2], q.shape[3], v.shape[3]), jnp.float32))
    return testing.random_cotangents(seed, shapes)


def outputs_and_grads(inputs, cts, *, eager=False, **options):
    """{"o", "final_state", "dq", "dk", …}: the outputs and the VJP of every differentiable input.

    Compiled with `jax.jit` (one XLA program instead of op-by-op dispatch; `cu_seqlens` is then a
    traced argument, which API.md allows) unless `eager`.
    """
    if eager:
        return _outputs_and_grads(inputs, cts, **options)
    return _outputs_and_grads_jit(inputs, cts, **options)


def _outputs_and_grads(inputs, cts, **options):
    diff = {n: x for n, x in inputs.items() if n in DIFFERENTIABLE}
    rest = {n: x for n, x in inputs.items() if n not in DIFFERENTIABLE}
    (o, ht), pullback = jax.vjp(lambda d: workbench.recurrent(**d, **rest, **options), diff)
    (grads,) = pullback(cts)
    return {"o": o, "final_state": ht, **{GRAD_NAME[n]: x for n, x in grads.items()}}


_outputs_and_grads_jit = jax.jit(_outputs_and_grads,
                                 static_argnames=("implementation", "reverse", "scale", "tuning"))


def _split(inputs, kwargs):
    """(differentiable inputs, the other arrays, static options) of a call."""
    arrays = {**inputs, **{n: x for n, x in kwargs.items() if hasattr(x, "shape")}}
    diff = {n: x for n, x in arrays.items() if n in DIFFERENTIABLE}
    rest = {n: x for n, x in arrays.items() if n not in DIFFERENTIABLE}
    return diff, rest, {n: x for n, x in kwargs.items() if not hasattr(x, "shape")}


@functools.partial(jax.jit, static_argnames=("implementation", "reverse", "scale", "tuning"))
def _recurrent(diff, rest, implementation, reverse=False, scale=None, tuning=None):
    return workbench.recurrent(**diff, **rest, implementation=implementation, reverse=reverse, scale=scale,
                               tuning=tuning)


def check_against_oracle(inputs, seed, **kwargs):
    """`testing.check`: kernel and same-dtype reference against the float64 oracle, outputs and every
    gradient; print the report; hold the budget. Returns the kernel's outputs and gradients (float64)."""
    cts = cotangents(seed, inputs, kwargs.get("cu_seqlens"))
    diff, rest, static = _split(inputs, kwargs)
    report = testing.check(functools.partial(_recurrent, implementation="triton", **static),
                           functools.partial(_recurrent, implementation="reference", **static), (diff, rest),
                           argnums=(0,), cotangents=cts, output_names=("o", "final_state"), jit=False,
                           keep_arrays=("o", "final_state", *(f"d{n}" for n in diff)))
    shapes = {n: tuple(x.shape) for n, x in inputs.items() if hasattr(x, "shape")}
    print(f"\nrecurrent vs float64 oracle: seed={seed} {kwargs} {shapes}\n{report}")
    assert report["o"].dtype == inputs["v"].dtype and report["final_state"].dtype == "float32"
    report.raise_if_failed()
    return {name: kernel for name, (kernel, _) in report.arrays.items()}


def assert_same(actual, expected, tol=EXACT):
    """Two dicts of results agree name by name (RMS-relative, and finite); shapes and dtypes equal.

    Gate gradients get `GATE_EXACT` (see above) unless `tol` is looser.
    """
    assert set(actual) == set(expected)
    for name in expected:
        a, e = np.asarray(actual[name], np.float64), np.asarray(expected[name], np.float64)
        assert a.shape == e.shape, f"{name}: shape {a.shape} != {e.shape}"
        assert actual[name].dtype == expected[name].dtype, f"{name}: {actual[name].dtype} != {expected[name].dtype}"
        assert np.all(np.isfinite(a)), f"{name}: not finite"
        err = testing.rms_rel(a, e)
        limit = max(tol, GATE_EXACT) if name in GATE_GRADS else tol
        assert err <= limit, f"{name}: RMS-relative gap {err:.2e} > {limit:.0e} (max |Δ| {testing.max_abs(a, e):.2e})"


def flip_time(inputs):
    return {n: jnp.flip(x, 1) if n in PER_STEP else x for n, x in inputs.items()}


# ----------------------------------------------------------------------------- kernel ≈ oracle


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=lambda d: jnp.dtype(d).name)
@half
@given(seed=strategies.seeds, shape=small_shapes(fast_oracle_seq_lens), gates=strategies.gate_sets,
       strength=strategies.gate_strengths, reverse=st.booleans())
def test_matches_float64_oracle(dtype, seed, shape, gates, strength, reverse):
    B, T, H, K, V = shape
    inputs = testing.recurrent_inputs(seed, B, T, H, K, V, dtype=dtype, gates=gates, strength=strength)
    check_against_oracle(inputs, seed + 1, reverse=reverse)


PINNED = {
    "T1": dict(shape=(2, 1, 1, 16, 16)),
    "T63": dict(shape=(1, 63, 1, 8, 8)),
    "K60-V36-many-key-blocks": dict(shape=(1, 3, 1, 60, 36)),
    "H3-K12-V20": dict(shape=(1, 5, 3, 12, 20)),
    "scale-0.3-reverse": dict(shape=(2, 5, 1, 8, 24), scale=0.3, reverse=True),
    "float16": dict(shape=(1, 5, 2, 24, 16), dtype=jnp.float16),
    "varlen-empty-and-length-1-reverse": dict(shape=(1, 13, 1, 8, 12), cu_seqlens=[0, 0, 5, 6, 6, 13], reverse=True),
}


@pytest.mark.parametrize("case", PINNED.values(), ids=PINNED.keys())
def test_pinned_regressions(case):
    B, T, H, K, V = case["shape"]
    cu = case.get("cu_seqlens")
    inputs = testing.recurrent_inputs(7, B, T, H, K, V, dtype=case.get("dtype", jnp.float32), gates=ALL_GATES,
                                      n_seqs=None if cu is None else len(cu) - 1)
    kwargs = {n: case[n] for n in ("scale", "reverse") if n in case}
    if cu is not None:
        kwargs["cu_seqlens"] = jnp.asarray(cu, jnp.int32)
    check_against_oracle(inputs, 8, **kwargs)


@pytest.mark.parametrize("strength", [0.0, 1.0, 5.0, 12.0], ids=lambda s: f"strength{s:g}")
def test_gate_sweep_from_no_decay_to_strong_decay(strength):
    inputs = testing.recurrent_inputs(11, 1, 12, 1, 16, 12, gates=ALL_GATES, strength=strength)
    if strength >= 5:  # strong decay: log-decays of −5 and below are typical
        assert float(jnp.median(inputs["gk"])) <= -5.0
    kernel = check_against_oracle(inputs, 12)
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in kernel.values())


# ----------------------------------------------------------------------------- variable length


@st.composite
def packed_problems(draw):
    """(seed, cu_seqlens list, H, K, V, gates, reverse) for packed inputs."""
    return (draw(strategies.seeds), draw(strategies.cu_seqlens(max_total=32)), draw(st.sampled_from([1, 2])),
            draw(strategies.head_dims), draw(strategies.head_dims), draw(strategies.gate_sets), draw(st.booleans()))


@law
@given(problem=packed_problems())
@example(problem=(3, [0, 0, 1, 9, 9, 14], 1, 12, 8, ALL_GATES, False))
@example(problem=(4, [0, 5, 5, 6], 1, 24, 16, ("gk", "gv"), True))
def test_varlen_equals_per_sequence_loop(problem):
    check_varlen_loop(*problem, implementation="triton")


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_reference_varlen_equals_per_sequence_loop(reverse):
    """The reference's packed scan (state resets by searchsorted) is its own code path."""
    check_varlen_loop(21, [0, 0, 1, 6, 6, 11], 1, 12, 8, ALL_GATES, reverse, implementation="reference")


def check_varlen_loop(seed, bounds, H, K, V, gates, reverse, implementation):
    N, TT = len(bounds) - 1, bounds[-1]
    inputs = testing.recurrent_inputs(seed, 1, TT, H, K, V, gates=gates, n_seqs=N)
    cts = cotangents(seed + 1, inputs, bounds)
    packed = outputs_and_grads({**inputs, "cu_seqlens": jnp.asarray(bounds, jnp.int32)}, cts,
                               implementation=implementation, reverse=reverse)

    do, dht = cts
    h0 = inputs["initial_state"]
    pieces = []
    for n, (bos, eos) in enumerate(zip(bounds[:-1], bounds[1:])):
        if bos == eos:  # an empty sequence passes its state through: S_T = S_0, dS_0 = dS_T
            np.testing.assert_array_equal(packed["final_state"][n], h0[n])
            np.testing.assert_array_equal(packed["dh0"][n], dht[n])
            continue
        one = {name: x[:, bos:eos] if name in PER_STEP else x for name, x in inputs.items()}
        one["initial_state"] = h0[n:n + 1]
        pieces.append((n, bos, eos, outputs_and_grads(one, (do[:, bos:eos], dht[n:n + 1]),
                                                      implementation=implementation, reverse=reverse)))
    for n, bos, eos, alone in pieces:
        sliced = {name: (x[n:n + 1] if name in ("final_state", "dh0") else x[:, bos:eos])
                  for name, x in packed.items()}
        assert_same(sliced, alone)


def test_varlen_with_no_tokens_at_all():
    bounds = jnp.asarray([0, 0, 0], jnp.int32)
    inputs = testing.recurrent_inputs(5, 1, 0, 2, 8, 8, gates=ALL_GATES, n_seqs=2)
    cts = cotangents(6, inputs, bounds)
    out = outputs_and_grads({**inputs, "cu_seqlens": bounds}, cts)
    np.testing.assert_array_equal(out["final_state"], inputs["initial_state"])
    np.testing.assert_array_equal(out["dh0"], cts[1])
    assert out["o"].shape == (1, 0, 2, 8)


# ----------------------------------------------------------------------------- laws of the recurrence


@law
@given(seed=strategies.seeds, shape=small_shapes(st.sampled_from([2, 7, 16])), gates=strategies.gate_sets,
       split=st.sampled_from([0.25, 0.5, 0.75]), reverse=st.booleans())
def test_two_halves_with_state_passing_equal_one_run(seed, shape, gates, split, reverse):
    B, T, H, K, V = shape
    t1 = min(T - 1, max(1, round(T * split)))
    inputs = testing.recurrent_inputs(seed, B, T, H, K, V, gates=gates, strength=1.0)
    cts = cotangents(seed + 1, inputs)
    whole = outputs_and_grads(inputs, cts, reverse=reverse)

    def two_runs(q, k, v, g=None, g_gamma=None, gk=None, gv=None, initial_state=None, reverse=False):
        steps = dict(q=q, k=k, v=v, g=g, gk=gk, gv=gv)
        first = {n: None if x is None else x[:, :t1] for n, x in steps.items()}
        second = {n: None if x is None else x[:, t1:] for n, x in steps.items()}
        if reverse:  # time runs T-1 … 0: the second half is processed first
            o2, s = workbench.recurrent(**second, g_gamma=g_gamma, initial_state=initial_state, reverse=True)
            o1, s = workbench.recurrent(**first, g_gamma=g_gamma, initial_state=s, reverse=True)
        else:
            o1, s = workbench.recurrent(**first, g_gamma=g_gamma, initial_state=initial_state)
            o2, s = workbench.recurrent(**second, g_gamma=g_gamma, initial_state=s)
        return jnp.concatenate([o1, o2], 1), s

    diff = {n: x for n, x in inputs.items() if n in DIFFERENTIABLE}
    g_gamma = inputs.get("g_gamma")
    (o, ht), pullback = jax.vjp(lambda d: two_runs(**d, g_gamma=g_gamma, reverse=reverse), diff)
    (grads,) = pullback(cts)
    split_run = {"o": o, "final_state": ht, **{GRAD_NAME[n]: x for n, x in grads.items()}}
    assert_same(split_run, whole)


@law
@given(seed=strategies.seeds, shape=small_shapes(short_seq_lens), gates=strategies.gate_sets)
def test_reverse_is_forward_on_time_flipped_inputs(seed, shape, gates):
    B, T, H, K, V = shape
    inputs = testing.recurrent_inputs(seed, B, T, H, K, V, gates=gates)
    cts = cotangents(seed + 1, inputs)
    backwards = outputs_and_grads(inputs, cts, reverse=True)
    flipped = outputs_and_grads(flip_time(inputs), (jnp.flip(cts[0], 1), cts[1]))
    unflipped = {n: jnp.flip(x, 1) if n in ("o", "dq", "dk", "dv", "dg", "dgk", "dgv") else x
                 for n, x in flipped.items()}
    assert_same(backwards, unflipped)


@law
@given(seed=strategies.seeds, T=short_seq_lens, K=strategies.head_dims, V=strategies.head_dims,
       gates=strategies.gate_sets)
def test_batch_invariance(seed, T, K, V, gates):
    """Each sequence of a batch gets the answer it gets alone (B=2, H=2)."""
    B = 2
    inputs = testing.recurrent_inputs(seed, B, T, 2, K, V, gates=gates)
    cts = cotangents(seed + 1, inputs)
    batched = outputs_and_grads(inputs, cts)
    for b in range(B):
        one = {n: x[b:b + 1] if n != "g_gamma" else x for n, x in inputs.items()}
        alone = outputs_and_grads(one, (cts[0][b:b + 1], cts[1][b:b + 1]))
        assert_same({n: x[b:b + 1] for n, x in batched.items()}, alone)


@law
@given(seed=strategies.seeds, shape=small_shapes(short_seq_lens), reverse=st.booleans())
def test_all_gates_zero_equals_no_gates(seed, shape, reverse):
    check_zero_gates(seed, shape, reverse, "triton")


def test_reference_all_gates_zero_equals_no_gates():
    check_zero_gates(23, (2, 7, 2, 12, 20), True, "reference")


def check_zero_gates(seed, shape, reverse, implementation):
    B, T, H, K, V = shape
    plain = testing.recurrent_inputs(seed, B, T, H, K, V, gates=())
    f32 = jnp.float32
    zeros = {**plain, "g": jnp.zeros((B, T, H), f32), "gk": jnp.zeros((B, T, H, K), f32),
             "gv": jnp.zeros((B, T, H, V), f32), "g_gamma": jnp.zeros((H,), f32)}
    cts = cotangents(seed + 1, plain)
    without = outputs_and_grads(plain, cts, implementation=implementation, reverse=reverse)
    with_zeros = outputs_and_grads(zeros, cts, implementation=implementation, reverse=reverse)
    assert_same({n: with_zeros[n] for n in without}, without)


@law
@given(seed=strategies.seeds, shape=small_shapes(short_seq_lens), with_gk=st.booleans(), reverse=st.booleans())
def test_g_gamma_equals_the_same_constant_passed_as_g(seed, shape, with_gk, reverse):
    check_g_gamma_as_g(seed, shape, with_gk, reverse, "triton")


def test_reference_g_gamma_equals_the_same_constant_passed_as_g():
    check_g_gamma_as_g(25, (1, 9, 3, 8, 12), True, False, "reference")


def check_g_gamma_as_g(seed, shape, with_gk, reverse, implementation):
    B, T, H, K, V = shape
    inputs = testing.recurrent_inputs(seed, B, T, H, K, V, gates=("g_gamma", "gk") if with_gk else ("g_gamma",))
    as_g = {n: x for n, x in inputs.items() if n != "g_gamma"}
    as_g["g"] = jnp.broadcast_to(inputs["g_gamma"], (B, T, H))  # distinct per head: catches a wrong axis
    cts = cotangents(seed + 1, inputs)
    constant = outputs_and_grads(inputs, cts, implementation=implementation, reverse=reverse)
    gated = outputs_and_grads(as_g, cts, implementation=implementation, reverse=reverse)
    del gated["dg"]
    assert_same(constant, gated)


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_zero_cotangents_give_zero_gradients(reverse):
    bounds = jnp.asarray([0, 3, 3, 4, 8], jnp.int32)
    inputs = {**testing.recurrent_inputs(9, 1, 8, 1, 12, 20, gates=ALL_GATES, n_seqs=4), "cu_seqlens": bounds}
    zero = jax.tree.map(jnp.zeros_like, cotangents(0, inputs, bounds))
    out = outputs_and_grads(inputs, zero, reverse=reverse)
    for name in GRAD_NAME.values():
        assert np.all(np.asarray(out[name]) == 0), f"{name} is not all zero"
    assert bool(jnp.all(jnp.isfinite(out["o"]))) and float(jnp.abs(out["o"]).max()) > 0


# ----------------------------------------------------------------------------- jit


@pytest.mark.parametrize("implementation", ["triton", "reference"])
def test_under_jit_with_traced_cu_seqlens(implementation):
    """One jitted function (cu_seqlens traced) serves two packings of the same length."""
    inputs = testing.recurrent_inputs(13, 1, 10, 1, 8, 12, gates=ALL_GATES, n_seqs=3)
    cts = cotangents(14, inputs, [0, 0, 0, 0])
    run = jax.jit(lambda inputs, cu, cts: outputs_and_grads({**inputs, "cu_seqlens": cu}, cts, eager=True,
                                                           implementation=implementation))
    results = []
    for bounds in ([0, 4, 4, 10], [0, 1, 7, 10]):
        cu = jnp.asarray(bounds, jnp.int32)
        eager = outputs_and_grads({**inputs, "cu_seqlens": cu}, cts, eager=True, implementation=implementation)
        jitted = run(inputs, cu, cts)
        assert_same(jitted, eager)
        results.append(jitted)
    assert testing.rms_rel(results[0]["o"], results[1]["o"]) > 1e-3  # the traced values were used


def test_under_jit_fixed_length():
    inputs = testing.recurrent_inputs(15, 2, 6, 1, 16, 8, gates=("g", "gv"))
    cts = cotangents(16, inputs)
    jitted = jax.jit(lambda inputs, cts: outputs_and_grads(inputs, cts, eager=True, reverse=True))(inputs, cts)
    oracle = outputs_and_grads(testing.to_float64(inputs), testing.to_float64(cts), implementation="reference",
                               reverse=True)
    assert_same({n: x.astype(jnp.float64) for n, x in jitted.items()}, oracle, tol=1e-5)


# ----------------------------------------------------------------------------- tuning


def test_every_forward_autotune_config_gives_the_same_answer():
    """K=24, V=40: no block size divides V evenly, and BV=64 exceeds it. In the interpreter num_warps
    and num_stages change nothing, so each distinct block size runs once."""
    configs = launch.autotune_configs(kernels.recurrent_fwd_kernel)
    distinct = distinct_configs(kernels.recurrent_fwd_kernel)
    assert len(distinct) >= 2
    inputs = testing.recurrent_inputs(17, 1, 8, 1, 24, 40, gates=("g", "gk", "gv"))
    oracle = workbench.recurrent(**testing.to_float64(inputs), implementation="reference")
    results = []
    for index in distinct.values():
        config = configs[index]
        with launch.interpreter_config(kernels.recurrent_fwd_kernel, index):
            o, ht = jax.block_until_ready(workbench.recurrent(**inputs))
        for name, x, ref in (("o", o, oracle[0]), ("final_state", ht, oracle[1])):
            err = testing.rms_rel(x, ref)
            assert err <= 1e-5, f"config {config}: {name} error {err:.2e}"
        results.append({"o": o, "final_state": ht})
    for result in results[1:]:
        assert_same(result, results[0])


@pytest.mark.parametrize("block_k", [8, 16, 32])
def test_backward_block_k_gives_the_same_answer(block_k):
    """K=24: block_k 8, 16, 32 give 3, 2 and 1 key blocks, the last two partial; each equals the
    backward computed as `jax.vjp` of the reference (the kernel's own forward in both)."""
    inputs = testing.recurrent_inputs(19, 1, 8, 1, 24, 20, gates=ALL_GATES)
    cts = cotangents(20, inputs)
    kernel = outputs_and_grads(inputs, cts, tuning=Tuning(block_k=block_k))
    reference = outputs_and_grads(inputs, cts, tuning=Tuning(backward="reference"))
    assert_same(kernel, reference)


@law
@given(seed=strategies.seeds, shape=small_shapes(st.sampled_from([1, 7, 16])), gates=strategies.gate_sets,
       reverse=st.booleans())
def test_reference_backward_equals_kernel_backward(seed, shape, gates, reverse):
    B, T, H, K, V = shape
    inputs = testing.recurrent_inputs(seed, B, T, H, K, V, gates=gates)
    cts = cotangents(seed + 1, inputs)
    kernel = outputs_and_grads(inputs, cts, reverse=reverse)
    reference = outputs_and_grads(inputs, cts, reverse=reverse, tuning=Tuning(backward="reference"))
    assert_same(kernel, reference)

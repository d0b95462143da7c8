"""`workbench.testing`: its input factories draw exactly what `jax.random` draws for the same key and
shape (they cut a flat draw of a power-of-two length, so that a few compilations serve every shape):
pinned seeds keep meaning the same inputs; and the error budget admits what it must and refuses a fault."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from workbench import testing


def bits(x):
    x = np.asarray(x)
    return x.dtype, x.shape, x.view(np.uint8).tobytes()


def test_factories_draw_what_jax_random_draws():
    key, shape = jax.random.key(11), (2, 17, 3, 5)  # 510 elements, cut from a draw of 512
    x = jax.random.normal(key, shape, jnp.float32)
    assert bits(testing.normal(key, shape)) == bits(x)
    assert bits(testing.normal(key, shape, jnp.bfloat16)) == bits(x.astype(jnp.bfloat16))
    assert bits(testing.normal(key, shape, scale=0.5)) == bits(0.5 * x)
    for dtype in (jnp.float32, jnp.bfloat16):
        gate = (-5.0 * jax.nn.sigmoid(x + 1.0) * 2.0).astype(dtype)
        assert bits(testing.log_gate(key, shape, 5.0, dtype)) == bits(gate)
    assert bits(testing.randint(key, shape, 3)) == bits(jax.random.randint(key, shape, 0, 3, jnp.int32))
    assert testing.normal(key, shape).shape == shape


def test_factories_without_partitionable_threefry_draw_the_shape():
    """Without partitionable threefry a cut draw differs: the factories draw the shape itself."""
    key, shape = jax.random.key(12), (5, 7)
    with jax.threefry_partitionable(False):
        assert bits(testing.normal(key, shape)) == bits(jax.random.normal(key, shape, jnp.float32))


def _draw(rng, n, relative_error):
    """(kernel, reference, floor, oracle) for n values: the reference rounds the oracle to bfloat16 once; the
    kernel first takes a relative error drawn uniformly in ±`relative_error` (an intermediate's rounding, or
    a fault), then the same rounding; the floor is the oracle itself."""
    oracle = rng.standard_normal(n)
    reference = jnp.asarray(oracle, jnp.bfloat16)
    kernel = jnp.asarray(oracle * (1 + rng.uniform(-relative_error, relative_error, n)), jnp.bfloat16)
    return kernel, reference, oracle, oracle


@pytest.mark.parametrize("n", [8, 64, 4096])
def test_a_second_rounding_passes_at_every_size(n):
    """A kernel that rounds an intermediate to bfloat16 once more than the reference (relative error up to half
    an ulp, 2⁻⁸) errs about √2 × the reference: over few elements the spread of the RMS decides, and the budget
    must admit such a kernel in all but a rare draw."""
    rng = np.random.default_rng(n)
    draws = 400
    failed = sum(not testing.compare_with_floor("x", *_draw(rng, n, 2.0 ** -8)).ok for _ in range(draws))
    assert failed <= draws // 100, f"{failed} of {draws} draws over the budget at n = {n}"


@pytest.mark.parametrize("n", [8, 64, 4096])
def test_a_kernel_off_by_two_percent_fails_at_every_size(n):
    rng = np.random.default_rng(n + 1)
    draws = 50
    failed = sum(not testing.compare_with_floor("x", *_draw(rng, n, 0.04)).ok for _ in range(draws))
    assert failed >= draws * 0.9, f"only {failed} of {draws} draws over the budget at n = {n}"


def test_the_lse_floor_is_the_float32_floor_for_well_conditioned_logits():
    """Random q, k, no bias: the logits' terms are of the size of lse itself, the condition number about 1."""
    from workbench.flash_attention.reference import allowed_mask

    kq, kk = jax.random.split(jax.random.key(0))
    q = jax.random.normal(kq, (2, 24, 4, 16), jnp.float32)
    k = jax.random.normal(kk, (2, 40, 2, 16), jnp.float32)
    s = 16 ** -0.5 * jnp.einsum("bihd,bjhd->bhij", q.astype(jnp.float64), jnp.repeat(k, 2, axis=2).astype(jnp.float64))
    lse = jax.nn.logsumexp(s, axis=-1)
    atol = float(testing.attention_lse_atol(q, k, lse, allowed_mask(2, 24, 40), 16 ** -0.5))
    assert testing.ATOL["float32"] <= atol <= 4 * testing.ATOL["float32"], atol


def test_the_lse_floor_grows_where_the_bias_cancels_the_scores():
    """One query, one key: lse = s = scale·q·k + bias exactly. With the bias chosen to leave s = 1e-3 of terms
    of order one, the floor is ATOL · (scale·Σ|q k| + |bias|) / |s|, here some thousand times the plain one;
    and a float32 evaluation of s really errs by more than the plain floor allows (the case the dev profile found)."""
    from workbench.flash_attention.reference import allowed_mask

    kq, kk = jax.random.split(jax.random.key(5))
    q = jax.random.normal(kq, (1, 1, 1, 12), jnp.float32)
    k = jax.random.normal(kk, (1, 1, 1, 12), jnp.float32)
    q64, k64, scale = np.asarray(q, np.float64), np.asarray(k, np.float64), 12 ** -0.5
    dot = scale * float(np.sum(q64 * k64))
    bias = np.full((1, 1, 1, 1), np.float32(1e-3 - dot), np.float32)
    s = dot + float(bias[0, 0, 0, 0])
    atol = float(testing.attention_lse_atol(q, k, np.full((1, 1, 1), s), allowed_mask(1, 1, 1), scale, bias))
    want = testing.ATOL["float32"] * (scale * float(np.sum(np.abs(q64 * k64))) + abs(float(bias[0, 0, 0, 0]))) / abs(s)
    assert want > 100 * testing.ATOL["float32"]
    np.testing.assert_allclose(atol, want, rtol=1e-9)
    # float32 logits, summed in a few orders: their relative error against s passes the plain floor's size
    terms = (scale * q[0, 0, 0] * k[0, 0, 0]).astype(jnp.float32)
    errs = [abs(float(jnp.sum(t) + bias[0, 0, 0, 0]) - s) / abs(s) for t in (terms, terms[::-1], jnp.roll(terms, 5))]
    assert max(errs) <= atol, (errs, atol)
    assert max(errs) > testing.ATOL["float32"], errs


def _cancelling_dot(seed, scale_last=True):
    """a, b (float32, 8 terms) whose products sum to about 1e-3 of their size."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(8).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    if scale_last:
        a[-1] = np.float32((1e-2 - float(np.dot(a[:-1].astype(np.float64), b[:-1]))) / b[-1])
    return jnp.asarray(a), jnp.asarray(b)


def _sum_in_order(p, order):
    """p's elements added one at a time in `order` (float adds, which XLA does not reorder)."""
    total = p[order[0]]
    for i in order[1:]:
        total = total + p[i]
    return total[None]


def _sum_last_first(a, b):
    return _sum_in_order(a * b, range(7, -1, -1))


def _sum_first_last(a, b):
    return _sum_in_order(a * b, range(8))


@pytest.mark.parametrize("seed", [3, 10])
def test_the_perturbation_floor_admits_another_order_of_a_sum_whose_terms_cancel(seed):
    """The same eight products summed last-first against first-last: each order errs by up to u·Σ|terms|, about
    100 times the sum here, and which is the closer is luck; the plain rule (1.5× the reference's error) fails
    the one that drew worse, the oracle's change under a float32 rounding of the inputs admits it."""
    args = _cancelling_dot(seed)
    plain = testing.check(_sum_last_first, _sum_first_last, args, argnums=(), seed=seed)
    floored = testing.check(_sum_last_first, _sum_first_last, args, argnums=(), seed=seed,
                            perturbation=testing.PERTURBATION)
    assert not plain.comparisons[0].ok and floored.comparisons[0].ok, (plain.comparisons[0], floored.comparisons[0])


def test_another_order_of_a_cancelling_sum_passes_the_floor_in_all_but_a_rare_draw():
    """Eight cancelling float32 products summed in one random order (the kernel) against another (the reference):
    the two are equally accurate, each errs by a different draw of roundings, and the budget must admit the
    kernel in all but a rare draw (as `test_a_second_rounding_passes_at_every_size` asks of the rounding term).
    The floor alone (1.5× the oracle's RMS change over three draws) failed 2 of these 200 draws and 21 of 800
    (2.6 %); with `testing.few_elements_allowance` none of these 200 and 1 of the 800 (at 1.01× its budget)."""
    draws = 200
    failed = 0
    for seed in range(draws):
        rng = np.random.default_rng(1000 + seed)
        kernel_order, reference_order = list(rng.permutation(8)), list(rng.permutation(8))
        report = testing.check(lambda a, b: _sum_in_order(a * b, kernel_order),
                               lambda a, b: _sum_in_order(a * b, reference_order), _cancelling_dot(seed),
                               argnums=(), seed=seed, perturbation=testing.PERTURBATION, jit=False)
        failed += not report.comparisons[0].ok
    assert failed == 0, f"{failed} of {draws} draws over the budget"


@pytest.mark.parametrize("cancel", [False, True], ids=["well-conditioned", "cancelling"])
def test_the_perturbation_floor_still_fails_a_wrong_sum(cancel):
    """A sum off by 1e-5 of its terms' size: past the floor, which is u (6e-8) of it, by far."""
    a, b = _cancelling_dot(10, scale_last=cancel)
    if not cancel:
        a, b = jnp.abs(a), jnp.abs(b)
    size = float(jnp.sum(jnp.abs(a * b)))
    report = testing.check(lambda a, b: _sum_first_last(a, b) + 1e-5 * size, _sum_first_last, (a, b), argnums=(),
                           perturbation=testing.PERTURBATION)
    assert not report.comparisons[0].ok, report.comparisons[0]


def test_perturbed_moves_floating_leaves_by_at_most_the_given_size():
    """Every floating element moves by at most rel of itself (and most by some), integers not at all."""
    with jax.enable_x64(True):
        tree = {"x": jnp.linspace(1.0, 2.0, 64, dtype=jnp.float64), "n": jnp.arange(4)}
        moved = testing.perturbed(tree, 0, 1e-6)
        change = np.abs(np.asarray(moved["x"]) / np.asarray(tree["x"]) - 1)
        assert change.max() <= 1e-6 and (change > 1e-8).mean() > 0.9
        assert np.array_equal(np.asarray(moved["n"]), np.asarray(tree["n"]))


def _last_term(x):
    """exp(x_n), the last term of x: the reference's direct form."""
    return jnp.exp(x[-1:])


def _difference_of_sums(x, dtype=None):
    """exp(S_n − S_{n−1}) of x's sums, each rounded to `dtype` when given (a kernel's form: the exponent is a
    difference of two prefix sums, as chunk_gla's gates' b_L − b_r)."""
    s_n, s_m = jnp.sum(x, keepdims=True), jnp.sum(x[:-1], keepdims=True)
    if dtype is not None:
        s_n, s_m = (s.astype(dtype).astype(x.dtype) for s in (s_n, s_m))
    return jnp.exp(s_n - s_m)


def test_a_variant_floor_admits_what_rounding_an_intermediate_once_costs():
    """A kernel whose exponent is a difference of two float32 prefix sums near 190 errs by ~ε·190, the direct form
    (the reference) by ~ε: the plain rule and the perturbation floor fail it, a variant that rounds the two sums
    once to float32 (run in float64) admits it, and still fails a kernel that holds the sums in bfloat16."""
    x = jnp.asarray(np.random.default_rng(3).uniform(0.5, 1.5, 192), jnp.float32)
    rounded = functools.partial(_difference_of_sums, dtype=jnp.float32)
    plain = testing.check(_difference_of_sums, _last_term, (x,), argnums=(), perturbation=testing.PERTURBATION)
    floored = testing.check(_difference_of_sums, _last_term, (x,), argnums=(), perturbation=testing.PERTURBATION,
                            variants=(rounded,))
    coarse = testing.check(functools.partial(_difference_of_sums, dtype=jnp.bfloat16), _last_term, (x,),
                           argnums=(), perturbation=testing.PERTURBATION, variants=(rounded,))
    assert not plain.ok and floored.ok and not coarse.ok, (plain, floored, coarse)

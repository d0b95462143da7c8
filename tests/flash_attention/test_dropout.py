"""The dropout keep-mask (workbench/flash_attention/dropout.py): the hash bit for bit against an
independent Python-int implementation of its specification, its statistics, and its arguments."""

import workbench  # noqa: F401  (first: configures Triton's interpreter before triton loads)

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from workbench.flash_attention.dropout import (dropout_keep_mask, dropout_seeds, dropout_threshold,
                                               keep_from_seeds)

MASK32 = 0xFFFFFFFF


def fmix32_py(x: int) -> int:
    x ^= x >> 16
    x = (x * 0x85EBCA6B) & MASK32
    x ^= x >> 13
    x = (x * 0xC2B2AE35) & MASK32
    return x ^ (x >> 16)


def keep_py(seeds, shape, rate, b, h, i, j) -> bool:
    """The specification, element by element, in Python ints reduced mod 2³²."""
    s0, s1 = (int(s) for s in seeds)
    _, H, Tq, _ = shape
    row = ((b * H + h) * Tq + i) & MASK32
    r = fmix32_py((row * 0x9E3779B1 + s0) & MASK32)
    u = fmix32_py(r ^ ((j * 0x85EBCA77 + s1) & MASK32))
    return (u >> 8) >= int(round(rate * 2 ** 24))


def keep_np(seeds, shape, rate):
    """The specification vectorised in NumPy uint64 with explicit reductions mod 2³²."""
    s0, s1 = (np.uint64(int(s)) for s in seeds)
    B, H, Tq, Tk = shape
    b, h, i, j = np.meshgrid(*(np.arange(n, dtype=np.uint64) for n in shape), indexing="ij")
    m = np.uint64(MASK32)

    def fmix(x):
        x = x ^ (x >> np.uint64(16))
        x = (x * np.uint64(0x85EBCA6B)) & m
        x = x ^ (x >> np.uint64(13))
        x = (x * np.uint64(0xC2B2AE35)) & m
        return x ^ (x >> np.uint64(16))

    row = ((b * np.uint64(H) + h) * np.uint64(Tq) + i) & m
    r = fmix((row * np.uint64(0x9E3779B1) + s0) & m)
    u = fmix(r ^ ((j * np.uint64(0x85EBCA77) + s1) & m))
    return (u >> np.uint64(8)) >= np.uint64(int(round(rate * 2 ** 24)))


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.9])
def test_hash_matches_the_specification(rate):
    shape = (2, 3, 17, 33)
    seeds = dropout_seeds(jax.random.key(7))
    keep = np.asarray(keep_from_seeds(seeds, shape, rate))
    np.testing.assert_array_equal(keep, keep_np(seeds, shape, rate))
    rng = np.random.default_rng(0)
    for _ in range(20):
        idx = tuple(int(rng.integers(n)) for n in shape)
        assert keep[idx] == keep_py(seeds, shape, rate, *idx), idx


def test_hash_wraps_around_in_uint32():
    """Seeds near 2³² and a row index past 2³² / 0x9E3779B1 exercise every wrap."""
    seeds = jnp.asarray([0xFFFFFFF0, 0xFFFFFFFF], jnp.uint32)
    shape = (3, 5, 1000, 4)
    keep = np.asarray(keep_from_seeds(seeds, shape, 0.5))
    np.testing.assert_array_equal(keep, keep_np(seeds, shape, 0.5))


def test_seeds_are_two_uint32_from_the_key():
    key = jax.random.key(3)
    seeds = dropout_seeds(key)
    assert seeds.dtype == jnp.uint32 and seeds.shape == (2,)
    np.testing.assert_array_equal(seeds, jax.random.bits(key, (2,), jnp.uint32))
    # a raw uint32[2] key (jax.random.PRNGKey) gives the same seeds as the typed key of the same seed
    np.testing.assert_array_equal(dropout_seeds(jax.random.PRNGKey(3)), seeds)


def test_typed_and_raw_keys_give_the_same_mask():
    shape = (1, 2, 9, 10)
    np.testing.assert_array_equal(dropout_keep_mask(jax.random.key(5), shape, 0.3),
                                  dropout_keep_mask(jax.random.PRNGKey(5), shape, 0.3))


@pytest.mark.parametrize("rate", [0.05, 0.3, 0.7])
def test_fraction_kept(rate):
    """2·3·64·96 ≈ 37k elements: the kept fraction is 1 − rate within 5 standard deviations."""
    shape = (2, 3, 64, 96)
    keep = dropout_keep_mask(jax.random.key(11), shape, rate)
    n = np.prod(shape)
    sigma = np.sqrt(rate * (1 - rate) / n)
    assert abs(float(keep.mean()) - (1 - rate)) < 5 * sigma
    # no structure along rows or columns: each row's and column's mean is plausible too
    rows = np.asarray(keep.reshape(-1, shape[-1]).mean(-1))
    assert abs(rows.mean() - (1 - rate)) < 5 * sigma
    assert np.all(np.abs(rows - (1 - rate)) < 6 * np.sqrt(rate * (1 - rate) / shape[-1]))


def test_deterministic_and_key_dependent():
    shape = (2, 2, 16, 16)
    a = dropout_keep_mask(jax.random.key(1), shape, 0.5)
    np.testing.assert_array_equal(a, dropout_keep_mask(jax.random.key(1), shape, 0.5))
    b = dropout_keep_mask(jax.random.key(2), shape, 0.5)
    assert 0.3 < float(jnp.mean(a != b)) < 0.7  # independent masks disagree about half the time


def test_positions_get_different_bits():
    """Different heads, batches and rows are not copies of one another."""
    keep = np.asarray(dropout_keep_mask(jax.random.key(4), (2, 2, 8, 64), 0.5))
    rows = keep.reshape(-1, 64)
    assert len({r.tobytes() for r in rows}) == rows.shape[0]


def test_rate_zero_keeps_everything():
    assert bool(jnp.all(dropout_keep_mask(jax.random.key(0), (2, 3, 5, 7), 0.0)))
    assert dropout_threshold(0.0) == 0


def test_threshold():
    assert dropout_threshold(0.5) == 2 ** 23
    assert dropout_threshold(0.25) == 2 ** 22
    assert dropout_threshold(1e-9) == 0
    assert isinstance(dropout_threshold(0.3), int)


def test_works_under_jit_with_a_traced_key():
    shape = (1, 2, 5, 6)
    masks = jax.jit(lambda key: dropout_keep_mask(key, shape, 0.4))
    for key in (jax.random.key(9), jax.random.PRNGKey(9)):
        np.testing.assert_array_equal(masks(key), dropout_keep_mask(jax.random.key(9), shape, 0.4))


def test_empty_shape():
    assert dropout_keep_mask(jax.random.key(0), (1, 2, 0, 3), 0.5).shape == (1, 2, 0, 3)


BAD = {
    "rate-1": ("rate", dict(rate=1.0)),
    "rate-negative": ("rate", dict(rate=-0.1)),
    "rate-nan": ("rate", dict(rate=float("nan"))),
    "rate-bool": ("rate", dict(rate=True)),
    "rate-array": ("rate", dict(rate=jnp.asarray(0.5))),
    "shape-3": ("shape", dict(shape=(1, 2, 3))),
    "shape-negative": ("shape", dict(shape=(1, 2, -3, 4))),
    "shape-float": ("shape", dict(shape=(1, 2, 3.0, 4))),
    "shape-int": ("shape", dict(shape=4)),
    "key-int": ("dropout_key", dict(key=0)),
    "key-float": ("dropout_key", dict(key=jnp.zeros((2,), jnp.float32))),
    "key-uint32-3": ("dropout_key", dict(key=jnp.zeros((3,), jnp.uint32))),
    "key-array-of-keys": ("dropout_key", dict(key=jax.random.split(jax.random.key(0), 2))),
}


@pytest.mark.parametrize("case", BAD.values(), ids=BAD.keys())
def test_bad_arguments(case):
    name, changes = case
    args = dict(key=jax.random.key(0), shape=(1, 2, 3, 4), rate=0.5)
    assert dropout_keep_mask(args["key"], args["shape"], args["rate"]).shape == (1, 2, 3, 4)
    args.update(changes)
    with pytest.raises(ValueError, match=rf"^{name}:"):
        dropout_keep_mask(args["key"], args["shape"], args["rate"])


def test_traced_rate_is_refused():
    with pytest.raises(ValueError, match="^rate:"):
        jax.jit(lambda r: dropout_keep_mask(jax.random.key(0), (1, 1, 2, 2), r))(0.5)

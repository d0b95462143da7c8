"""`workbench._precision.round_to`: rounds exactly like a cast round trip, and survives XLA.

XLA on GPU drops `x.astype(bf16).astype(f32)` (`xla_allow_excess_precision`), which made the chunkwise
references unrounded, and far more accurate than the kernels they budget, on the GPU only
(workbench/chunk_gla/NOTES.md, "Precision"). CPU XLA keeps the round trip, so these tests check the
two things that make `round_to` immune: its values equal the cast's, and the op that computes them is
a `reduce-precision` in the HLO (which the excess-precision simplification does not touch).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from workbench._bounds import chunk_slots, entering_state_term
from workbench._precision import round_to
from workbench.chunk_gla.reference import chunk_gla_ref
from workbench.kda.reference import chunk_kda_ref

NARROW = (jnp.bfloat16, jnp.float16)


def _bits(x):
    x = np.asarray(x)
    return x.view({4: np.uint32, 8: np.uint64}[x.itemsize])


def _hard_values(wide, narrow) -> np.ndarray:
    """Values of `wide` dtype that test a rounding to `narrow`: every tie between two neighbouring
    `narrow` values (normal and subnormal), one ulp of `wide` either side of each, the overflow edge,
    `wide`'s own subnormals, ±0, ±inf, and random values over the whole exponent range."""
    rng = np.random.default_rng(0)
    wide, narrow = np.dtype(wide), jnp.dtype(narrow)
    fn = jnp.finfo(narrow)
    # a spread of narrow values: every exponent, random mantissas, both signs, subnormals included
    exps = np.arange(int(fn.minexp) - int(fn.nmant), int(fn.maxexp))
    base = np.ldexp(1.0 + rng.integers(0, 2 ** int(fn.nmant), exps.size) / 2.0 ** int(fn.nmant), exps)
    base = np.concatenate([base, [float(fn.smallest_subnormal) * m for m in (1, 2, 3, 7)],
                           [float(fn.smallest_normal) * (1 - 2.0 ** -int(fn.nmant))]])
    nv = np.asarray(jnp.asarray(base, jnp.float32).astype(narrow).astype(jnp.float64))
    nv = nv[np.isfinite(nv) & (nv > 0)]
    nxt = np.asarray(jnp.nextafter(jnp.asarray(nv, narrow), jnp.asarray(np.inf, narrow)).astype(jnp.float64))
    keep = np.isfinite(nxt)
    ties = ((nv[keep] + nxt[keep]) / 2).astype(wide)  # exact in wide: one more mantissa bit than narrow
    near = np.concatenate([np.nextafter(ties, np.inf), np.nextafter(ties, -np.inf)])
    wi = np.finfo(wide)
    edge = float(fn.max) * (1 + 2.0 ** -(int(fn.nmant) + 1))  # the value past which the cast overflows
    special = np.array([0.0, float(fn.max), edge, float(wi.max), np.inf, float(wi.smallest_subnormal),
                        float(wi.tiny) / 3, float(fn.smallest_normal)], wide)
    special = np.concatenate([special, np.nextafter(special[[2]], 0), np.nextafter(special[[2]], np.inf)])
    spread = rng.standard_normal(4000) * np.exp2(rng.uniform(wi.minexp - wi.nmant, wi.maxexp - 2, 4000))
    spread = spread.astype(wide)
    x = np.concatenate([nv.astype(wide), ties, near, special, spread])
    return np.concatenate([x, -x])


@pytest.mark.parametrize("narrow", NARROW, ids=lambda d: jnp.dtype(d).name)
def test_round_to_equals_cast_round_trip_bitwise(narrow):
    """From float32, the accumulation dtype of every reference that rounds (float64 runs store in float64).
    (From float64 the two differ on purpose: XLA converts f64 → f16/bf16 through f32, rounding twice.)"""
    wide = jnp.float32
    x = jnp.asarray(_hard_values(wide, narrow))
    assert x.dtype == wide
    cast = x.astype(narrow).astype(wide)
    got = round_to(x, narrow)
    assert got.dtype == wide
    bad = np.flatnonzero(_bits(got) != _bits(cast))
    assert bad.size == 0, (f"{bad.size} of {x.size} differ, e.g. x={np.asarray(x)[bad[:5]]} "
                           f"round_to={np.asarray(got)[bad[:5]]} cast={np.asarray(cast)[bad[:5]]}")
    jitted = jax.jit(round_to, static_argnums=1)(x, narrow)
    np.testing.assert_array_equal(_bits(jitted), _bits(cast))


@pytest.mark.parametrize("narrow", NARROW, ids=lambda d: jnp.dtype(d).name)
def test_round_to_keeps_nan(narrow):
    payloads = np.array([0x7FC00000, 0x7F800001, 0x7FBFFFFF, 0xFFC12345, 0x7FFFFFFF], np.uint32)
    x = jnp.asarray(payloads.view(np.float32))
    assert bool(jnp.all(jnp.isnan(round_to(x, narrow))))


def test_round_to_is_a_no_op_for_a_dtype_as_wide():
    x = jnp.asarray([1 / 3, 1e-40, 3e38], jnp.float32)
    for dtype in (jnp.float32, jnp.float64):
        assert round_to(x, dtype) is x
    y = jnp.asarray([1 / 3], jnp.float64)
    assert round_to(y, jnp.float64) is y
    assert "reduce_precision" not in jax.jit(lambda x: round_to(x, jnp.float32)).lower(x).as_text()


@pytest.mark.parametrize("narrow", NARROW, ids=lambda d: jnp.dtype(d).name)
def test_round_to_is_a_reduce_precision_op_that_xla_keeps(narrow):
    """The round trip XLA GPU elides is a pair of converts; round_to is a reduce-precision, in the
    lowered module and still in the optimised HLO."""
    x = jnp.linspace(-3.0, 3.0, 64, dtype=jnp.float32)
    fn = jax.jit(lambda x: round_to(x, narrow) * 3.0)
    lowered = fn.lower(x)
    assert "reduce_precision" in lowered.as_text()
    fi = jnp.finfo(narrow)
    compiled = lowered.compile().as_text()
    assert "reduce-precision(" in compiled and f"exponent_bits={fi.nexp}, mantissa_bits={fi.nmant}" in compiled


def test_references_round_with_reduce_precision():
    """Both chunkwise references round their product operands through round_to: a bfloat16 call lowers to
    reduce-precision ops (with the astype round trip, it lowered to converts that XLA GPU removes)."""
    B, T, H, K, V = 1, 20, 1, 16, 16
    key = jax.random.split(jax.random.key(0), 5)
    q, k = (jax.random.normal(key[i], (B, T, H, K), jnp.bfloat16) for i in range(2))
    v = jax.random.normal(key[2], (B, T, H, V), jnp.bfloat16)
    gk = -jax.nn.softplus(jax.random.normal(key[3], (B, T, H, K))).astype(jnp.bfloat16)
    beta = jax.nn.sigmoid(jax.random.normal(key[4], (B, T, H))).astype(jnp.bfloat16)
    gla = jax.jit(lambda *a: chunk_gla_ref(*a, gk=gk, chunk_size=16)).lower(q, k, v).as_text()
    kda = jax.jit(lambda *a: chunk_kda_ref(*a, gk, beta, chunk_size=16)).lower(q, k, v).as_text()
    assert gla.count("reduce_precision") >= 4  # k̂ and v (gla.4), q̄ and h, A (gla.5)
    assert kda.count("reduce_precision") >= 4


@pytest.mark.parametrize("cu", [[0, 1, 1, 2, 4], [0, 0, 37, 40, 40, 75]], ids=["short", "empty-and-multi-chunk"])
def test_entering_state_term_adds_each_sequences_lost_term_to_its_first_chunk_rows(cu):
    """The term is exp(b_L) ⊙ Σ_v (h0 − hs) ⊙ dH of each sequence's first chunk slot (found here from
    `chunk_slots`' first-chunk flags, not the helper's formula), added to exactly that chunk's rows; every other
    row is unchanged; float32 states return dg as it is."""
    BT, H, K, V = 16, 2, 3, 4
    cu_np = np.asarray(cu, np.int32)
    TT, N = int(cu_np[-1]), len(cu) - 1
    start, end, seq, first, _ = (np.asarray(x) for x in chunk_slots(cu_np, TT, BT))
    NS = start.shape[0]
    rng = np.random.default_rng(0)
    h0 = rng.standard_normal((N, H, K, V)).astype(np.float32)
    hs = jnp.asarray(rng.standard_normal((NS, H, K, V)), jnp.bfloat16)
    slots = np.flatnonzero(first)
    hs = hs.at[slots].set(jnp.asarray(h0[seq[slots]], jnp.bfloat16))  # as the sweeps store it
    dhs = rng.standard_normal((NS, H, K, V)).astype(np.float32)
    b_first = -rng.uniform(0, 3, (N, H, K)).astype(np.float32)
    dg = rng.standard_normal((TT, H, K)).astype(np.float32)
    got = np.asarray(entering_state_term(jnp.asarray(dg), jnp.asarray(h0), hs, jnp.asarray(dhs),
                                         jnp.asarray(b_first), jnp.asarray(cu_np), BT))
    want = dg.astype(np.float64)
    hs64 = np.asarray(hs.astype(jnp.float32), np.float64)
    for s in slots:
        n = seq[s]
        lost = np.sum((h0[n].astype(np.float64) - hs64[s]) * dhs[s], axis=-1)
        want[start[s]:end[s]] += np.exp(b_first[n].astype(np.float64)) * lost
    assert len(slots) == sum(1 for a, b in zip(cu[:-1], cu[1:]) if b > a)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    untouched = np.ones(TT, bool)
    for s in slots:
        untouched[start[s]:end[s]] = False
    assert np.array_equal(got[untouched], dg[untouched])
    assert not np.allclose(got[~untouched], dg[~untouched])  # the rounding did lose something there
    same = entering_state_term(jnp.asarray(dg), jnp.asarray(h0), jnp.asarray(hs64, jnp.float32), jnp.asarray(dhs),
                               jnp.asarray(b_first), jnp.asarray(cu_np), BT)
    assert np.array_equal(np.asarray(same), dg)

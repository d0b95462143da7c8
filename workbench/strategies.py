"""Hypothesis strategies for kernel tests (shapes, dtypes, log-gates, sequence bounds), and the `ci` / `dev` profiles.

Sizes come from short lists (each new shape retraces and, on CPU, re-interprets), always including
sizes that do not fill a block. Arrays are generated from a drawn integer seed, so one number in a
failure report reproduces the inputs. Needs `hypothesis` (the `test` extra).

    from hypothesis import given
    from workbench import strategies

    @given(strategies.shapes(T=strategies.seq_lens, H=strategies.heads, D=strategies.head_dims),
           strategies.seeds, strategies.gate_strengths)
    def test_my_kernel(shape, seed, strength): ...
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from . import testing

settings.register_profile(
    "ci", max_examples=6, deadline=None, derandomize=True, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "dev", max_examples=60, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)


def fewer_examples(divisor: int = 1, minimum: int = 1) -> settings:
    """Settings for a property that runs in the interpreter: no shrinking (every example costs seconds
    there, and the drawn seed and sizes in the failure report already reproduce a failure), and
    1/divisor of the loaded profile's examples (at least `minimum`). Call it after the profile is loaded
    (test modules: at import; conftest loads it first)."""
    return settings(phases=[Phase.explicit, Phase.reuse, Phase.generate],
                    max_examples=max(minimum, settings.default.max_examples // divisor))


def load_profile() -> str:
    """Load HYPOTHESIS_PROFILE (default `ci`) and return its name."""
    name = os.environ.get("HYPOTHESIS_PROFILE", "ci")
    settings.load_profile(name)
    return name


seeds = st.integers(min_value=0, max_value=2**31 - 1)

# Small sizes for the interpreter; odd ones on purpose (not powers of two, not block multiples).
seq_lens = st.sampled_from([1, 7, 16, 33, 64])
head_dims = st.sampled_from([8, 12, 16, 24, 32])
heads = st.sampled_from([1, 2, 3])
batches = st.sampled_from([1, 2])
dtypes = st.sampled_from([jnp.float32, jnp.bfloat16, jnp.float16])
kernel_dtypes = st.sampled_from([jnp.float32, jnp.bfloat16])

# Typical magnitude of log-decays: none, mild, moderate, strong (≈ −5 and below).
gate_strengths = st.sampled_from([0.0, 0.1, 1.0, 5.0, 12.0])
gate_sets = st.sampled_from([(), ("g",), ("gk",), ("gv",), ("g_gamma",), ("g", "gk"), ("gk", "gv"),
                             ("g", "g_gamma", "gk", "gv")])


@st.composite
def recurrent_shapes(draw):
    """(B, T, H, K, V) with K ≠ V often."""
    return draw(batches), draw(seq_lens), draw(heads), draw(head_dims), draw(head_dims)


@st.composite
def cu_seqlens(draw, max_total: int = 64, max_seqs: int = 5):
    """Packed sequence bounds [0, …, total] as a list: empty and length-1 sequences included."""
    n = draw(st.integers(1, max_seqs))
    special = st.sampled_from([0, 1])
    lengths = draw(st.lists(st.one_of(special, st.integers(0, max_total // n)), min_size=n, max_size=n))
    bounds = [0]
    for length in lengths:
        bounds.append(bounds[-1] + length)
    return bounds


@st.composite
def any_bounds(draw, total: int, lengths=(3,)):
    """Sequence bounds as a user's data pipeline might produce them, valid or not: a list of `length`
    int32 values (length drawn from `lengths`, each ≥ 2) in [−2·total, 3·total] — negative, past the
    end, decreasing — and sometimes valid bounds, which the bounds rule must leave alone."""
    length = draw(st.sampled_from(lengths))
    anything = st.lists(st.integers(-2 * total, 3 * total), min_size=length, max_size=length)
    valid = st.lists(st.integers(0, total), min_size=length - 2, max_size=length - 2).map(
        lambda inner: [0, *sorted(inner), total])
    return draw(st.one_of(anything, valid))


@st.composite
def shapes(draw, **dims):
    """A dict of named sizes, each drawn from its strategy (or fixed, given an int):
    `shapes(B=batches, T=seq_lens, H=heads, D=head_dims)` → e.g. `{"B": 1, "T": 33, "H": 2, "D": 12}`."""
    return {name: value if isinstance(value, int) else draw(value) for name, value in dims.items()}


@st.composite
def arrays(draw, shape, dtype=jnp.float32, scale: float = 1.0):
    """A normal array of `shape` and `dtype` (standard deviation `scale`) from a drawn seed (`testing.normal`)."""
    return testing.normal(jax.random.key(draw(seeds)), tuple(shape), dtype, scale)


@st.composite
def log_gates(draw, shape, strength=gate_strengths, dtype=jnp.float32):
    """Natural-log decays ≤ 0 of `shape` (`testing.log_gate`): typical magnitude `strength` (a float, or a
    strategy; default none, mild, moderate, strong and very strong), from a drawn seed."""
    value = strength if isinstance(strength, (int, float)) else draw(strength)
    return testing.log_gate(jax.random.key(draw(seeds)), tuple(shape), value, dtype)

"""Each Triton stage of the chunked forward against the same stage of the reference (`chunk_stages`),
on one packed problem with an empty and a length-1 sequence and a sequence over a chunk boundary:
b (chunk cumsum), A = (I + L)⁻¹, Aqk, the WY vectors w and u, the state at each chunk start, δ, o and
the final states. float32 inputs, so both sides should agree to float32 rounding."""

import workbench  # noqa: F401  (first: configures Triton's interpreter before triton loads)

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from workbench import kda, testing
from workbench._bounds import chunk_slots
from workbench.kda.inputs import kda_inputs
from workbench.kda.reference import chunk_stages

pytestmark = pytest.mark.usefixtures("ieee_float32")

BOUNDS = [0, 0, 1, 21, 30]
TOLERANCE = {"b": 1e-6, "A": 1e-6, "Aqk": 1e-6, "w": 1e-6, "hs": 1e-6, "delta": 2e-6, "o": 2e-6,
             "final": 2e-6}


@pytest.mark.parametrize("chunk_size", [16])
def test_every_forward_stage_matches_the_reference(chunk_size):
    N, TT = len(BOUNDS) - 1, BOUNDS[-1]
    x = kda_inputs(31, 1, TT, 1, 12, 20, strength=1.0, key_scale=1.5, n_seqs=N)
    cu = jnp.asarray(BOUNDS, jnp.int32)
    rows = {n: x[n][0] for n in ("q", "k", "v", "g", "beta")}
    static = kda._Static(scale=0.4, chunk_size=chunk_size, tuning=kda.Tuning())
    o, ht, (b, A, Aqk, w, hs, delta), _ = jax.jit(kda._forward, static_argnums=7)(
        *rows.values(), x["initial_state"], cu, static)
    want = dict(jax.jit(chunk_stages, static_argnames=("scale", "chunk_size", "storage"))(
        *rows.values(), x["initial_state"], cu, scale=0.4, chunk_size=chunk_size, storage=jnp.float32))
    got = dict(b=b, A=A, Aqk=Aqk, w=w, hs=hs, delta=delta, o=o, final=ht)
    # u is not kept by the forward: δ = u − w h at the first chunk of each sequence, where h is known
    start, end, seq, first, _ = (np.asarray(a) for a in chunk_slots(cu, TT, chunk_size))
    for s in np.flatnonzero(first):
        r = slice(start[s], end[s])
        got.setdefault("u_first", []).append(np.asarray(delta[r]) + np.einsum("rhk,hkv->rhv", w[r], hs[s]))
        want.setdefault("u_first", []).append(np.asarray(want["u"][r]))
    used = np.flatnonzero(end > start)  # slots holding a chunk (the others are never written)
    got["hs"], want["hs"] = got["hs"][used], want["hs"][used]
    for name in TOLERANCE:
        err = testing.rms_rel(got[name], want[name])
        print(f"{name:>6s} {err:.1e}")
        assert err <= TOLERANCE[name], f"{name}: {err:.1e}"
    err = testing.rms_rel(np.concatenate(got["u_first"]), np.concatenate(want["u_first"]))
    assert err <= 2e-6, f"u: {err:.1e}"
    assert testing.rms_rel(want["A"], 0 * want["A"]) > 0 and testing.rms_rel(want["L"], 0 * want["L"]) > 0


@pytest.mark.slow
def test_reference_ratios_in_pieces_equal_ratios_at_once(monkeypatch):
    """Above `_PAIRWISE_AT_ONCE` elements the reference forms L and Aqk 16 slots at a time (lax.map of a
    checkpoint, for GPU-sized problems): the same values and gradients, float64."""
    from workbench.kda import reference

    x = testing.to_float64(kda_inputs(1, 2, 70, 2, 8, 8))

    def run():
        out, pullback = jax.vjp(lambda d: reference.chunk_kda_ref(**d, chunk_size=32), x)
        return out, pullback(testing.to_float64(testing.random_cotangents(0, out)))

    at_once = run()
    monkeypatch.setattr(reference, "_PAIRWISE_AT_ONCE", 0)
    in_pieces = run()
    for a, b in zip(jax.tree.leaves(at_once), jax.tree.leaves(in_pieces)):
        assert testing.rms_rel(b, a) < 1e-13

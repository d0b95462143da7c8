"""The review question of seed 004, settled against the float64 gradient (NOTES.md, "The review question").

The fused backward reads A through a transposed pointer, so its tile holds Aᵀ; the review asked for
`tl.trans` around that tile in three products. `WY_VARIANTS` builds all four combinations of pointer
and transpose. Exactly the two whose tile acts as Aᵀ reproduce the gradients of the definition; the
other two (the review's transposes on the seed's pointer, or the review's pointer without them) must
be far off in every gradient that passes through the WY backward (dk, dv, dg, dβ) and leave dq and
dS_0, which do not, untouched.
"""

import workbench  # noqa: F401  (first: configures Triton's interpreter before triton loads)

import jax
import jax.numpy as jnp
import pytest

from workbench import testing
from workbench.kda import WY_VARIANTS, chunk_kda_wy_variant
from workbench.kda.inputs import kda_inputs
from workbench.kda.reference import chunk_kda_ref, recurrent_kda_ref

NAMES = ("q", "k", "v", "g", "beta", "initial_state")
THROUGH_WY = ("k", "v", "g", "beta")
RIGHT = {"transposed_pointer", "natural_pointer+trans"}

pytestmark = pytest.mark.usefixtures("ieee_float32")


def _grads(op, inputs, cts, jit=True, **options):
    def run(inputs, cts):
        _, pullback = jax.vjp(lambda d: op(**d, **options), inputs)
        return pullback(cts)[0]

    return (jax.jit(run) if jit else run)(inputs, cts)


def test_kda_15():
    # unnormalised keys of norm 2 and β up to 1: L is far from 0, so A and Aᵀ differ by O(1)
    inputs = kda_inputs(21, 1, 40, 1, 16, 16, strength=0.5, key_scale=2.0)
    cts = testing.random_cotangents(22, jax.eval_shape(lambda x: chunk_kda_ref(**x), inputs))
    oracle = _grads(recurrent_kda_ref, testing.to_float64(inputs), testing.to_float64(cts))
    reference = _grads(chunk_kda_ref, inputs, cts, chunk_size=16)
    errors = {}
    for variant in WY_VARIANTS:
        grads = _grads(chunk_kda_wy_variant, inputs, cts, jit=False, variant=variant, chunk_size=16)  # eager: the
        # kernels' callbacks compile once for all four, a jitted program would compile per variant
        rows = [testing.compare(f"d{n}", grads[n], reference[n], oracle[n]) for n in NAMES]
        print(f"\n{variant} (pointer gives {'Aᵀ' if WY_VARIANTS[variant][0] else 'A'}, "
              f"tl.trans {'yes' if WY_VARIANTS[variant][1] else 'no'})\n" + "\n".join(map(str, rows)))
        errors[variant] = {n: r for n, r in zip(NAMES, rows)}
    assert {v for v, (pointer_t, trans) in WY_VARIANTS.items() if pointer_t != trans} == RIGHT
    for variant, rows in errors.items():
        if variant in RIGHT:
            testing.assert_within_budget(list(rows.values()))
        else:
            for n in THROUGH_WY:  # wrong by far more than any rounding
                assert rows[n].kernel_err > 1e-2 and rows[n].kernel_err > 1e3 * rows[n].reference_err, (variant, n)
            testing.assert_within_budget([rows["q"], rows["initial_state"]])

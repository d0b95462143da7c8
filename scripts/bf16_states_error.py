"""What bfloat16 chunk states would cost chunk_gla in accuracy, measured before building them (issue 48).

    python scripts/bf16_states_error.py [T] [STRENGTHS]      # e.g. 2048 0.02,0.1

The per-chunk states the forward sweep stores (h at chunk starts, kept for the backward) and the backward sweep
stores (dH at chunk ends) are float32 arrays crossing kernels. Stored in bfloat16 they would halve that traffic
and the states' share of the residuals. This rounds them to bfloat16 (round to nearest even, as a bfloat16
store would) right where `_state_sweep` returns them, so every kernel that reads them sees the rounded values,
and prints the kernel's error against the float64 oracle beside the bfloat16 reference's (`testing.check`),
with and without the rounding, at B1 H2 K = V = 32, per-key gate of each strength. Runs on the CPU interpreter;
it patches the glue's `_state_sweep` in this process only."""
import sys

import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)

import workbench  # noqa: E402
from workbench import testing  # noqa: E402

GLUE = sys.modules["workbench.chunk_gla"]
SWEEP = GLUE._state_sweep
ROUND = {"on": False}


def rounded_sweep(*args, **kwargs):
    """The glue's state sweep, its per-chunk states rounded to bfloat16 when ROUND is on (`reduce_precision`:
    XLA keeps it, where it may drop a cast to bfloat16 and back)."""
    final, states = SWEEP(*args, **kwargs)
    if ROUND["on"]:
        states = jax.lax.reduce_precision(states, exponent_bits=8, mantissa_bits=7)
    return final, states


def main() -> None:
    GLUE._state_sweep = rounded_sweep
    T = int(sys.argv[1]) if len(sys.argv) > 1 else 512
    strengths = [float(x) for x in sys.argv[2].split(",")] if len(sys.argv) > 2 else [0.02, 0.1, 1.0]
    for strength in strengths:
        inputs = testing.recurrent_inputs(3, 1, T, 2, 32, 32, dtype=jnp.bfloat16, gates=("gk",), strength=strength)
        cts = testing.random_cotangents(4, (jax.ShapeDtypeStruct((1, T, 2, 32), jnp.bfloat16),
                                            jax.ShapeDtypeStruct((1, 2, 32, 32), jnp.float32)))
        diff = {n: x for n, x in inputs.items() if n in ("q", "k", "v", "gk", "initial_state")}
        rest = {n: x for n, x in inputs.items() if n not in diff}

        def op(impl):
            return lambda d, r: workbench.chunk_gla(**d, **r, implementation=impl)

        for on in (False, True):
            ROUND["on"] = on
            report = testing.check(op("triton"), op("reference"), (diff, rest), argnums=(0,), cotangents=cts,
                                   output_names=("o", "final_state"), jit=False)
            print(f"T={T} gate strength {strength}, states in {'bfloat16' if on else 'float32'}\n{report}", flush=True)


if __name__ == "__main__":
    main()

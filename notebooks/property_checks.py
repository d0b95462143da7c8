# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Property checks with Hypothesis: what a passing property and a shrunk counterexample look like
#
# A unit test checks the cases someone thought of. A **property** states something that must hold
# for *every* input, and [Hypothesis](https://hypothesis.readthedocs.io) searches for an input that
# breaks it. When it finds one, it **shrinks** it: it keeps simplifying the failing input (shorter
# sequences, fewer gates, smaller numbers, seed 0) while the property still fails, and reports the
# simplest failure it can reach. A shrunk counterexample usually names the bug.
#
# workbench's tests use the strategies of `workbench.strategies`: sizes from short lists that
# include sizes that do not fill a block, gate sets, gate strengths, and an integer **seed** from
# which `workbench.testing.recurrent_inputs` builds the arrays, so one number reproduces a failure.
# Here we run two properties of `workbench.recurrent` interactively, then watch Hypothesis catch
# two deliberately broken variants and shrink their failures.

# %%
import pathlib
import sys

# The package is not installed: put the repository root (the folder holding workbench/) on the path.
ROOT = next(p for p in (pathlib.Path.cwd(), *pathlib.Path.cwd().parents)
            if (p / "workbench" / "__init__.py").exists())
sys.path.insert(0, str(ROOT))

import workbench  # first: decides compiled vs interpreted Triton before triton is imported
from workbench import strategies as wst
from workbench import testing

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

jax.config.update("jax_enable_x64", True)  # the float64 oracle

# Few examples (each one runs Triton's interpreter on a CPU), no deadline, the same examples on
# every run, no example database written next to the notebook, and no shrinking for the kernel:
# shrinking re-runs dozens of examples, which is cheap for the pure-JAX variants below but minutes
# for the interpreter (in CI the `dev` profile shrinks).
interactive = settings(max_examples=4, deadline=None, derandomize=True, database=None,
                       phases=[Phase.explicit, Phase.generate],
                       suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
shrinking = settings(interactive, max_examples=40, phases=[Phase.explicit, Phase.generate, Phase.shrink])

# Small sizes for the interpreter, still including lengths and dims that fill no block.
small_shapes = st.tuples(st.just(1), st.sampled_from([1, 7, 16]), st.sampled_from([1, 2]),
                         st.sampled_from([8, 12]), st.sampled_from([8, 12]))  # (B, T, H, K, V)

# %% [markdown]
# ## Property 1: the kernel agrees with the reference, within the error budget
#
# For any shape, dtype, set of gates and decay strength, the Triton kernel's output and final
# state are within the budget of `workbench.testing`: its error against the float64 oracle is at
# most 1.5× the error of the reference run in the same dtype, plus atol.

# %%
# The op under `jax.jit`: one XLA program per shape and dtype instead of op-by-op dispatch, which on a
# CPU spends most of its time compiling each small operation. Every call below goes through it.
recurrent = jax.jit(workbench.recurrent, static_argnames=("implementation", "reverse"))


def budget_table(args, **options):
    """Forward outputs of the kernel and the same-dtype reference, compared with the float64 oracle."""
    kernel = recurrent(**args, **options, implementation="triton")
    ref = recurrent(**args, **options, implementation="reference")
    oracle = recurrent(**testing.to_float64(args), **options, implementation="reference")
    return [testing.compare(name, *xs) for name, *xs in zip(("o", "final_state"), kernel, ref, oracle)]


seen, passed = [], set()


@interactive
@given(seed=wst.seeds, shape=small_shapes, dtype=wst.kernel_dtypes, gates=wst.gate_sets,
       strength=wst.gate_strengths)
def kernel_matches_reference(seed, shape, dtype, gates, strength):
    args = testing.recurrent_inputs(seed, *shape, dtype=dtype, gates=gates, strength=strength)
    table = budget_table(args)
    seen.append((shape, jnp.dtype(dtype).name, gates, strength, table[0].kernel_err, table[0].tolerance))
    testing.assert_within_budget(table)


kernel_matches_reference()
passed.add("kernel matches reference")
print(f"{'(B, T, H, K, V)':>18s} {'dtype':>9s} {'gates':>26s} strength  err(o)    tolerance")
for shape, dtype, gates, strength, err, tol in seen:
    print(f"{str(shape):>18s} {dtype:>9s} {str(gates):>26s} {strength:>8} {err:.2e}  {tol:.2e}")

# %% [markdown]
# ## Property 2: reverse is the forward recurrence on flipped time
#
# `reverse=True` runs each sequence from its last token to its first, so flipping the time axis
# of every input, running forward, and flipping the output back must give the same result:
# $\text{rev}(x) = \text{flip}(\text{fwd}(\text{flip}(x)))$, and the same final state.

# %%
@interactive
@given(seed=wst.seeds, shape=small_shapes, gates=wst.gate_sets, strength=wst.gate_strengths)
def reverse_is_flip(seed, shape, gates, strength):
    args = testing.recurrent_inputs(seed, *shape, gates=gates, strength=strength)
    flipped = {name: jnp.flip(x, 1) if name in ("q", "k", "v", "g", "gk", "gv") else x for name, x in args.items()}
    o_rev, S_rev = recurrent(**args, reverse=True)
    o_fwd, S_fwd = recurrent(**flipped)
    assert testing.rms_rel(o_rev, jnp.flip(o_fwd, 1)) < 1e-6, "o differs"
    assert testing.rms_rel(S_rev, S_fwd) < 1e-6, "final state differs"


reverse_is_flip()
passed.add("reverse is flip")
print("reverse = flip ∘ forward ∘ flip held on every example")

# %% [markdown]
# ## A broken variant, caught and shrunk
#
# Now a variant with a plausible off-by-one: it **ignores the gates of the last step** (as a
# kernel might if its loop over time stopped one step early for the decay but not for the update).
# It is a thin wrapper around the real op (the pure-JAX reference, so examples are cheap), not a
# second implementation. The property says it should equal the real op; Hypothesis looks for a
# counterexample, and we catch the failure to look at it.

# %%
def drop_last_gate(q, k, v, g=None, g_gamma=None, gk=None, gv=None, **options):
    """BROKEN on purpose: the gates of the last step are treated as 0 (no decay)."""
    zero_last = lambda x: None if x is None else x.at[:, -1].set(0)  # noqa: E731
    return recurrent(q, k, v, zero_last(g), g_gamma, zero_last(gk), zero_last(gv), **options,
                     implementation="reference")


@shrinking
@given(seed=wst.seeds, shape=small_shapes, gates=wst.gate_sets, strength=wst.gate_strengths)
def broken_matches_reference(seed, shape, gates, strength):
    args = testing.recurrent_inputs(seed, *shape, gates=gates, strength=strength)
    o_bad, S_bad = drop_last_gate(**args)
    o_ref, S_ref = recurrent(**args, implementation="reference")
    assert testing.rms_rel(S_bad, S_ref) < 1e-5, f"final state differs: {testing.rms_rel(S_bad, S_ref):.2e}"
    assert testing.rms_rel(o_bad, o_ref) < 1e-5, f"o differs: {testing.rms_rel(o_bad, o_ref):.2e}"


try:
    broken_matches_reference()
    caught = None
except AssertionError as error:
    caught = error
    print("Hypothesis caught it:", error)
    print("\n".join(getattr(error, "__notes__", [])))

# %% [markdown]
# Read the shrunk example: Hypothesis pushed every choice to its simplest failing value. The
# shortest length in the list, one step, already fails (with an initial state, that single step's
# decay matters); a single scalar gate suffices; strength `0.0` was tried and *passes* (a zero gate
# and a dropped gate agree), so the smallest failing strength is the next one. The failure is in
# the final state as well as the output. Together these say "the decay of some step is lost,
# even at T = 1": the last step. The example replays exactly from its values:

# %%
assert caught is not None, "Hypothesis did not catch the broken variant"
example_args = testing.recurrent_inputs(0, 1, 1, 1, 8, 8, gates=("g",), strength=0.1)
print("g of the one step:", np.asarray(example_args["g"]).ravel())
print("final state rel. diff:",
      f"{testing.rms_rel(drop_last_gate(**example_args)[1], recurrent(**example_args, implementation='reference')[1]):.2e}")

# %% [markdown]
# ## A broken gradient, found with `hypothesis.find`
#
# `hypothesis.find(strategy, condition)` returns the simplest example that satisfies `condition`,
# here "the gradient of this variant differs from the real one". The variant applies
# `jax.lax.stop_gradient` to `gk`: its forward pass is exactly right, so only a gradient check
# can catch it, and only with a cotangent that actually reaches the gates.

# %%
def stop_gk_gradient(q, k, v, gk, **options):
    """BROKEN on purpose: no gradient flows to gk (forward pass unchanged)."""
    return recurrent(q, k, v, gk=jax.lax.stop_gradient(gk), **options, implementation="reference")


def real(q, k, v, gk, **options):
    return recurrent(q, k, v, gk=gk, **options, implementation="reference")


def dgk_differs(case):
    seed, shape, strength = case
    args = testing.recurrent_inputs(seed, *shape, gates=("gk",), strength=strength)
    primals = [args[n] for n in ("q", "k", "v", "gk")]
    cts = testing.random_cotangents(seed + 1, jax.eval_shape(real, *primals))
    _, (*_, dgk_bad) = testing.vjp_all(stop_gk_gradient, primals, cts)
    _, (*_, dgk_ref) = testing.vjp_all(real, primals, cts)
    return testing.rms_rel(dgk_bad, dgk_ref) > 1e-5


shrunk = find(st.tuples(wst.seeds, small_shapes, wst.gate_strengths), dgk_differs,
              settings=shrinking)
print("simplest (seed, (B, T, H, K, V), strength) whose dgk is wrong:", shrunk)

# %% [markdown]
# The simplest failure has strength `0.0`: the gate is identically zero, the forward pass cannot
# tell the variants apart, yet the true gradient with respect to `gk` is not zero (it measures how
# the output *would* change if the gate decayed). A forward-only test, or a test run only on
# "interesting" gate values, would have missed it.
#
# ## Check
#
# The real op passed both properties on every example above (a failure would have raised), and
# both broken variants were caught.

# %%
assert caught is not None and shrunk is not None, "a broken variant went unnoticed"
assert passed == {"kernel matches reference", "reverse is flip"}, f"only {passed} passed"
print(f"property 1: {len(seen)} examples within budget; property 2 held; "
      "both broken variants caught and shrunk")

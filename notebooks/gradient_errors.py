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
# # Gradient errors of the recurrent kernel: derivation, kernel, error maps
#
# How accurate are the forward output and the seven gradients of `workbench.recurrent`? "Close to the
# reference" is not a usable answer: in bfloat16 *every* implementation is off by about a percent.
# workbench holds each kernel to an **error budget** (STYLE.md, `workbench.testing`): with the
# oracle the float64 reference evaluated on the same (already rounded) inputs,
#
# $$
# \operatorname{err}(x) = \frac{\lVert x - x_{\text{oracle}} \rVert_2}{\lVert x_{\text{oracle}} \rVert_2},
# \qquad
# \operatorname{err}(\text{kernel}) \;\le\; 1.5 \cdot \operatorname{err}(\text{reference in the kernel's dtype}) + \text{atol}.
# $$
#
# The kernel may be no worse than 1.5× what the plain JAX reference does with the same precision.
# This notebook derives the backward, runs the Triton kernel's backward, and draws where the error
# sits (position × head), how it compares per gradient, and how it grows with sequence length and
# decay strength.

# %%
import functools
import pathlib
import sys

# The package is not installed: put the repository root (the folder holding workbench/) on the path.
ROOT = next(p for p in (pathlib.Path.cwd(), *pathlib.Path.cwd().parents)
            if (p / "workbench" / "__init__.py").exists())
sys.path.insert(0, str(ROOT))

import workbench  # first: decides compiled vs interpreted Triton before triton is imported
from workbench import plots, testing
from workbench.recurrent import reference

import jax
import jax.numpy as jnp
import numpy as np
from IPython.display import display
from matplotlib_inline.backend_inline import set_matplotlib_formats

set_matplotlib_formats("png")  # show the Figure objects that workbench.plots returns

jax.config.update("jax_enable_x64", True)  # the float64 oracle
print("Triton runs", "in the interpreter (CPU)" if workbench.INTERPRET else "compiled (CUDA)")
print(f"budget: kernel error <= {testing.RATIO} x reference error + atol {testing.ATOL}")

# %% [markdown]
# ## 1. The derivation
#
# Forward (NOTES.md (rec.1)), with $D_t = \exp(G_t)$ and $\tilde q_t = \text{scale}\cdot q_t$:
# $S_t = D_t \odot S_{t-1} + k_t v_t^\top$, $o_t = S_t^\top \tilde q_t$.
# Given cotangents $\mathrm{d}o_t$ for every output and $\mathrm{d}S_T$ for the final state
# (random, never all ones: a `.sum()` loss hides bugs), the state cotangent runs backwards in time:
#
# $$
# \begin{aligned}
# \mathrm{d}S_t &= \tilde q_t\, \mathrm{d}o_t^\top + D_{t+1} \odot \mathrm{d}S_{t+1},
#   \quad \mathrm{d}S_{T+1} \odot D_{T+1} := \mathrm{d}S_T^{\text{(cotangent)}} && \text{(rec.3)}\\
# \mathrm{d}q_t &= \text{scale}\cdot S_t\, \mathrm{d}o_t && \text{(rec.4)}\\
# \mathrm{d}k_t &= \mathrm{d}S_t\, v_t, \qquad \mathrm{d}v_t = \mathrm{d}S_t^\top k_t && \text{(rec.5, rec.6)}\\
# \mathrm{d}S_0 &= D_1 \odot \mathrm{d}S_1 && \text{(rec.7)}\\
# \mathrm{d}g^k_t &= \sum_{r \ge t} \big(q_r \odot \mathrm{d}q_r - k_r \odot \mathrm{d}k_r\big)
#    + \textstyle\sum_j (\mathrm{d}S_T \odot S_T)_{:, j} && \text{(rec.8)}\\
# \mathrm{d}g^v_t &= \sum_{r \ge t} \big(o_r \odot \mathrm{d}o_r - v_r \odot \mathrm{d}v_r\big)
#    + \textstyle\sum_i (\mathrm{d}S_T \odot S_T)_{i, :} && \text{(rec.9)}
# \end{aligned}
# $$
#
# and the scalar gate's gradient is $\mathrm{d}g_t = \sum_i \mathrm{d}g^k_t[i]$. The gate gradients
# are **reverse cumulative sums** of differences of products: that is where cancellation, and so
# low-precision error, comes from. `reference.recurrent_bwd_ref` writes these formulas in JAX; in
# float64 they agree with autodiff of the definition to rounding:

# %%
B, T, H, K, V = 1, 16, 2, 8, 8
x64 = testing.to_float64(testing.recurrent_inputs(0, B, T, H, K, V, gates=("g", "gk", "gv")))
DIFF = ("q", "k", "v", "g", "gk", "gv", "initial_state")
GRAD_NAMES = ("dq", "dk", "dv", "dg", "dgk", "dgv", "dh0")


def definition(*primals):
    return reference.recurrent_ref(**dict(zip(DIFF, primals)), scale=K ** -0.5)


cts = testing.to_float64(testing.random_cotangents(1, jax.eval_shape(definition, *(x64[n] for n in DIFF))))
_, autodiff = testing.vjp_all(definition, [x64[n] for n in DIFF], cts)
derived = reference.recurrent_bwd_ref(x64["q"], x64["k"], x64["v"], x64["g"], None, x64["gk"], x64["gv"],
                                      x64["initial_state"], *cts, scale=K ** -0.5)
derived = dict(zip(("dq", "dk", "dv", "dg", "dgk", "dgv", "dh0"), derived))
for name, a in zip(GRAD_NAMES, autodiff):
    print(f"{name:>4s}: derived vs autodiff (float64) {testing.rms_rel(derived[name], a):.1e}")

# %% [markdown]
# ## 2. The kernel's backward
#
# The Triton path is a `jax.custom_vjp`: `jax.vjp(workbench.recurrent)` runs the forward kernel,
# then the backward kernel, which recomputes $S_t$ in a forward sweep (emitting $\mathrm{d}q_t$ and
# the $q \odot \mathrm{d}q$ terms) and runs $\mathrm{d}S_t$ backwards in a second sweep (emitting
# $\mathrm{d}k_t$, $\mathrm{d}v_t$ and the reverse cumulative sums). The glue below evaluates one
# implementation at one precision and returns every output and gradient by name; the oracle is
# `implementation="reference"` on the float64 casts of the same rounded inputs and cotangents.

# %%
@functools.partial(jax.jit, static_argnums=2)
def outputs_and_grads(args, cts, implementation):
    """{"o", "final_state", "dq", …, "dh0"} of `workbench.recurrent` for the given cotangents."""
    fn = lambda *p: workbench.recurrent(**dict(zip(DIFF, p)), implementation=implementation)  # noqa: E731
    (o, final_state), grads = testing.vjp_all(fn, [args[n] for n in DIFF], cts)
    return {"o": o, "final_state": final_state, **dict(zip(GRAD_NAMES, grads))}


def measure(seed, dtype, B, T, H, K=8, V=8, strength=1.0):
    """(kernel, reference, oracle) results for one random problem with every differentiable gate."""
    args = testing.recurrent_inputs(seed, B, T, H, K, V, dtype=dtype, gates=("g", "gk", "gv"), strength=strength)
    shapes = jax.eval_shape(lambda a: workbench.recurrent(**a, implementation="reference"), args)
    cts = testing.random_cotangents(seed + 1, shapes)
    return (outputs_and_grads(args, cts, "triton"), outputs_and_grads(args, cts, "reference"),
            outputs_and_grads(testing.to_float64(args), testing.to_float64(cts), "reference"))


NAMES = ("o", "final_state", *GRAD_NAMES)


def comparisons(kernel, ref, oracle):
    return [testing.compare(n, kernel[n], ref[n], oracle[n]) for n in NAMES]


results = {dtype.__name__: measure(0, dtype, B=1, T=24, H=2) for dtype in (jnp.float32, jnp.bfloat16)}
for name in NAMES:
    a = results["bfloat16"][0][name]
    print(f"{name:>12s}: {str(a.shape):>16s} {a.dtype}")

# %% [markdown]
# ## 3. Where the error sits: position × head
#
# Each cell is the largest absolute error of the Triton kernel against the float64 oracle over the
# batch and feature dims at one position and head (log color scale). One wrong token, head or block
# boundary would stand out as a stripe.

# %%
for dtype_name, (kernel, _, oracle) in results.items():
    for name in ("o", "dk", "dgk"):
        display(plots.error_map(kernel[name], oracle[name],
                                title=f"{name}, {dtype_name}: |Triton − float64 oracle| (T=24, H=2, strength 1)"))

# %% [markdown]
# What a healthy kernel looks like here: unstructured noise at the rounding level of its dtype
# (about $10^{-7}$ in float32; in bfloat16 set by rounding inputs and outputs to 8 mantissa bits).
# What a bug looks like: a stripe along one head or position range (a wrong offset or block
# boundary), a ramp along $t$ (an error that accumulates through the state or through the reverse
# cumulative sums of (rec.8)), or blank cells, which are non-finite values.
#
# ## 4. Per gradient: kernel vs reference in the same dtype
#
# The bars compare the kernel (blue) with the reference run in the kernel's dtype (orange), both
# against the float64 oracle; the black tick is the budget $1.5 \cdot$ reference $+$ atol.

# %%
budget = []
for dtype_name, (kernel, ref, oracle) in results.items():
    table = comparisons(kernel, ref, oracle)
    budget += table
    print("\n".join(str(c) for c in table))
    display(plots.error_bars(table, title=f"{dtype_name}: error per output and gradient (T=24, H=2)"))

# %% [markdown]
# ## 5. How the error grows
#
# With sequence length $T$ (strength 1), and with decay strength (0 = no decay; 12 = each step
# multiplies the state by about $e^{-18}$ per gate, so only the last token survives), for the output,
# one input gradient and one gate gradient. The kernel (solid) should track the reference (dashed).

# %%
SHOWN = ("o", "dk", "dgk")
Ts, strengths = (8, 16, 32), (0.0, 1.0, 5.0, 12.0)
for sweep, values, xlabel in (("T", Ts, "sequence length T"), ("strength", strengths, "decay strength")):
    for dtype in (jnp.float32, jnp.bfloat16):
        errors = {"kernel": {n: [] for n in SHOWN}, "reference": {n: [] for n in SHOWN},
                  "tolerance": {n: [] for n in SHOWN}}
        for value in values:
            T_, s_ = (value, 1.0) if sweep == "T" else (16, value)
            table = comparisons(*measure(10, dtype, B=1, T=T_, H=1, strength=s_))
            budget += table
            for c in table:
                if c.name in SHOWN:
                    errors["kernel"][c.name].append(c.kernel_err)
                    errors["reference"][c.name].append(c.reference_err)
                    errors["tolerance"][c.name].append(c.tolerance)
        display(plots.error_growth(values, errors["kernel"], errors["reference"], tolerance=errors["tolerance"],
                                   xlabel=xlabel, logx=sweep == "T",
                                   title=f"{dtype.__name__}: error vs {xlabel} (H=1, K=V=8)"))

# %% [markdown]
# At these sizes neither curve should grow much with $T$: each output is rounded once, and the
# decays keep the state bounded. Strong decay is the hard case for the gate gradients: they are
# small, of the order of the decay itself, while (rec.8) computes them as differences of terms of
# order one (NOTES.md, "Precision of the identity"), so a kernel that uses the identity can lose
# relative precision where autodiff of the definition does not. The budget is relative to the
# reference for exactly this reason: it asks "as good as the plain JAX code in this dtype?".
#
# ## Check: every kernel error is within budget
#
# Every output and gradient of every configuration above: the Triton kernel's error against the
# float64 oracle is at most 1.5× the reference's error in the same dtype plus atol, and finite.

# %%
over = [c for c in budget if not c.ok]
print(f"{len(budget)} comparisons, {len(over)} over budget; worst kernel/reference ratio "
      f"{max(c.ratio for c in budget if c.reference_err > 0):.2f}")
testing.assert_within_budget(budget)

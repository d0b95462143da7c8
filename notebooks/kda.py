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
# # Kimi Delta Attention: the delta rule, its WY form, and a transpose question settled with numbers
#
# `workbench.recurrent_kda` and `workbench.chunk_kda` compute the gated delta rule
# (`workbench/kda/NOTES.md`, (kda.1)):
#
# $$
# S'_t = \mathrm{diag}(e^{g_t})\,S_{t-1},\qquad
# S_t = S'_t + \beta_t\,k_t\,(v_t - S_t'^\top k_t)^\top,\qquad
# o_t = S_t^\top(\text{scale}\cdot q_t).
# $$
#
# This notebook shows what β and the gate do to the state (the rule as online regression), the WY
# form that `chunk_kda` uses inside each chunk with its small matrices printed, that both Triton ops
# agree with the float64 definition, the review dispute of seed 004 as error maps of the right and the
# wrong variant, and the fused vs unfused backward timings recorded in `data/bench/` (if any). It ends
# with a check that fails if the kernels or the verdict were wrong.

# %%
import json
import pathlib
import sys

# The package is not installed: put the repository root (the folder holding workbench/) on the path.
ROOT = next(p for p in (pathlib.Path.cwd(), *pathlib.Path.cwd().parents)
            if (p / "workbench" / "__init__.py").exists())
sys.path.insert(0, str(ROOT))

import workbench  # first: decides compiled vs interpreted Triton before triton is imported
from workbench import plots, testing
from workbench.kda import WY_VARIANTS, chunk_kda_wy_variant
from workbench.kda.inputs import kda_inputs
from workbench.kda.reference import chunk_kda_ref, kda_step, recurrent_kda_ref

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

jax.config.update("jax_enable_x64", True)
np.set_printoptions(precision=3, suppress=True, linewidth=110)
print("Triton runs", "in the interpreter (CPU)" if workbench.INTERPRET else "compiled (CUDA)")
checks = {}

# %% [markdown]
# ## 1. The delta rule as online regression
#
# $S^\top k$ is the state's prediction of the value stored under key $k$. One step of (kda.1) is a
# gradient step of rate $\beta_t$ on $\tfrac12\lVert S^\top k_t - v_t\rVert^2$, taken from the decayed
# state. Below: two fixed associations $(k_1, v_1)$, $(k_2, v_2)$ with unit keys, written alternately
# for 24 steps, and the error of the prediction for $k_1$ just *before* each write of it. With
# $\beta = 1$ and no decay one write is enough; smaller β converges geometrically (a fraction β per
# write, as far as the other key's writes do not interfere); a decay $g < 0$ forgets between writes, so
# the error settles at a floor.

# %%
K = V = 3
k1, k2 = np.array([1.0, 0.0, 0.0]), np.array([0.6, 0.8, 0.0])
v1, v2 = np.array([1.0, -2.0, 0.5]), np.array([-1.0, 0.0, 3.0])


def prediction_errors(beta, decay, steps=24):
    S, errs = jnp.zeros((K, V)), []
    for t in range(steps):
        k, v = (k1, v1) if t % 2 == 0 else (k2, v2)
        if t % 2 == 0:
            errs.append(float(jnp.linalg.norm(jnp.exp(decay) * S.T @ k1 - v1)))
        S, _ = kda_step(S, jnp.zeros(K), jnp.asarray(k), jnp.asarray(v), jnp.full(K, decay), beta, 1.0)
    return errs


fig, ax = plt.subplots(figsize=(7, 3.2), layout="constrained")
for beta, decay in ((1.0, 0.0), (0.5, 0.0), (0.2, 0.0), (0.5, -0.3)):
    ax.semilogy(prediction_errors(beta, decay), marker="o", ms=3, label=f"β = {beta}, g = {decay}")
ax.set_xlabel("write of (k₁, v₁)")
ax.set_ylabel("‖S'ᵀk₁ − v₁‖ before it")
ax.legend()
plt.show()
errs = prediction_errors(1.0, 0.0)
print("β = 1, no decay: error before the 2nd, 3rd, 4th write:", np.round(errs[1:4], 3))
checks["beta=1 stores the last write exactly (up to the other key's overlap)"] = errs[-1] < 1.0

# %% [markdown]
# ## 2. The WY form, step by step, on one chunk of 4 rows
#
# Inside a chunk with start state $h$ and prefix sums $b_r$ of the log-decays, the corrections
# $\delta_r = \beta_r(v_r - S_r'^\top k_r)$ depend on each other. Substituting the unrolled state gives
# one triangular system (kda.3): with
# $L_{rs} = \beta_r\sum_i k_r[i]k_s[i]e^{b_r[i]-b_s[i]}$ ($s<r$),
# $(I + L)\,\delta = \beta\odot(v - \tilde k h)$, $\tilde k = k\odot e^{b}$. So with $A = (I+L)^{-1}$ and
# the WY vectors $w = A(\beta\odot\tilde k)$, $u = A(\beta\odot v)$: $\delta = u - w h$, and the chunk's
# product of transitions is $\Gamma_L - \hat k^\top w$ (kda.4). Small matrices, float64:

# %%
n, Kc, Vc = 4, 3, 2
x = {name: np.asarray(a[0, :, 0], np.float64) for name, a in
     kda_inputs(5, 1, n, 1, Kc, Vc, strength=0.5, key_scale=1.5, initial_state=False).items()}
h = np.asarray(jax.random.normal(jax.random.key(6), (Kc, Vc)), np.float64)
b = np.cumsum(x["g"], axis=0)
ratio = np.exp(b[:, None] - b[None, :])
L = np.tril(x["beta"][:, None] * np.einsum("rk,sk,rsk->rs", x["k"], x["k"], ratio), -1)
A = np.linalg.inv(np.eye(n) + L)
kg = x["k"] * np.exp(b)
w, u = A @ (x["beta"][:, None] * kg), A @ (x["beta"][:, None] * x["v"])
print("L (strictly lower):\n", L)
print("A = (I + L)^-1 (unit lower, by forward substitution):\n", A)
print("w = A (β ⊙ k̃):\n", w)
print("u = A (β ⊙ v):\n", u)

# the corrections, step by step, from the definition
S, deltas = h.copy(), []
for t in range(n):
    Sd = np.exp(x["g"][t])[:, None] * S
    deltas.append(x["beta"][t] * (x["v"][t] - Sd.T @ x["k"][t]))
    S = Sd + np.outer(x["k"][t], deltas[-1])
deltas = np.stack(deltas)
print("δ step by step:\n", deltas)
print("u − w h:\n", u - w @ h)
khat = x["k"] * np.exp(b[-1] - b)
M = np.eye(Kc)
for t in range(n):
    M = (np.eye(Kc) - x["beta"][t] * np.outer(x["k"][t], x["k"][t])) @ np.diag(np.exp(x["g"][t])) @ M
print("product of the 4 transitions vs Γ_L − k̂ᵀ w: max |Δ| =",
      f"{np.abs(M - (np.diag(np.exp(b[-1])) - khat.T @ w)).max():.1e}")
checks["WY: δ = u − w h"] = np.allclose(deltas, u - w @ h, rtol=0, atol=1e-12)
checks["WY: Π transitions = Γ_L − k̂ᵀ w"] = np.allclose(M, np.diag(np.exp(b[-1])) - khat.T @ w, rtol=0, atol=1e-12)
checks["WY: state after the chunk"] = np.allclose(S, np.exp(b[-1])[:, None] * h + khat.T @ (u - w @ h), atol=1e-12)

# %% [markdown]
# ## 3. Both Triton ops agree with the float64 definition
#
# T = 37 (not a multiple of any chunk size), two heads, an initial state; forward outputs in float32
# against the definition `recurrent_kda_ref` in float64, and the float64 chunkwise reference at chunk
# sizes 16 and 64.

# %%
x32 = kda_inputs(0, 1, 37, 2, 8, 8, strength=1.0)
x64 = testing.to_float64(x32)
o_def, S_def = recurrent_kda_ref(**x64)
chunk_ref = jax.jit(chunk_kda_ref, static_argnames="chunk_size")
forms = {f"chunkwise reference, float64, C={C}": chunk_ref(**x64, chunk_size=C) for C in (16, 64)}
forms["chunk_kda (Triton), float32, C=16"] = workbench.chunk_kda(**x32, chunk_size=16)
forms["recurrent_kda (Triton), float32"] = workbench.recurrent_kda(**x32)
print(f"{'form':>38s}   o vs definition   final state vs definition")
for name, (o, S) in forms.items():
    print(f"{name:>38s}   {testing.rms_rel(o, o_def):15.1e}   {testing.rms_rel(S, S_def):15.1e}")
    limit = 1e-12 if "float64" in name else 1e-6
    checks[f"forms agree: {name}"] = testing.rms_rel(o, o_def) < limit and testing.rms_rel(S, S_def) < limit

# %% [markdown]
# ## 4. The review question: does the fused backward miss three transposes?
#
# Seed 004's fused kernel loads A through a block pointer with shape and strides swapped, then computes
# `tl.dot(b_A, b_dw)`, `tl.dot(b_A, b_du)` and `b_A · dA · b_A`. The review asked for `tl.trans(b_A)` in
# all three, since the backward of $x \mapsto A x$ needs $A^\top$ (and of the inverse,
# $-A^\top dA\, A^\top$, (kda.7)). But the swapped pointer already loads $A^\top$ (kda.8): A is stored
# row by row, `[T, H, BT]`, and reading tile position $[i, j]$ from row $j$, column $i$ gives $A^\top$.
# `WY_VARIANTS` builds all four combinations of pointer and transpose; below, the gradient of k in
# float32 against the float64 definition for each (keys of norm 2 so that $A$ is far from $I$).

# %%
xq = kda_inputs(21, 1, 32, 1, 16, 16, strength=0.5, key_scale=2.0)
cts = testing.random_cotangents(22, jax.eval_shape(lambda x: chunk_kda_ref(**x), xq))
names = ("q", "k", "v", "g", "beta", "initial_state")


def grads(op, inputs, cotangents, **options):
    @jax.jit  # one XLA program per op instead of op-by-op dispatch
    def run(primals, cotangents):
        _, pullback = jax.vjp(lambda d: op(**d, **options), primals)
        return pullback(cotangents)[0]

    return run({n: inputs[n] for n in names}, cotangents)


oracle = grads(recurrent_kda_ref, testing.to_float64(xq), testing.to_float64(cts))
reference = grads(chunk_kda_ref, xq, cts, chunk_size=16)
variant_grads = {v: grads(chunk_kda_wy_variant, xq, cts, variant=v, chunk_size=16) for v in WY_VARIANTS}
print(f"{'variant':>26s}  tile  tl.trans   " + "  ".join(f"{'d' + n:>8s}" for n in ("q", "k", "v", "g", "beta")))
for v, gr in variant_grads.items():
    pointer_t, trans = WY_VARIANTS[v]
    errs = [testing.rms_rel(gr[n], oracle[n]) for n in ("q", "k", "v", "g", "beta")]
    print(f"{v:>26s}  {'Aᵀ' if pointer_t else 'A ':>4s}  {'yes' if trans else 'no':>8s}   "
          + "  ".join(f"{e:8.1e}" for e in errs))
print(f"{'chunkwise reference':>26s}  {'':4s}  {'':8s}   "
      + "  ".join(f"{testing.rms_rel(reference[n], oracle[n]):8.1e}" for n in ("q", "k", "v", "g", "beta")))

for v in ("transposed_pointer", "transposed_pointer+trans"):
    fig = plots.error_map(variant_grads[v]["k"], oracle["k"], f"|dk − float64| · {v}")
    plt.show()

# %% [markdown]
# **Verdict.** The seed's lines are right as written: with the transposed pointer the tile is $A^\top$
# and the three products are $A^\top dw$, $A^\top du$ and $A^\top dA\,A^\top$ — its errors are the
# reference's. The review's `tl.trans` on that pointer (or its pointer without them) computes $A\,dw$,
# $A\,du$, $A\,dA\,A$: dk, dv, dg and dβ are wrong by tens of percent at every position; dq and
# $dS_0$ do not pass through A and stay right, which is how such a bug hides in a partial test. The
# test `tests/kda/test_transpose_question.py::test_kda_15` fails if this changes.

# %%
right = [v for v, (pointer_t, trans) in WY_VARIANTS.items() if pointer_t != trans]
for v, gr in variant_grads.items():
    err = max(testing.rms_rel(gr[n], oracle[n]) for n in ("k", "v", "g", "beta"))
    ref = max(testing.rms_rel(reference[n], oracle[n]) for n in ("k", "v", "g", "beta"))
    checks[f"variant {v} {'right' if v in right else 'wrong'}"] = (err < 2 * ref + 1e-6) if v in right else err > 1e-2

# %% [markdown]
# ## 5. Fused vs unfused backward: GPU timings from `data/bench/`
#
# `workbench bench --op chunk_kda --shapes target --peers` on a GPU times, in one run, the Triton path
# with the fused backward (`triton`), the same path with the unfused two-kernel backward
# (`triton[unfused backward]`, same forward), the JAX reference and flash-linear-attention's
# `chunk_kda`, and appends `data/bench/chunk_kda-<UTC time>.json`. The forward+backward difference of
# the two Triton rows is the fused kernel against its two halves.

# %%
records = []
for path in sorted((ROOT / "data" / "bench").glob("chunk_kda-*.json")):
    try:
        records.append((path.name, json.loads(path.read_text())))
    except (OSError, json.JSONDecodeError) as exc:
        print(f"skipped {path.name}: {exc}")
gpu = [(name, rec) for name, rec in records if not rec.get("interpreted")
       and any(r["implementation"] == "triton[unfused backward]" for r in rec.get("results", []))]
if not gpu:
    print("No GPU record for chunk_kda in data/bench/ yet: the fused vs unfused timing has not been measured.")
else:
    name, rec = gpu[-1]
    device = rec.get("device") or {}
    print(f"newest of {len(gpu)} GPU record(s) timing both backwards: {name} — "
          f"{device.get('kind') or device.get('name')}, "
          f"{rec.get('date', '?')}, {rec.get('dtype')}")
    ms = {(r["implementation"], r["pass"], tuple(r["shape"].items())): r["ms"]["median"] for r in rec["results"]}
    for shape in {tuple(r["shape"].items()) for r in rec["results"]}:
        label = " ".join(f"{k}={v}" for k, v in shape)
        for impl in sorted({i for i, _, s in ms if s == shape}):
            f, fb = ms.get((impl, "forward", shape)), ms.get((impl, "forward_backward", shape))
            print(f"  {label}  {impl:28s} forward {f:8.3f} ms   forward+backward {fb:8.3f} ms")
        fused = ms.get(("triton", "forward_backward", shape))
        unfused = ms.get(("triton[unfused backward]", "forward_backward", shape))
        if fused is not None and unfused is not None:
            print(f"  fused − unfused forward+backward: {fused - unfused:+.3f} ms")

# %% [markdown]
# ## Check
#
# The WY identities hold in float64, every form agrees with the definition, and the two right variants
# of the review question match the float64 gradient while the two wrong ones do not.

# %%
for name, ok in checks.items():
    print(f"{'PASS' if ok else 'FAIL'}  {name}")
assert all(checks.values()), [name for name, ok in checks.items() if not ok]

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
# # Fused recurrent linear attention: from one step to the full scan
#
# `workbench.recurrent` keeps a matrix state $S \in \mathbb{R}^{K \times V}$ per sequence and head,
# and updates it once per token:
#
# $$
# S_t = S_{t-1} \odot \exp(G_t) + k_t v_t^\top, \qquad
# G_t[i, j] = g_t + g_\gamma + g^k_t[i] + g^v_t[j], \qquad
# o_t = S_t^\top (\text{scale} \cdot q_t).
# $$
#
# The gates are **natural-log decays** ($\le 0$): a gate of 0 keeps the state, a gate of $-\infty$
# wipes it. This notebook walks the same road as the code:
#
# 1. one step, `workbench.recurrent.reference.recurrent_step` (NOTES.md (rec.1));
# 2. the full scan, `workbench.recurrent` with `implementation="reference"` (a `lax.scan` of that
#    step) and `implementation="triton"` (the Triton kernel; on a CPU it runs in Triton's interpreter);
# 3. what the gates do: the attention weights they induce;
# 4. `reverse`, packed variable-length sequences (`cu_seqlens`), and state passing.
#
# It ends with a check that fails if the Triton kernel disagrees with the reference.

# %%
import pathlib
import sys

# The package is not installed: put the repository root (the folder holding workbench/) on the path.
ROOT = next(p for p in (pathlib.Path.cwd(), *pathlib.Path.cwd().parents)
            if (p / "workbench" / "__init__.py").exists())
sys.path.insert(0, str(ROOT))

import workbench  # first: decides compiled vs interpreted Triton before triton is imported
from workbench import testing
from workbench.recurrent import reference

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

print("Triton runs", "in the interpreter (CPU)" if workbench.INTERPRET else "compiled (CUDA)")

# %% [markdown]
# ## 1. One step
#
# Starting from $S_0 = 0$, one step with no decay stores the outer product $k_1 v_1^\top$, and the
# output reads it back with the query: $o_1 = v_1 \,(k_1 \cdot \text{scale}\, q_1)$. `log_decay`
# builds the $[K, V]$ log-decay $G_t$ from whichever gates are present.

# %%
K, V = 4, 3
kq, kk, kv = jax.random.split(jax.random.key(0), 3)
q1, k1, v1 = testing.normal(kq, (K,)), testing.normal(kk, (K,)), testing.normal(kv, (V,))
scale = K ** -0.5

S0 = jnp.zeros((K, V))
G1 = reference.log_decay(K, V)  # no gates: zeros
S1, o1 = reference.recurrent_step(S0, q1, k1, v1, G1, scale)
print("S_1 = k v^T:", np.allclose(S1, jnp.outer(k1, v1)))
print("o_1 = v (k . scale q):", np.allclose(o1, v1 * (k1 @ (scale * q1)), atol=1e-6))

# %% [markdown]
# A second step with a per-key gate $g^k$ first decays row $i$ of the state by $\exp(g^k[i])$, then
# adds the new outer product:

# %%
gk2 = jnp.array([0.0, -0.5, -2.0, -10.0])
G2 = reference.log_decay(K, V, gk=gk2)
S2, o2 = reference.recurrent_step(S1, q1, k1, v1, G2, scale)

fig, axes = plt.subplots(1, 3, figsize=(9, 2.6), layout="constrained")
for ax, M, title in zip(axes, (S1, S1 * jnp.exp(G2), S2),
                        (r"$S_1 = k_1 v_1^\top$", r"$S_1 \odot \exp(G_2)$", r"$S_2$")):
    lim = float(jnp.abs(M).max())
    im = ax.imshow(M, cmap="RdBu_r", vmin=-lim, vmax=lim)
    ax.set(title=title, xlabel="value index j", ylabel="key index i", xticks=range(V), yticks=range(K))
    fig.colorbar(im, ax=ax, shrink=0.8)
fig.suptitle(r"One step with $g^k = (0, -0.5, -2, -10)$: row $i$ keeps $\exp(g^k_i)$ of its content")
plt.show()

# %% [markdown]
# ## 2. The full scan
#
# Looping the step over $t = 1 \dots T$ is the definition. `workbench.recurrent` does it for a batch
# `[B, T, H, ·]` of sequences and heads and returns `(o, final_state)`: o `[B, T, H, V]` and the
# state after the last token, `[B, H, K, V]` in float32. Here is the loop by hand for one sequence
# and head, next to both implementations.

# %%
B, T, H, K, V = 1, 16, 2, 8, 8
x = testing.recurrent_inputs(0, B, T, H, K, V, gates=("gk",), strength=0.5)

S = x["initial_state"][0, 0]
o_loop = []
for t in range(T):
    G = reference.log_decay(K, V, gk=x["gk"][0, t, 0])
    S, o_t = reference.recurrent_step(S, x["q"][0, t, 0], x["k"][0, t, 0], x["v"][0, t, 0], G, K ** -0.5)
    o_loop.append(o_t)
o_loop = jnp.stack(o_loop)

# From here on the op runs under `jax.jit`: one XLA program per call signature instead of op-by-op
# dispatch, which on a CPU spends most of its time compiling each small operation.
recurrent = jax.jit(workbench.recurrent, static_argnames=("scale", "reverse", "implementation"))
o_ref, S_ref = recurrent(**x, implementation="reference")
o_tri, S_tri = recurrent(**x, implementation="triton")
print(f"loop vs reference, o:        {testing.rms_rel(o_ref[0, :, 0], o_loop):.1e}")
print(f"triton vs reference, o:      {testing.rms_rel(o_tri, o_ref):.1e}")
print(f"triton vs reference, state:  {testing.rms_rel(S_tri, S_ref):.1e}")

# %% [markdown]
# ## 3. Gates as decays: the attention weights they induce
#
# Unrolling the recurrence with a scalar gate $g_t$ (one per head and step) gives linear attention
# with a decay mask:
#
# $$
# o_t = \sum_{s \le t} w[t, s]\, \big(\text{scale}\, q_t \cdot k_s\big)\, v_s, \qquad
# w[t, s] = \exp\Big(\sum_{r=s+1}^{t} g_r\Big).
# $$
#
# We can make the kernel *draw* $w$: with $K = 1$, $q = k = 1$, scale 1 and the values one-hot,
# $v_s = e_s$ (so $V = T$), the output row $o_t$ is exactly row $t$ of $w$. One batch element per
# gate strength (`testing.log_gate`: typical per-step log-decay ≈ $-1.5 \times$ strength), and
# `g_gamma`, a constant decay per head (RetNet-style), in a second call.

# %%
T = 20
ones = jnp.ones((3, T, 1, 1))
onehot = jnp.broadcast_to(jnp.eye(T), (3, T, T))[:, :, None, :]  # v_s = e_s, [B, T, H=1, V=T]
strengths = {"no gate": 0.0, "mild (strength 0.05)": 0.05, "strong (strength 1)": 1.0}
g = jnp.stack([testing.log_gate(jax.random.key(1), (T, 1), s) for s in strengths.values()])  # [3, T, 1]
w_g, _ = recurrent(ones, ones, onehot, g=g, scale=1.0)
g_gamma = jnp.array([-0.15])
w_gamma, _ = recurrent(ones[:1], ones[:1], onehot[:1], g_gamma=g_gamma, scale=1.0)

weights = {name: w_g[b, :, 0, :] for b, name in enumerate(strengths)}
weights[r"g_gamma = -0.15"] = w_gamma[0, :, 0, :]

fig, axes = plt.subplots(1, 4, figsize=(14, 3.6), layout="constrained")
for ax, (name, w) in zip(axes, weights.items()):
    im = ax.imshow(w, cmap="viridis", vmin=0, vmax=1)
    ax.set(title=name, xlabel="key position s", ylabel="query position t")
fig.colorbar(im, ax=axes, label="w[t, s]", shrink=0.85)
fig.suptitle("Effective attention weights of the Triton kernel, one per gate type")
plt.show()

# %% [markdown]
# No gate is plain causal linear attention (all ones under the diagonal); a mild gate fades old
# tokens slowly; a strong gate keeps only the last few; `g_gamma` gives the same decay profile
# $w[t, s] = \gamma^{t-s}$ on every row. The closed form above, computed from the gates with a
# cumulative sum, matches what the kernel produced:

# %%
def decay_weights(g):
    """Closed form w[t, s] = exp(c_t - c_s) for s <= t, c = cumsum(g) (glue for the check)."""
    c = np.cumsum(np.asarray(g, np.float64))
    return np.tril(np.exp(c[:, None] - c[None, :]))


for b, name in enumerate(strengths):
    print(f"{name:>22s}: max |kernel - closed form| = "
          f"{np.abs(weights[name] - decay_weights(g[b, :, 0])).max():.1e}")
print(f"{'g_gamma':>22s}: max |kernel - closed form| = "
      f"{np.abs(weights['g_gamma = -0.15'] - decay_weights(np.full(T, -0.15))).max():.1e}")

# %% [markdown]
# Per-key and per-value gates (`gk`, `gv`) do the same per channel: row $i$ of $S$ (or column
# $j$) has its own decay, so every key channel sees a different $w$.
#
# ## 4. Reverse
#
# `reverse=True` runs each sequence from its last token to its first:
# $S_t = S_{t+1} \odot \exp(G_t) + k_t v_t^\top$. It is the forward recurrence on time-flipped
# inputs, and the induced weights are anti-causal (upper triangular):

# %%
w_rev, _ = recurrent(ones[1:2], ones[1:2], onehot[1:2], g=g[1:2], scale=1.0, reverse=True)

fig, axes = plt.subplots(1, 2, figsize=(8, 3.6), layout="constrained")
for ax, w, title in zip(axes, (w_g[1, :, 0], w_rev[0, :, 0]), ("forward", "reverse=True")):
    im = ax.imshow(w, cmap="viridis", vmin=0, vmax=1)
    ax.set(title=f"mild gate, {title}", xlabel="key position s", ylabel="query position t")
fig.colorbar(im, ax=axes, label="w[t, s]", shrink=0.85)
plt.show()

x = testing.recurrent_inputs(1, 2, 16, 2, 8, 8, gates=("g", "gk"), strength=0.5)
flip = lambda a: jnp.flip(a, 1)  # noqa: E731  time axis of [B, T, ...]
o_rev, S_rev = recurrent(**x, reverse=True)
o_flip, S_flip = recurrent(flip(x["q"]), flip(x["k"]), flip(x["v"]), g=flip(x["g"]), gk=flip(x["gk"]),
                     initial_state=x["initial_state"])
print(f"reverse vs flip(forward(flip)), o:     {testing.rms_rel(o_rev, flip(o_flip)):.1e}")
print(f"reverse vs flip(forward(flip)), state: {testing.rms_rel(S_rev, S_flip):.1e}")

# %% [markdown]
# ## 5. Variable-length sequences: `cu_seqlens`
#
# Sequences of different lengths are packed into one row, `B = 1`, and `cu_seqlens` (int32,
# `[N+1]`) marks where each begins: sequence $n$ is rows `cu_seqlens[n]:cu_seqlens[n+1]`. The state
# resets to `initial_state[n]` at every boundary, so packed sequences never see each other. A
# zero-length sequence is allowed: its final state is its initial state.
#
# The same one-hot trick shows the layout: the weights are block diagonal.

# %%
cu = jnp.array([0, 6, 6, 13, 20], jnp.int32)  # lengths 6, 0, 7, 7
w_var, _ = recurrent(ones[:1], ones[:1], onehot[:1], g=g[1:2], scale=1.0, cu_seqlens=cu)
seq_id = np.searchsorted(np.asarray(cu), np.arange(T), side="right") - 1

fig, (ax0, ax1) = plt.subplots(2, 1, figsize=(5.5, 6.2), height_ratios=(1, 6), layout="constrained")
ax0.imshow(seq_id[None, :], cmap="tab10", vmin=0, vmax=9, aspect="auto")
for t in range(T):
    ax0.text(t, 0, seq_id[t], ha="center", va="center", fontsize=8, color="white")
ax0.set(title=f"packed rows, cu_seqlens = {np.asarray(cu).tolist()} (sequence 1 is empty)",
        xlabel="packed position", yticks=[])
im = ax1.imshow(w_var[0, :, 0], cmap="viridis", vmin=0, vmax=1)
for b in np.asarray(cu)[1:-1]:
    ax1.axhline(b - 0.5, color="white", lw=0.6)
    ax1.axvline(b - 0.5, color="white", lw=0.6)
ax1.set(title="w[t, s] with a mild gate: no attention across sequences",
        xlabel="key position s", ylabel="query position t")
fig.colorbar(im, ax=ax1, label="w[t, s]", shrink=0.8)
plt.show()

# %% [markdown]
# On random inputs, the packed call equals one call per sequence, each started from its own
# initial state:

# %%
N, TT, H, K, V = 4, 20, 2, 8, 8
xp = testing.recurrent_inputs(2, 1, TT, H, K, V, gates=("g", "gk"), strength=0.5, n_seqs=N)
o_pack, S_pack = recurrent(**xp, cu_seqlens=cu)
names = ("q", "k", "v", "g", "gk")
for n in range(N):
    bos, eos = int(cu[n]), int(cu[n + 1])
    if bos == eos:
        print(f"sequence {n}: empty, final state == initial state:",
              bool(jnp.array_equal(S_pack[n], xp["initial_state"][n])))
        continue
    piece = {name: xp[name][:, bos:eos] for name in names}
    o_n, S_n = recurrent(**piece, initial_state=xp["initial_state"][n:n + 1])
    print(f"sequence {n}: rows {bos}:{eos}, o rel. diff {testing.rms_rel(o_pack[:, bos:eos], o_n):.1e}, "
          f"state rel. diff {testing.rms_rel(S_pack[n], S_n[0]):.1e}")

# %% [markdown]
# ## 6. State passing
#
# The final state is everything the recurrence remembers, so a long sequence can be processed in
# pieces: run the first half, hand its `final_state` to the second half as `initial_state`, and the
# result is the same as one run over the whole sequence. (This is what chunked and distributed
# implementations rely on.)

# %%
x = testing.recurrent_inputs(3, 2, 32, 2, 8, 8, gates=("g", "gk", "gv"), strength=0.5)
o_full, S_full = recurrent(**x)
first = {name: x[name][:, :16] for name in ("q", "k", "v", "g", "gk", "gv")}
second = {name: x[name][:, 16:] for name in ("q", "k", "v", "g", "gk", "gv")}
o_a, S_a = recurrent(**first, initial_state=x["initial_state"])
o_b, S_b = recurrent(**second, initial_state=S_a)
print(f"two halves vs one run, o:     {testing.rms_rel(jnp.concatenate([o_a, o_b], 1), o_full):.1e}")
print(f"two halves vs one run, state: {testing.rms_rel(S_b, S_full):.1e}")

# %% [markdown]
# ## Check: the Triton kernel agrees with the reference
#
# Forward outputs and final states of the Triton kernel against the JAX reference, in float32, for
# every gate at once, forward and reverse, fixed-length and packed. The relative RMS differences
# are at float32 rounding level; anything structural (a wrong decay, a missed reset, a wrong
# direction) is orders of magnitude larger.

# %%
cases = {
    "fixed length": (testing.recurrent_inputs(4, 2, 17, 2, 12, 20, gates=("g", "g_gamma", "gk", "gv")), {}),
    "fixed, reverse": (testing.recurrent_inputs(5, 2, 17, 2, 12, 20, gates=("g", "g_gamma", "gk", "gv")),
                       {"reverse": True}),
    "packed": (testing.recurrent_inputs(6, 1, 20, 2, 12, 20, gates=("g", "gk", "gv"), n_seqs=4),
               {"cu_seqlens": cu}),
    "packed, reverse": (testing.recurrent_inputs(7, 1, 20, 2, 12, 20, gates=("g", "gk", "gv"), n_seqs=4),
                        {"cu_seqlens": cu, "reverse": True}),
}
worst = 0.0
for name, (args, options) in cases.items():
    o_t, S_t = recurrent(**args, **options, implementation="triton")
    o_r, S_r = recurrent(**args, **options, implementation="reference")
    err_o, err_S = testing.rms_rel(o_t, o_r), testing.rms_rel(S_t, S_r)
    worst = max(worst, err_o, err_S)
    print(f"{name:>16s}: o {err_o:.1e}   final state {err_S:.1e}")

assert worst < 1e-5, f"Triton kernel disagrees with the reference: worst relative RMS difference {worst:.1e}"
print("Triton and reference agree.")

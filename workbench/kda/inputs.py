"""Random inputs for `workbench.chunk_kda` / `workbench.recurrent_kda`, as users feed them.

Keys are L2-normalised per head (the delta rule's write is then a projection when β = 1), or, with
`key_scale`, left unnormalised at that typical norm; β = sigmoid(normal) ∈ (0, 1); log-decays from
`workbench.testing.log_gate` (typical magnitude `strength`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..testing import log_gate


def kda_inputs(seed: int, B: int, T: int, H: int, K: int, V: int, *, dtype=jnp.float32, strength: float = 1.0,
               key_scale: float | None = None, n_seqs: int | None = None, initial_state: bool = True):
    """Keyword arguments q, k, v, g, beta (and initial_state `[N, H, K, V]` float32) in `dtype`.

    key_scale: None for unit-norm keys; else keys are normal · key_scale / √K (norm ≈ key_scale).
    n_seqs: the number of packed sequences (then B should be 1; cu_seqlens is the caller's).
    """
    ks = jax.random.split(jax.random.key(seed), 6)
    normal = lambda kk, shape: jax.random.normal(kk, shape, jnp.float32)  # noqa: E731
    k = normal(ks[1], (B, T, H, K))
    if key_scale is None:
        k = k / jnp.maximum(jnp.linalg.norm(k, axis=-1, keepdims=True), 1e-6)
    else:
        k = k * (key_scale / K ** 0.5)
    args = dict(q=normal(ks[0], (B, T, H, K)), k=k, v=normal(ks[2], (B, T, H, V)),
                g=log_gate(ks[3], (B, T, H, K), strength), beta=jax.nn.sigmoid(normal(ks[4], (B, T, H))))
    args = {n: x.astype(dtype) for n, x in args.items()}
    if initial_state:
        args["initial_state"] = 0.5 * normal(ks[5], (B if n_seqs is None else n_seqs, H, K, V))
    return args

"""o, final state and every gradient of chunk_gla from this tree and from another checkout (argv[1]), compiled, on
the same inputs: equal bit for bit? (gk in bf16 at two gate strengths, and g + gk.)"""
import sys
import numpy as np, jax, jax.numpy as jnp
import workbench
from workbench.testing import recurrent_inputs, random_cotangents
from workbench.bench import against
other = sys.modules[against.load(sys.argv[1])]
B, T, H, K, V = 2, 4096, 16, 64, 64
for gates, strength in ((("gk",), 0.1), (("gk",), 5.0), (("g", "gk"), 1.0)):
    inputs = recurrent_inputs(5, B, T, H, K, V, dtype=jnp.bfloat16, gates=gates, strength=strength, initial_state=False)
    names = [n for n in ("q", "k", "v", "g", "gk") if n in inputs]
    cts = random_cotangents(6, (jax.ShapeDtypeStruct((B, T, H, V), jnp.bfloat16), jax.ShapeDtypeStruct((B, H, K, V), jnp.float32)))
    res = []
    for lib in (workbench, other):
        f = jax.jit(lambda xs, c, lib=lib: (lambda o, pb: (o, pb(c)))(*jax.vjp(lambda *ys: lib.chunk_gla(**dict(zip(names, ys))), *xs)))
        res.append(jax.tree.map(np.asarray, f([inputs[n] for n in names], cts)))
    same = [bool(np.array_equal(a.view(np.uint8), b.view(np.uint8))) for a, b in zip(jax.tree.leaves(res[0]), jax.tree.leaves(res[1]))]
    dt = [str(x.dtype) for x in jax.tree.leaves(res[0])]
    print(gates, strength, "bitwise equal per output (o, ht, grads):", same, dt, flush=True)

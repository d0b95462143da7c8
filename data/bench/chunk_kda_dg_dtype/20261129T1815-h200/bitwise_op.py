"""An op's outputs and gradients (inputs and cotangents as `workbench bench` makes them) from this tree and from
another checkout (argv[1]), compiled, on the same inputs: equal bit for bit? argv[2]: op, argv[3]: B,T,H,K,V."""
import sys
import numpy as np, jax, jax.numpy as jnp
import workbench
from workbench import bench
from workbench.bench import against
from workbench.testing import random_cotangents
other_name = against.load(sys.argv[1])
op = bench.OPS[sys.argv[2]]
B, T, H, K, V = (int(x) for x in sys.argv[3].split(","))
shape = dict(B=B, T=T, H=H, K=K, V=V)
inputs = op.inputs(shape, jnp.bfloat16, 0)
arrays = {n: x for n, x in inputs.items() if hasattr(x, "dtype")}
fixed = {n: x for n, x in inputs.items() if not hasattr(x, "dtype")}
wrt = [n for n in op.differentiable if n in arrays]
rest = {n: x for n, x in arrays.items() if n not in wrt}
res = []
for lib in (None, other_name):
    opts = {} if lib is None else {"library": sys.modules[lib]}
    def f(xs, opts=opts):
        out, pb = jax.vjp(lambda *ys: op.call("triton", **rest, **fixed, **dict(zip(wrt, ys)), **opts), *xs)
        return out, pb(random_cotangents(1, jax.tree.map(lambda o: jax.ShapeDtypeStruct(o.shape, o.dtype), out)))
    res.append(jax.tree.map(np.asarray, jax.jit(f)([arrays[n] for n in wrt])))
leaves = list(zip(jax.tree.leaves(res[0]), jax.tree.leaves(res[1])))
print(sys.argv[2], shape, "bitwise equal (outputs, then grads of", wrt, "):",
      [bool(a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))) for a, b in leaves],
      [str(a.dtype) + "/" + str(b.dtype) for a, b in leaves], flush=True)

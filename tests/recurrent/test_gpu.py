"""The compiled kernels on a CUDA GPU, at sizes the interpreter cannot reach (skipped on CPU)."""

import jax
import jax.numpy as jnp
import pytest

import workbench
from workbench.testing import assert_within_budget, compare, random_cotangents, recurrent_inputs, to_float64

pytestmark = pytest.mark.gpu

GRAD_NAMES = ("q", "k", "v", "g", "gk", "gv", "initial_state")


def _run(inputs, impl, cotangents, reverse=False, cu_seqlens=None):
    names = [n for n in GRAD_NAMES if n in inputs]
    fixed = {n: x for n, x in inputs.items() if n not in names}

    def f(*xs):
        return workbench.recurrent(**dict(zip(names, xs)), **fixed, reverse=reverse, cu_seqlens=cu_seqlens,
                                   implementation=impl)

    out, pullback = jax.vjp(f, *[inputs[n] for n in names])
    return out, dict(zip(names, pullback(cotangents)))


def _three_way(inputs, cts, **kw):
    with jax.default_matmul_precision("highest"):
        out_k, grads_k = _run(inputs, "triton", cts, **kw)
        out_r, grads_r = _run(inputs, "reference", cts, **kw)
        out_o, grads_o = _run(to_float64(inputs), "reference", to_float64(cts), **kw)
    rows = [compare("o", out_k[0], out_r[0], out_o[0]), compare("final_state", out_k[1], out_r[1], out_o[1])]
    rows += [compare("d" + n, grads_k[n], grads_r[n], grads_o[n]) for n in grads_k]
    print("\n".join(map(str, rows)))
    assert_within_budget(rows)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("gates,strength,reverse", [
    (("gk",), 1.0, False), (("g", "g_gamma", "gk", "gv"), 5.0, True), ((), 0.0, False)],
    ids=["gk", "all-gates-strong-reverse", "no-gate"])
def test_compiled_kernel_within_budget(dtype, gates, strength, reverse):
    B, T, H, K, V = 2, 1000, 3, 64, 100
    inputs = recurrent_inputs(1, B, T, H, K, V, dtype=dtype, gates=gates, strength=strength)
    cts = random_cotangents(2, (jax.ShapeDtypeStruct((B, T, H, V), dtype),
                                jax.ShapeDtypeStruct((B, H, K, V), jnp.float32)))
    _three_way(inputs, cts, reverse=reverse)


def test_compiled_varlen_within_budget():
    cu = jnp.array([0, 0, 1, 300, 777, 1024], jnp.int32)
    inputs = recurrent_inputs(3, 1, 1024, 4, 64, 64, gates=("gk", "gv"), strength=1.0, n_seqs=5)
    cts = random_cotangents(4, (jax.ShapeDtypeStruct((1, 1024, 4, 64), jnp.float32),
                                jax.ShapeDtypeStruct((5, 4, 64, 64), jnp.float32)))
    _three_way(inputs, cts, cu_seqlens=cu)


def test_compiled_target_shape_bf16_runs_finite():
    inputs = recurrent_inputs(5, 8, 4096, 16, 64, 64, dtype=jnp.bfloat16, gates=("gk",), initial_state=False)
    o, ht = jax.jit(lambda a: workbench.recurrent(**a))(inputs)
    assert bool(jnp.all(jnp.isfinite(o.astype(jnp.float32)))) and bool(jnp.all(jnp.isfinite(ht)))

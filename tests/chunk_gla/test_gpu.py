"""The compiled kernels on a CUDA GPU, at sizes the interpreter cannot reach (skipped on CPU)."""

import workbench  # noqa: F401  (first: decides compiled vs interpreted Triton)

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from workbench.testing import assert_within_budget, compare, random_cotangents, recurrent_inputs, to_float64

pytestmark = pytest.mark.gpu

GRAD_NAMES = ("q", "k", "v", "g", "gk", "initial_state")


def _run(inputs, impl, cotangents, **options):
    names = [n for n in GRAD_NAMES if n in inputs]
    fixed = {n: x for n, x in inputs.items() if n not in names}

    @jax.jit
    def f(primals, cotangents):
        out, pullback = jax.vjp(lambda *xs: workbench.chunk_gla(**dict(zip(names, xs)), **fixed, **options,
                                                                implementation=impl), *primals)
        return out, pullback(cotangents)

    out, grads = f([inputs[n] for n in names], cotangents)
    return out, dict(zip(names, grads))


def _three_way(inputs, cts, reference_on_host=False, **options):
    """The kernel against the reference in its dtype and the float64 oracle. `reference_on_host`: the reference
    runs on the host CPU (its inputs moved there), where XLA compiles it in seconds."""
    with jax.default_matmul_precision("highest"):
        out_k, grads_k = _run(inputs, "triton", cts, **options)
        if reference_on_host:
            host = jax.devices("cpu")[0]
            with jax.default_device(host):
                out_r, grads_r = _run(jax.device_put(inputs, host), "reference", jax.device_put(cts, host), **options)
        else:
            out_r, grads_r = _run(inputs, "reference", cts, **options)
        out_o, grads_o = _run(to_float64(inputs), "reference", to_float64(cts), **options)
    rows = [compare("o", out_k[0], out_r[0], out_o[0]), compare("final_state", out_k[1], out_r[1], out_o[1])]
    rows += [compare("d" + n, grads_k[n], grads_r[n], grads_o[n]) for n in grads_k]
    print("\n".join(map(str, rows)))
    assert_within_budget(rows)


def _cotangents(seed, B, T, H, K, V, N, dtype):
    return random_cotangents(seed, (jax.ShapeDtypeStruct((B, T, H, V), dtype),
                                    jax.ShapeDtypeStruct((N, H, K, V), jnp.float32)))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("gates,strength,chunk_size", [
    (("gk",), 1.0, 64), (("g", "gk"), 5.0, 32), (("g",), 0.1, 16), ((), 0.0, 64)],
    ids=["gk-chunk64", "g+gk-strong-chunk32", "g-chunk16", "no-gate"])
def test_compiled_kernel_within_budget(dtype, gates, strength, chunk_size):
    B, T, H, K, V = 2, 1000, 3, 64, 100
    inputs = recurrent_inputs(1, B, T, H, K, V, dtype=dtype, gates=gates, strength=strength)
    _three_way(inputs, _cotangents(2, B, T, H, K, V, B, dtype), chunk_size=chunk_size)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_compiled_varlen_within_budget(dtype):
    cu = jnp.array([0, 0, 1, 300, 777, 1024], jnp.int32)
    inputs = recurrent_inputs(3, 1, 1024, 4, 64, 64, dtype=dtype, gates=("g", "gk"), strength=1.0, n_seqs=5)
    _three_way(inputs, _cotangents(4, 1, 1024, 4, 64, 64, 5, dtype), cu_seqlens=cu)


def test_compiled_head_dims_128_within_budget():
    inputs = recurrent_inputs(5, 1, 512, 2, 128, 128, dtype=jnp.bfloat16, gates=("gk",), strength=1.0)
    _three_way(inputs, _cotangents(6, 1, 512, 2, 128, 128, 1, jnp.bfloat16))


def test_compiled_target_rows_bf16_within_budget():
    """The speed target's rows (T=4096, H=16, K=V=64, gk, bfloat16, gate strength as benchmarked) at B=2:
    the float64 oracle's autodiff holds [chunks, 64, 64, H, K] ratio tensors, ~4 GB each at B=2.

    The bfloat16 reference runs on the host: on an H200 (JAX 0.11.2) XLA's GPU compile of its forward and
    backward had not finished after 50 s (nor, in earlier calls, after 6 minutes), where the float64 oracle's
    compiled in 2 s and the reference compiles for a CPU in 2 s
    (data/bench/chunk_gla_split_flags/20261129T1750-h200/diag.txt)."""
    B, T, H, K, V = 2, 4096, 16, 64, 64
    inputs = recurrent_inputs(7, B, T, H, K, V, dtype=jnp.bfloat16, gates=("gk",), strength=0.1,
                              initial_state=False)
    _three_way(inputs, _cotangents(8, B, T, H, K, V, B, jnp.bfloat16), reference_on_host=True)


def test_compiled_tuning_table_configs_within_budget(tuning_table_configs):
    """The tuning table's configs, which a call gets by default, against the float64 oracle at a shape of the
    bench's sweep (B1 T4096 H16 K = V = 64 bf16, the bench's per-key gate; entries of its own in the H200 table).
    The other tests run each kernel's first config."""
    B, T, H, K, V = 1, 4096, 16, 64, 64
    inputs = recurrent_inputs(15, B, T, H, K, V, dtype=jnp.bfloat16, gates=("gk",), strength=1.0)
    _three_way(inputs, _cotangents(16, B, T, H, K, V, B, jnp.bfloat16))
    sources = tuning_table_configs()
    print(sources)
    assert {"chunk_o_kernel", "chunk_dqkg_kernel"} <= set(sources), sources


def test_compiled_target_shape_bf16_is_finite_and_matches_recurrent():
    """B=8, T=4096, H=16, K=V=64 with gk: outputs and gradients finite, and close to the recurrent kernel."""
    B, T, H, K, V = 8, 4096, 16, 64, 64
    inputs = recurrent_inputs(9, B, T, H, K, V, dtype=jnp.bfloat16, gates=("gk",), strength=0.1,
                              initial_state=False)
    cts = _cotangents(10, B, T, H, K, V, B, jnp.bfloat16)
    chunked = jax.jit(lambda a, c: jax.vjp(lambda a: workbench.chunk_gla(**a), a)[1](c))(inputs, cts)
    recurrent = jax.jit(lambda a, c: jax.vjp(lambda a: workbench.recurrent(**a), a)[1](c))(inputs, cts)
    for name in chunked[0]:
        x, y = chunked[0][name].astype(jnp.float32), recurrent[0][name].astype(jnp.float32)
        assert bool(jnp.all(jnp.isfinite(x))), name
        gap = float(jnp.linalg.norm(x - y) / jnp.linalg.norm(y))
        assert gap < 2e-2, f"d{name}: chunk_gla vs recurrent RMS-relative gap {gap:.2e}"


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_compiled_two_level_state_pass_within_budget(dtype):
    """(gla.13) compiled: one long sequence beside short and empty ones, 8 segments, initial and final
    states and every gradient against the float64 oracle."""
    from workbench.chunk_gla import Tuning

    cu = jnp.array([0, 5, 5, 3000, 3100, 4096], jnp.int32)
    inputs = recurrent_inputs(11, 1, 4096, 2, 64, 64, dtype=dtype, gates=("g", "gk"), strength=1.0, n_seqs=5)
    _three_way(inputs, _cotangents(12, 1, 4096, 2, 64, 64, 5, dtype), cu_seqlens=cu, tuning=Tuning(segments=8))


@pytest.mark.parametrize("segments", [1, 8], ids=["one-sweep", "two-level"])
def test_compiled_recomputed_residuals_within_budget(segments):
    """`Tuning(residuals="recompute")` compiled (bf16, packed sequences with an empty one, a scalar and a per-key
    gate): the backward's states and A formed again, every gradient against the float64 oracle within budget."""
    from workbench.chunk_gla import Tuning

    cu = jnp.array([0, 5, 5, 3000, 3100, 4096], jnp.int32)
    inputs = recurrent_inputs(13, 1, 4096, 2, 64, 64, dtype=jnp.bfloat16, gates=("g", "gk"), strength=1.0, n_seqs=5)
    _three_way(inputs, _cotangents(14, 1, 4096, 2, 64, 64, 5, jnp.bfloat16), cu_seqlens=cu,
               tuning=Tuning(segments=segments, residuals="recompute"))


def test_compiled_chunks_at_the_direct_boundary_within_budget():
    """(gla.12, NOTES.md "Where b is formed") Chunks whose log-decays span DIRECT_RANGE ± 10⁻⁴ behind a first
    gate of −500 (|b| ≈ 520, where float32 sums in two orders differ by ~10⁻⁴): the forward's and the backward's
    sweeps form b each in its own order, so such a chunk can be direct for the one and not for the other, and
    the backward then reads the rows of A the forward formed by its margin. float32, every output and gradient
    against the float64 oracle."""
    from workbench.chunk_gla.kernels import DIRECT_RANGE

    B, T, H, K, V = 1, 4096, 2, 64, 64
    inputs = recurrent_inputs(15, B, T, H, K, V, dtype=jnp.float32, gates=("gk",), strength=1.0,
                              initial_state=False)
    chunks = T // 64
    span = DIRECT_RANGE + np.random.default_rng(16).uniform(-1e-4, 1e-4, (chunks, 1, H, 1))
    gk = np.broadcast_to(-span / 63, (chunks, 64, H, K)).copy()
    gk[:, 0] = -500.0
    inputs["gk"] = jnp.asarray(gk.reshape(B, T, H, K), jnp.float32)
    _three_way(inputs, _cotangents(16, B, T, H, K, V, B, jnp.float32))

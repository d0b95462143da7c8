"""The compiled flash-attention kernels on a CUDA GPU, at sizes the interpreter cannot reach (skipped
on CPU): kernel vs reference in the same dtype vs float64 oracle, with the 1.5× budget
(`workbench.testing`), for o, lse and the gradients of q, k, v, sinks and bias under random
cotangents for o and lse.

On a GPU, XLA computes float32 matmuls in TF32 by default, which makes the float32 reference about
1000× worse than float32 arithmetic and the budget meaningless; the reference and the oracle run
under `jax.default_matmul_precision("highest")`. The kernel runs as a user calls it (default
precision): its float32 path asks Triton for IEEE products itself.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import workbench
from workbench import launch, signature, testing
from workbench.flash_attention import Tuning

pytestmark = pytest.mark.gpu

DIFFERENTIABLE = ("q", "k", "v", "sinks", "bias")


def _run(inputs, cts, implementation, **options):
    """{"o", "lse", "dq", …}: outputs and the VJP of every differentiable input."""
    diff = {n: x for n, x in inputs.items() if n in DIFFERENTIABLE}
    rest = {n: x for n, x in inputs.items() if n not in DIFFERENTIABLE}

    def f(d):
        return workbench.flash_attention(**d, **rest, **options, return_lse=True, implementation=implementation)

    (o, lse), pullback = jax.vjp(f, diff)
    (grads,) = pullback(cts)
    return {"o": o, "lse": lse, **{"d" + n: g for n, g in grads.items()}}


def _three_way(inputs, seed, **options):
    q = inputs["q"]
    B, Tq, H, _ = q.shape
    cts = testing.random_cotangents(seed, (jax.ShapeDtypeStruct(q.shape, q.dtype),
                                           jax.ShapeDtypeStruct((B, H, Tq), jnp.float32)))
    kernel = jax.jit(lambda a, c: _run(a, c, "triton", **options))(inputs, cts)
    with jax.default_matmul_precision("highest"):  # no TF32 in the yardsticks (module docstring)
        reference = jax.jit(lambda a, c: _run(a, c, "reference", **options))(inputs, cts)
        run64 = jax.jit(lambda a, c: _run(a, c, "reference", **options))
        inputs64, (do64, dlse64) = testing.to_float64(inputs), testing.to_float64(cts)
        oracle = run64(inputs64, (do64, dlse64))
        # the exact gradients given the kernel's o and lse, which its backward works from
        shifted = testing.attention_backward_cotangents(do64, dlse64, kernel["o"], kernel["lse"], oracle["o"],
                                                         oracle["lse"])
        bound = run64(inputs64, shifted)
        atols = {}
        if "sinks" in inputs:
            atols["dsinks"] = float(testing.attention_dsinks_atol(q.dtype, inputs["sinks"], do64, dlse64,
                                                                  oracle["o"], oracle["lse"]))

    seen = np.isfinite(np.asarray(oracle["lse"]))
    k_lse = np.asarray(kernel["lse"])
    np.testing.assert_array_equal(np.isneginf(k_lse), ~seen, err_msg="lse: −inf rows differ from the oracle's")
    rows = [testing.compare("o", kernel["o"], reference["o"], oracle["o"]),
            testing.compare("lse", k_lse[seen], np.asarray(reference["lse"])[seen], np.asarray(oracle["lse"])[seen])]
    rows += [testing.compare_with_floor(n, kernel[n], reference[n], bound[n], oracle[n], atol=atols.get(n))
             for n in kernel if n not in ("o", "lse")]
    print(f"\n{jnp.dtype(q.dtype).name} {dict((n, tuple(x.shape)) for n, x in inputs.items() if hasattr(x, 'shape'))} "
          f"{options}")
    print("\n".join(map(str, rows)))
    testing.assert_within_budget(rows)


# (B, Tq, Tk, H, Hkv, D), attention_inputs options, op options
CASES = {
    "causal-D128": ((2, 1024, 1024, 4, 4, 128), {}, dict(causal=True)),
    "non-causal-D80-GQA-Tq<Tk": ((1, 1000, 1536, 4, 2, 80), {}, {}),
    "causal-GQA-T2048": ((1, 2048, 2048, 8, 2, 128), {}, dict(causal=True)),
    "window+softcap+sinks+bias-D80": ((1, 1024, 1024, 4, 1, 80), dict(sinks=True, bias="1H"),
                                      dict(causal=True, sliding_window=256, softcap=30.0)),
    "segments-Tq>Tk-causal": ((2, 1200, 1000, 4, 2, 128), dict(segments=3), dict(causal=True)),
}


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_compiled_kernel_within_budget(case, dtype):
    (B, Tq, Tk, H, Hkv, D), made, options = case
    inputs = testing.attention_inputs(1, B, Tq, Tk, H, Hkv, D, dtype=dtype, **made)
    _three_way(inputs, 2, **options)


@pytest.mark.parametrize("case", ["causal-GQA-T2048", "window+softcap+sinks+bias-D80"])
def test_compiled_dq_pass_within_budget(case):
    """`Tuning(dq="pass")`, the reproducible two-pass backward (the default adds dQ with atomics)."""
    (B, Tq, Tk, H, Hkv, D), made, options = CASES[case]
    inputs = testing.attention_inputs(1, B, Tq, Tk, H, Hkv, D, dtype=jnp.bfloat16, **made)
    _three_way(inputs, 2, tuning=Tuning(dq="pass"), **options)


FORWARDS = {"triton": Tuning(forward="triton"), "pointer loads": Tuning(forward_loads="pointers"),
            "halves, pointer loads": Tuning(split_rows=True, forward_loads="pointers"),
            "halves, descriptors": Tuning(split_rows=True, forward_loads="tma")}


@pytest.mark.parametrize("tuning", FORWARDS.values(), ids=FORWARDS.keys())
@pytest.mark.parametrize("case", ["causal-D128", "non-causal-D80-GQA-Tq<Tk", "window+softcap+sinks+bias-D80"])
def test_compiled_other_forwards_within_budget(case, tuning):
    """The forwards a `Tuning` selects besides the default (on Hopper with Triton 3.9 the Gluon kernel where it
    applies, else whole row blocks with K and V through descriptors made on the device, in the launcher's global
    scratch): the Triton forward itself, masked pointer loads, and rows in two halves either way."""
    (B, Tq, Tk, H, Hkv, D), made, options = CASES[case]
    inputs = testing.attention_inputs(1, B, Tq, Tk, H, Hkv, D, dtype=jnp.bfloat16, **made)
    _three_way(inputs, 2, tuning=tuning, **options)


# (B, Tq, Tk, H, Hkv, D), dtype, causal: what the Gluon forward computes (no mask but causal's)
GLUON_CASES = {
    "causal-D128-GQA-T1000": ((2, 1000, 1000, 8, 2, 128), jnp.bfloat16, True),
    "non-causal-D128-T4096": ((1, 4096, 4096, 4, 4, 128), jnp.bfloat16, False),
    "causal-D64-MQA-T2048-f16": ((1, 2048, 2048, 4, 1, 64), jnp.float16, True),
    "non-causal-D64-T777-f16": ((1, 777, 777, 4, 4, 64), jnp.float16, False),
    "causal-D128-T5": ((3, 5, 5, 2, 2, 128), jnp.bfloat16, True),
    "causal-Tq<Tk": ((2, 700, 1000, 4, 2, 128), jnp.bfloat16, True),
    "causal-Tq>Tk-rows-see-nothing": ((2, 1000, 600, 4, 2, 128), jnp.bfloat16, True),
    "non-causal-Tq<Tk-D64": ((1, 300, 1300, 4, 4, 64), jnp.bfloat16, False),
}


# what the Gluon backward computes: Tq = Tk (GLUON_CASES' names)
GLUON_BACKWARD_CASES = ["causal-D128-GQA-T1000", "non-causal-D128-T4096", "causal-D64-MQA-T2048-f16",
                        "non-causal-D64-T777-f16", "causal-D128-T5"]


@pytest.mark.parametrize("case", GLUON_BACKWARD_CASES)
def test_compiled_gluon_backward_within_budget(case):
    """`Tuning(backward="gluon")` (gluon_backward.py, after the Gluon forward): dq, dk, dv against the reference
    and the float64 oracle, under random cotangents for o and lse; grouped heads, T not a multiple of the tiles,
    a T shorter than one tile, both dtypes and both D."""
    (B, Tq, Tk, H, Hkv, D), dtype, causal = GLUON_CASES[case]
    inputs = testing.attention_inputs(14, B, Tq, Tk, H, Hkv, D, dtype=dtype)
    _three_way(inputs, 15, causal=causal, tuning=Tuning(forward="gluon", backward="gluon"))


@pytest.mark.parametrize("case", GLUON_CASES.values(), ids=GLUON_CASES.keys())
def test_compiled_gluon_forward_within_budget(case):
    """`Tuning(forward="gluon")`: the Hopper forward (gluon_kernels.py), its o, lse and the gradients the Triton
    backward forms from its float32 o, against the reference and the float64 oracle (with Tq > Tk under a causal
    mask the first Tq − Tk rows see no key: o = 0, lse = −∞)."""
    (B, Tq, Tk, H, Hkv, D), dtype, causal = case
    inputs = testing.attention_inputs(12, B, Tq, Tk, H, Hkv, D, dtype=dtype)
    _three_way(inputs, 13, causal=causal, tuning=Tuning(forward="gluon"))


def _kernels_traced(fn, *args):
    """The names of the kernels `fn(*args)` launches, in trace order (`launch.observing`, at trace time)."""
    names = []
    with launch.observing(lambda seen: names.append(signature.unwrap(seen.kernel)[2].__name__)):
        jax.jit(fn).lower(*args)
    return names


def test_compiled_default_forward_is_the_gluon_kernel_on_hopper():
    """The default forward launches the Gluon kernel exactly where it applies (Hopper, Triton 3.9 or later), else
    the Triton forward, causal and not; its output is bit for bit that kernel's. (The two kernels scale the scores
    the same way and can agree bit for bit, so the kernel is told by its name.)"""
    from workbench.compiler import compiles_gluon
    from workbench.gpu_call import capability

    x = testing.attention_inputs(14, 2, 1000, 1000, 8, 2, 128, dtype=jnp.bfloat16)
    hopper = capability() == 90 and compiles_gluon()
    for causal in (True, False):
        def forward(q, k, v, tuning=None):
            return workbench.flash_attention(q, k, v, causal=causal, tuning=tuning)

        names = _kernels_traced(forward, x["q"], x["k"], x["v"])
        expected = "flash_fwd_pingpong_kernel" if hopper else "flash_fwd_kernel"
        assert expected in names and len(names) == 1, f"causal={causal}: launches {names}"
        default = np.asarray(jax.jit(forward)(x["q"], x["k"], x["v"]), np.float32)
        chosen = np.asarray(jax.jit(lambda q, k, v: forward(q, k, v, Tuning(forward="gluon" if hopper else "triton")))(
            x["q"], x["k"], x["v"]), np.float32)
        np.testing.assert_array_equal(default, chosen, err_msg=f"causal={causal}")


def test_compiled_default_backward_is_the_gluon_kernel_on_hopper():
    """The default backward is the Gluon kernel exactly where it applies (Hopper, Triton 3.9 or later, Tq = Tk),
    else the Triton backward: dk and dv bit for bit one of the two, which differ (dq is added by reductions in a
    run-dependent order in both), and the default's dq within float32 rounding of that kernel's."""
    from workbench.compiler import compiles_gluon
    from workbench.gpu_call import capability

    x = testing.attention_inputs(16, 2, 1000, 1000, 8, 2, 128, dtype=jnp.bfloat16)
    do = jax.random.normal(jax.random.key(17), x["q"].shape, jnp.bfloat16)

    def run(tuning):
        pull = jax.jit(lambda q, k, v: jax.vjp(lambda q, k, v: workbench.flash_attention(
            q, k, v, causal=True, tuning=tuning), q, k, v)[1](do))
        return [np.asarray(g, np.float64) for g in pull(x["q"], x["k"], x["v"])]

    hopper = capability() == 90 and compiles_gluon()
    default, triton_bwd = run(None), run(Tuning(backward="triton"))
    chosen = run(Tuning(backward="gluon")) if hopper else triton_bwd
    if hopper:
        assert not np.array_equal(chosen[1], triton_bwd[1])
    for name, mine, theirs in zip(("dk", "dv"), default[1:], chosen[1:]):
        np.testing.assert_array_equal(mine, theirs, err_msg=name)
    assert testing.rms_rel(default[0], chosen[0]) <= 4e-3  # dq: bf16 roundings of float32 sums at most


def test_compiled_tma_forward_matches_pointer_loads_on_varlen():
    """Rows past each packed sequence read as 0 through the descriptors, as the masked loads read them."""
    cu_q = jnp.asarray([0, 0, 1, 300, 777, 900, 1024], jnp.int32)
    cu_k = jnp.asarray([0, 5, 6, 406, 900, 900, 1100], jnp.int32)
    x = testing.attention_inputs(3, 1, 1024, 1100, 4, 2, 128, dtype=jnp.bfloat16, sinks=True)

    def run(loads):
        return jax.jit(lambda q, k, v, s: workbench.flash_attention(
            q, k, v, sinks=s, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, return_lse=True,
            tuning=Tuning(forward_loads=loads)))(x["q"], x["k"], x["v"], x["sinks"])

    (o_t, lse_t), (o_p, lse_p) = run("tma"), run("pointers")
    assert testing.rms_rel(np.asarray(o_t, np.float64), np.asarray(o_p, np.float64)) <= 4e-3  # bf16 roundings at most
    finite = np.isfinite(np.asarray(lse_p))
    np.testing.assert_array_equal(np.isfinite(np.asarray(lse_t)), finite)
    assert testing.rms_rel(np.asarray(lse_t)[finite], np.asarray(lse_p)[finite]) <= 1e-6


def test_compiled_atomic_dq_is_close_run_to_run():
    """Atomic dQ adds in a run-dependent order: two runs differ at most by float32 rounding of the sums."""
    inputs = testing.attention_inputs(10, 2, 2048, 2048, 8, 2, 128, dtype=jnp.float32)
    do = jax.random.normal(jax.random.key(11), inputs["q"].shape, jnp.float32)
    grad_q = jax.jit(lambda q, k, v: jax.vjp(lambda q: workbench.flash_attention(q, k, v), q)[1](do)[0])
    first, second = (np.asarray(grad_q(inputs["q"], inputs["k"], inputs["v"]), np.float64) for _ in range(2))
    assert testing.rms_rel(second, first) <= 1e-6


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_compiled_varlen_within_budget(dtype):
    """Packed sequences with Lq ≠ Lk, an empty and a length-1 sequence, a key-less one, sinks."""
    cu_q = jnp.asarray([0, 0, 1, 300, 777, 900, 1024], jnp.int32)
    cu_k = jnp.asarray([0, 5, 6, 406, 900, 900, 1100], jnp.int32)
    inputs = testing.attention_inputs(3, 1, 1024, 1100, 4, 2, 128, dtype=dtype, sinks=True)
    _three_way({**inputs, "cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k}, 4, causal=True)


def test_compiled_dropout_within_budget():
    """The compiled hash drops what `dropout_keep_mask` drops (the reference is given that mask)."""
    inputs = testing.attention_inputs(5, 1, 1024, 1024, 4, 2, 128, dtype=jnp.bfloat16)
    _three_way({**inputs, "dropout_key": jax.random.key(6)}, 7, causal=True, dropout_rate=0.2)


def test_compiled_target_shape_bf16_runs_finite():
    B, T, H, D = 4, 4096, 16, 128
    inputs = testing.attention_inputs(8, B, T, T, H, H, D, dtype=jnp.bfloat16)
    do = jax.random.normal(jax.random.key(9), (B, T, H, D), jnp.bfloat16)

    def fwd_bwd(q, k, v):
        o, pullback = jax.vjp(lambda q, k, v: workbench.flash_attention(q, k, v, causal=True), q, k, v)
        return o, pullback(do)

    o, grads = jax.jit(fwd_bwd)(inputs["q"], inputs["k"], inputs["v"])
    for x in (o, *grads):
        assert bool(jnp.all(jnp.isfinite(x.astype(jnp.float32))))

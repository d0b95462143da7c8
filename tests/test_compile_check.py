"""Every kernel launch of every op, as `workbench verify`'s cases make them (both dtypes, forward and
backward, every config the GPU autotuner could pick) plus the static choices of `Tuning`, compiled by
Triton for a Hopper GPU on this CPU (`workbench.compile_check`). The interpreter runs kernels the
compiler rejects; this is where such a kernel fails without a GPU."""

import workbench  # noqa: F401  (first: decides compiled vs interpreted Triton)

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl

from workbench import compile_check, launch, testing, verify
from workbench.flash_attention import kernels
from workbench.chunk_gla import Tuning as GlaTuning
from workbench.flash_attention import Tuning as FlashTuning
from workbench.kda import Tuning as KdaTuning

pytestmark = pytest.mark.skipif(not launch.INTERPRET, reason="on a GPU the kernels compile as they run")

DTYPES = (jnp.float32, jnp.bfloat16)
STAGE = os.environ.get("WORKBENCH_COMPILE_STAGE", "ttir")  # the front end: where the interpreter and compiler part


def _trace(op, inputs, wrt, **static):
    """Trace forward and backward (abstractly: no kernel runs) with the launches recorded."""
    wrt = [n for n in wrt if inputs.get(n) is not None]
    fixed = {n: x for n, x in inputs.items() if n not in wrt}

    def f(primals):
        out, pullback = jax.vjp(lambda *xs: op(**fixed, **dict(zip(wrt, xs)), **static), *primals)
        return pullback(jax.tree.map(jnp.ones_like, out))

    jax.eval_shape(f, [inputs[n] for n in wrt])


GLA_WRT = ("q", "k", "v", "g", "gk", "gv", "initial_state")
KDA_WRT = ("q", "k", "v", "g", "beta", "initial_state")


def _recurrent(dtype):
    for case in verify.RECURRENT_CASES:
        _trace(workbench.recurrent, verify.gated_case_inputs(case, dtype), GLA_WRT, reverse=case.params["reverse"])


def _chunk_gla(dtype):
    for case in verify.CHUNK_GLA_CASES:
        for tuning in (GlaTuning(segments=1), GlaTuning(segments=3)):
            _trace(workbench.chunk_gla, verify.gated_case_inputs(case, dtype), GLA_WRT, chunk_size=case.params["chunk_size"],
                   tuning=tuning)


def _kda_ops(dtype):
    for case in verify.KDA_CASES:
        inputs = verify.kda_case_inputs(case, dtype)
        _trace(workbench.recurrent_kda, inputs, KDA_WRT)
        for tuning in (KdaTuning(segments=1), KdaTuning(segments=3), KdaTuning(fused_backward=False),
                       KdaTuning(whole_chunk=False)):
            _trace(workbench.chunk_kda, inputs, KDA_WRT, chunk_size=case.params["chunk_size"], tuning=tuning)


def _attention(dtype):
    for case in verify.FLASH_CASES:
        inputs, options = verify.flash_case_inputs(case, dtype)
        tunings = [FlashTuning(dq="atomic"), FlashTuning(dq="pass")]
        if inputs["q"].shape[-1] * jnp.dtype(dtype).itemsize % 16 == 0:  # what tensor descriptors need
            tunings.append(FlashTuning(forward_loads="tma"))
            if (dtype != jnp.float32 and inputs["q"].shape[-1] <= 128 and inputs.get("bias") is None
                    and inputs.get("segment_ids") is None):
                tunings.append(FlashTuning(forward_schedule="warp_specialized", backward_schedule="warp_specialized"))
        for tuning in tunings:
            _trace(workbench.flash_attention, inputs, ("q", "k", "v", "sinks", "bias"), tuning=tuning, **options)
    # the ring's block kernels (attention_block and its backward), on a mesh of this one device
    mesh = jax.make_mesh((1,), ("sp",))
    qkv = {n: jnp.zeros((1, 32, 4 if n == "q" else 2, 32), dtype) for n in "qkv"}
    for causal, layout in ((True, "zigzag"), (False, "contiguous")):
        _trace(workbench.sharded_ring_attention, qkv, ("q", "k", "v"), mesh=mesh, axis_name="sp", causal=causal,
               layout=layout)


FAMILIES = {"recurrent": _recurrent, "chunk_gla": _chunk_gla, "kda": _kda_ops, "flash_attention": _attention}


@pytest.mark.parametrize("family", FAMILIES)
def test_every_kernel_compiles_for_hopper(family):
    """One kernel family per test (pytest-xdist spreads them over its workers)."""
    with compile_check.record() as specs:
        for dtype in DTYPES:
            FAMILIES[family](dtype)
    kernels = {(s["module"], s["kernel"]) for s in specs}
    # the family's own kernels were seen (a refactor that stops recording would otherwise pass vacuously);
    # kda borrows chunk_gla's cumsum and state pass
    assert any(m == f"workbench.{family}.kernels" for m, _ in kernels), kernels
    result = compile_check.compile_all(specs, last=STAGE, workers=1)
    print(f"{result['compiled']} distinct launches of {len(kernels)} kernels compiled to {STAGE} for sm_90 in "
          f"{result['seconds']} s")
    assert not result["failed"], "\n\n".join(compile_check.describe(f) for f in result["failed"])


# What the warp-specialized schedules take, one case per feature (bf16; float16 once; packed sequences once)
SPECIALIZED_CASES = [
    (dict(B=2, Tq=256, Tk=256, H=4, Hkv=4, D=128), dict(), dict(causal=False)),
    (dict(B=2, Tq=256, Tk=320, H=4, Hkv=2, D=64), dict(sinks=True), dict(causal=True, sliding_window=(40, 3),
                                                                         softcap=20.0)),
    (dict(B=1, Tq=256, Tk=256, H=4, Hkv=1, D=128), dict(), dict(causal=True, dropout_rate=0.1)),
    (dict(B=1, Tq=256, Tk=256, H=4, Hkv=2, D=96, dtype=jnp.float16), dict(), dict(causal=True)),
    (dict(B=1, Tq=300, Tk=400, H=4, Hkv=2, D=128), dict(cu_seqlens=([0, 100, 300], [0, 150, 400])),
     dict(causal=True)),
]


SPECIALIZED_KERNELS = {"flash_fwd_specialized_kernel": 2, "flash_bwd_dkdv_specialized_kernel": 1,
                       "flash_bwd_dq_specialized_kernel": 1}  # launches per case and config (forward: ± float32 o)


def test_the_specialized_kernels_are_warp_specialized_for_hopper():
    """`forward_schedule` / `backward_schedule="warp_specialized"` exist for one thing: Triton 3.6 turning each
    kernel's loop into a TMA producer warp group and two computing ones (TTGIR's `ttg.warp_specialize`; 4 warps
    become 12). A change that breaks the loop's shape (a second loop, a branch between steps, an early return,
    an atomic) either fails in the compiler or, worse, quietly compiles the unspecialized loop: this fails in
    both cases, for every config of the three kernels and every feature they take, the forward with and
    without the float32 copy of o that a backward asks for."""
    tuning = FlashTuning(forward_schedule="warp_specialized", backward_schedule="warp_specialized")
    with compile_check.record(all_configs=True) as specs:
        for index, (shape, made, options) in enumerate(SPECIALIZED_CASES):
            made = dict(made)
            packed = made.pop("cu_seqlens", None)
            inputs = testing.attention_inputs(index, **{"dtype": jnp.bfloat16, **shape}, **made)
            if packed is not None:
                inputs["cu_seqlens_q"], inputs["cu_seqlens_k"] = (jnp.asarray(c, jnp.int32) for c in packed)
            if options.get("dropout_rate"):
                inputs["dropout_key"] = jax.random.key(index)
            jax.eval_shape(lambda x: workbench.flash_attention(**x, **options, tuning=tuning), inputs)
            _trace(workbench.flash_attention, inputs, ("q", "k", "v", "sinks"), tuning=tuning, **options)
    specs = compile_check.distinct([s for s in specs if s["kernel"] in SPECIALIZED_KERNELS])
    for name, per_case in SPECIALIZED_KERNELS.items():
        configs = len(launch.autotune_configs(getattr(kernels, name)))
        found = [s for s in specs if s["kernel"] == name]
        assert len(found) == per_case * len(SPECIALIZED_CASES) * configs, (name, len(found))
        assert {s["constexprs"]["VARLEN"] for s in found} == {False, True}, name
    result = compile_check.compile_all(specs, last="specialization", workers=2)
    assert not result["failed"], "\n\n".join(compile_check.describe(f) for f in result["failed"])
    assert len(result["specialization"]) == len(specs)
    for row in result["specialization"]:
        spec, found = row["spec"], row["specialization"]
        assert found == {"warp_specialized": True, "warps": 12}, (spec["kernel"], spec["constexprs"], found)
    print(f"{len(specs)} launches of the specialized kernels: 12 warps each, in {result['seconds']} s")


@triton.jit
def retyped_in_loop(x, y, N: tl.constexpr):
    """Runs in the interpreter; the compiler rejects `acc` turning from int32 to float32 in the loop."""
    o = tl.arange(0, N)
    acc = tl.zeros([N], tl.int32)
    for i in range(0, 3):
        acc = tl.load(x + o) * 2.0 + i
    tl.store(y + o, acc)


def test_the_check_catches_what_the_interpreter_runs():
    """A kernel the interpreter runs but the compiler rejects — a loop-carried variable whose type changes
    in the loop (the fault chunk_kda's segment sweep reached a GPU with) — fails the check, naming it."""
    x = jnp.arange(16, dtype=jnp.float32)
    # the interpreter runs it ...
    out = launch.triton_call(x, kernel=retyped_in_loop, out_shape=jax.ShapeDtypeStruct((16,), jnp.float32),
                             grid=(1,), N=16)
    np.testing.assert_allclose(np.asarray(out), np.arange(16) * 2.0 + 2)
    # ... the compiler does not
    with compile_check.record() as specs:
        jax.eval_shape(lambda v: launch.triton_call(v, kernel=retyped_in_loop,
                                                    out_shape=jax.ShapeDtypeStruct((16,), jnp.float32),
                                                    grid=(1,), N=16), x)
    assert specs and specs[0]["signature"] == {"x": "*fp32", "y": "*fp32", "N": "constexpr"}
    result = compile_check.compile_all(specs, last="ttir")
    assert len(result["failed"]) == 1
    assert "Loop-carried variable acc" in result["failed"][0]["error"]


@triton.jit
def dot_tile(x, y, out, N: tl.constexpr):
    """One [N, N] bfloat16 product: on sm_90, Triton forms it with warpgroup MMA (HGMMA)."""
    o = tl.arange(0, N)
    p = o[:, None] * N + o[None, :]
    tl.store(out + p, tl.dot(tl.load(x + p), tl.load(y + p)))


def test_resources_read_the_compiled_kernel():
    """`last="resources"` (scripts/kernel_resources.py) reads the cubin: a 64 × 64 bfloat16 product on four
    warps uses HGMMA, fits in registers and spills nothing; the interpreter agrees on the product."""
    x = jnp.asarray(np.random.default_rng(0).standard_normal((64, 64)), jnp.bfloat16)
    out_shape = jax.ShapeDtypeStruct((64, 64), jnp.float32)
    out = launch.triton_call(x, x, kernel=dot_tile, out_shape=out_shape, grid=(1,), N=64)
    np.testing.assert_allclose(np.asarray(out), np.asarray(x, np.float32) @ np.asarray(x, np.float32), rtol=1e-5,
                               atol=1e-4)
    with compile_check.record() as specs:
        jax.eval_shape(lambda v: launch.triton_call(v, v, kernel=dot_tile, out_shape=out_shape, grid=(1,), N=64), x)
    result = compile_check.compile_all(specs, last="resources")
    assert not result["failed"], result["failed"]
    (row,) = result["resources"]
    usage = row["resources"]
    assert usage["HGMMA"] > 0 and usage["HMMA"] == 0, usage
    assert 0 < usage["registers"] <= 255 and usage["stack"] == 0 and usage["STL"] == 0, usage

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

from workbench import compile_check, launch, verify
from workbench.chunk_gla import Tuning as GlaTuning
from workbench.flash_attention import Tuning as FlashTuning
from workbench.kda import Tuning as KdaTuning

pytestmark = pytest.mark.skipif(not launch.INTERPRET, reason="on a GPU the kernels compile as they run")

DTYPES = (jnp.float32, jnp.bfloat16)
STAGE = os.environ.get("WORKBENCH_COMPILE_STAGE", "ttir")  # the front end: where the interpreter and compiler part
TRITON = tuple(int(part) for part in triton.__version__.split(".")[:2])


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
        tunings = [FlashTuning(dq="atomic"), FlashTuning(dq="pass"), FlashTuning(forward_loads="pointers"),
                   FlashTuning(split_rows=True)]
        if inputs["q"].shape[-1] * jnp.dtype(dtype).itemsize % 16 == 0:  # what tensor descriptors need
            tunings.append(FlashTuning(forward_loads="tma"))
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
    # kda also launches the chunked families' shared cumsum and state pass (workbench.tl_chunked)
    assert any(m.startswith(f"workbench.{family}.") for m, _ in kernels), kernels
    result = compile_check.compile_all(specs, last=STAGE, workers=1)
    print(f"{result['compiled']} distinct launches of {len(kernels)} kernels compiled to {STAGE} for sm_90 in "
          f"{result['seconds']} s")
    assert not result["failed"], "\n\n".join(compile_check.describe(f) for f in result["failed"])


def _kda_sweeps(K, segments=None, dtype=jnp.bfloat16, T=256):
    """The candidate specs of chunk_kda's backward state sweeps and state pass (forward and backward traced
    at K = V, T tokens in one sequence)."""
    from workbench.kda.inputs import kda_inputs

    inputs = kda_inputs(0, 1, T, 2, K, K, dtype=dtype)
    with compile_check.record() as specs:
        _trace(workbench.chunk_kda, inputs, KDA_WRT, tuning=KdaTuning(segments=segments))
    sweeps = {"chunk_kda_dh_kernel", "chunk_kda_segment_kernel", "chunk_kda_resweep_kernel", "chunk_state_pass_kernel"}
    return [s for s in specs if s["kernel"] in sweeps]


def test_backward_sweeps_at_256_keys_fit_hopper_shared_memory():
    """kda/NOTES.md, "Shared memory at K = 256": the backward state sweep holds all K rows of the state;
    pipelined in 2 stages at K = 256 it asks more shared memory than an H100 has, in 1 stage it fits. So
    keys wider than 128 are offered only 1-stage configs (`tl_chunked.sweep_stages`), narrower ones only
    the 2-stage configs they were tuned with; and wide keys take one sweep per sequence (the two-level
    pass's [K, K] transfer matrices do not fit)."""
    for K, stages in ((128, {2}), (256, {1}), (200, {1})):
        specs = _kda_sweeps(K, segments=1)
        assert {s["kernel"] for s in specs} == {"chunk_kda_dh_kernel"}
        assert {s["num_stages"] for s in specs} == stages, K
    assert {s["kernel"] for s in _kda_sweeps(128, segments=2)} == {
        "chunk_kda_segment_kernel", "chunk_kda_resweep_kernel", "chunk_state_pass_kernel"}
    # the default at 16k tokens in one sequence of 2 heads: segments at K = 128, one sweep at K = 256
    assert "chunk_state_pass_kernel" in {s["kernel"] for s in _kda_sweeps(128, T=16384)}
    assert {s["kernel"] for s in _kda_sweeps(256, T=16384)} == {"chunk_kda_dh_kernel"}
    first = _kda_sweeps(256, segments=1)[0]
    result = compile_check.compile_all([first, {**first, "num_stages": 2}], last="resources", workers=2)
    assert not result["failed"], result["failed"]
    shared = {row["spec"]["num_stages"]: row["resources"]["shared"] for row in result["resources"]}
    print(f"chunk_kda_dh_kernel at K = V = 256, bf16, BV = {first['constexprs']['BV']}: shared memory {shared}")
    assert shared[1] <= compile_check.SHARED_LIMIT < shared[2], shared


def test_the_kda_state_pass_holds_its_transfer_matrices_without_spilling():
    """kda/NOTES.md, "The two-level pass": the state pass carries a [K, K] transfer matrix through its serial loop
    over segments and must hold it in registers: at K = 128 launched with 4 warps it spilled 592-704 bytes per
    thread inside that loop on Triton 3.9 (8 warps: none) and 688 on 3.7.1 (8 warps: 80, less than the 256 bytes
    of the matrix a thread holds); at K = 64, 4 warps hold it."""
    specs = [s for K in (64, 128) for s in _kda_sweeps(K, T=16384) if s["kernel"] == "chunk_state_pass_kernel"]
    assert {s["constexprs"]["K"] for s in specs} == {64, 128}, specs
    result = compile_check.compile_all(specs, last="resources", workers=2)
    assert not result["failed"], result["failed"]
    for row in result["resources"]:
        print(f"chunk_state_pass_kernel, K = {row['spec']['constexprs']['K']}, {row['spec']['num_warps']} warps: "
              f"{row['resources']}")
        assert row["resources"]["stack"] <= (0 if TRITON >= (3, 9) else 80), row["resources"]


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
def _retyped(x, N: tl.constexpr):
    o = tl.arange(0, N)
    acc = tl.zeros([N], tl.int32)
    for i in range(0, 3):
        acc = tl.load(x + o) * 3.0 + i
    return acc


@triton.jit
def retyped_in_a_helper(x, y, N: tl.constexpr):
    tl.store(y + tl.arange(0, N), _retyped(x, N))


def test_a_failure_in_a_called_function_names_its_line():
    """Triton's CompilationError names only the outermost call (for a Gluon kernel, its `warp_specialize`); the
    report follows the exception's causes down to the line that failed."""
    x = jnp.arange(16, dtype=jnp.float32)
    with compile_check.record() as specs:
        jax.eval_shape(lambda v: launch.triton_call(v, kernel=retyped_in_a_helper,
                                                    out_shape=jax.ShapeDtypeStruct((16,), jnp.float32),
                                                    grid=(1,), N=16), x)
    result = compile_check.compile_all(specs, last="ttir")
    assert len(result["failed"]) == 1
    error = result["failed"][0]["error"]
    assert "_retyped(x, N)" in error and "Loop-carried variable acc" in error, error  # the call, then the cause
    assert error.index("_retyped(x, N)") < error.index("for i in range(0, 3)") < error.index("Loop-carried"), error


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


def test_resources_write_the_sass_where_asked(tmp_path):
    """`compile_all(..., sass_dir=...)` (scripts/kernel_resources.py --sass) writes each spec's SASS, named by
    `sass_name`: the product's HGMMA instructions are in it, as many as the resources counted; a folder that does
    not exist, or another stage, is a ValueError naming `sass_dir`."""
    x = jax.ShapeDtypeStruct((64, 64), jnp.bfloat16)
    out_shape = jax.ShapeDtypeStruct((64, 64), jnp.float32)
    with compile_check.record() as specs:
        jax.eval_shape(lambda v: launch.triton_call(v, v, kernel=dot_tile, out_shape=out_shape, grid=(1,), N=64), x)
    result = compile_check.compile_all(specs, last="resources", sass_dir=str(tmp_path))
    assert not result["failed"], result["failed"]
    (row,) = result["resources"]
    (written,) = tmp_path.iterdir()
    assert written.name == compile_check.sass_name(row["spec"]) and written.name.startswith("dot_tile-")
    assert written.read_text().count("HGMMA") == row["resources"]["HGMMA"] > 0
    with pytest.raises(ValueError, match="sass_dir"):
        compile_check.compile_all(specs, last="resources", sass_dir=str(tmp_path / "absent"))
    with pytest.raises(ValueError, match="sass_dir"):
        compile_check.compile_all(specs, last="cubin", sass_dir=str(tmp_path))


def test_a_gluon_kernel_compiles_for_hopper_under_its_register_cap():
    """A Gluon kernel goes through the same compiler stages (Gluon's own source, Triton 3.9 and later); `maxnreg`
    caps its registers (4096 elements on 4 warps take 72 without a cap). On an older Triton the compile is a
    ValueError that names the version it needs."""
    spec = {"module": "tests.gluon_example", "kernel": "scale_rows",
            "signature": {"x": "*fp32", "n": "i32", "alpha": "fp32", "y": "*fp32", "BLOCK": "constexpr",
                          "NW": "constexpr"},
            "constexprs": {"BLOCK": 4096, "NW": 4}, "num_warps": 4, "num_stages": 2}
    specialized = {"module": "tests.gluon_example", "kernel": "double_rows_specialized",
                   "signature": {"x": "*fp32", "n_rows": "i32", "y": "*fp32", "R": "constexpr", "C": "constexpr",
                                 "NW": "constexpr"},
                   "constexprs": {"R": 64, "C": 64, "NW": 4}, "num_warps": 4, "num_stages": 2}
    result = compile_check.compile_all([spec, {**spec, "maxnreg": 32}, specialized], last="resources")
    if tuple(int(p) for p in triton.__version__.split(".")[:2]) >= (3, 9):
        assert not result["failed"], result["failed"]
        registers = {row["spec"].get("maxnreg"): row["resources"]["registers"] for row in result["resources"]
                     if row["spec"]["kernel"] == "scale_rows"}
        assert registers[None] > 32 >= registers[32], registers
        (tile,) = [row for row in result["resources"] if row["spec"]["kernel"] == "double_rows_specialized"]
        assert tile["resources"]["shared"] >= 64 * 64 * 4, tile  # the TMA tile in shared memory
    else:
        assert len(result["failed"]) == 3, result
        for failure in result["failed"]:
            assert "Gluon kernel, which workbench compiles with Triton 3.9 or later" in failure["error"], failure


def test_precompiled_candidates_are_what_the_gpu_launcher_loads_instead_of_compiling(tmp_path, monkeypatch):
    """`precompile` (`workbench tune --compile-workers`): an autotuned kernel's candidates compiled in child
    processes land in the compiled-kernel store under the very keys `gpu_call.compiled` looks up, so each
    candidate's launch loads its kernel (none compiled) and gets the PTX the launcher's own compile makes. Kernels
    already on disk are skipped; with the cache off nothing is compiled."""
    from workbench import autotune, cache, gpu_call
    from workbench.recurrent import kernels as recurrent_kernels

    monkeypatch.setenv(cache.CACHE_VAR, str(tmp_path / "cache"))
    monkeypatch.delenv(cache.MODE_VAR, raising=False)
    monkeypatch.setattr(gpu_call, "_COMPILED", {})
    monkeypatch.setattr(gpu_call, "STATS", gpu_call.collections.Counter())
    H, K, V, N, T = 2, 16, 16, 2, 24
    f = jax.ShapeDtypeStruct
    args = (f((1, N * T, H, K), jnp.bfloat16), f((1, N * T, H, K), jnp.bfloat16), f((1, N * T, H, V), jnp.bfloat16),
            f((1, N * T, H, K), jnp.float32), f(launch.ABSENT_SHAPE, jnp.int8), f((N, H, K, V), jnp.float32),
            f((N + 1,), jnp.int32))
    outs = [f((1, N * T, H, V), jnp.bfloat16), f((N, H, K, V), jnp.float32), f((0,), jnp.float32)]
    meta = dict(scale=0.25, H=H, K=K, V=V, BK=16, CHUNK=recurrent_kernels.CHUNK, REVERSE=False)
    kernel = recurrent_kernels.recurrent_fwd_kernel
    configs = autotune.plan(kernel, args, outs, meta, device="NVIDIA H200", versions=autotune.versions()).candidates
    assert len(configs) >= 2

    first = compile_check.precompile(kernel, args, outs, configs, meta, workers=2, cc=90)
    assert (first["compiled"], first["skipped"], first["failed"]) == (len(configs), 0, []), first
    again = compile_check.precompile(kernel, args, outs, configs[:1], meta, workers=2, cc=90)
    assert (again["compiled"], again["skipped"]) == (0, 1)

    for config in configs:
        bound = gpu_call.Bound(kernel.fn, args, outs, {**meta, **config.kwargs})
        _, loaded = gpu_call.compiled(bound, num_warps=config.num_warps, num_stages=config.num_stages,
                                      num_ctas=config.num_ctas, cc=90, maxnreg=config.maxnreg)
        # this process interprets Triton: a kernel not found on disk would have failed to compile here
        assert loaded.name == "recurrent_fwd_kernel" and loaded.num_warps == config.num_warps
        assert ".target sm_90" in loaded.binary and f".reqntid {32 * config.num_warps}\n" in loaded.binary
    assert gpu_call.STATS == {"kernels_loaded": len(configs)}  # none compiled by the launcher

    monkeypatch.setenv(cache.MODE_VAR, "off")
    assert compile_check.precompile(kernel, args, outs, configs, meta, workers=2, cc=90)["compiled"] == 0
    with pytest.raises(ValueError, match="store: a folder exactly when last='store'"):
        compile_check.compile_all([{"module": "m"}], last="store", store=None)

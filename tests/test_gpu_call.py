"""workbench.gpu_call on a CPU, with jaxlib's Triton bindings and the compiler stubbed: how a launch binds its
arguments (signature, constants, heuristics), keeps compiled kernels (memory, disk, `off`), builds jaxlib's
kernel (the compiler's warps and scratch) and parameters (zeroed outputs, typed scalars, descriptors), and the
custom call XLA receives. The real thing runs in the GPU tests (tests/*/test_gpu.py, tests/test_gpu_launch.py)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl

from workbench import cache, compiler, gpu_call, launch, scratch_pool, signature


@triton.jit
def _axpy(x, alpha, y, n, out, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    o_i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m_i = o_i < n
    tl.store(out + o_i, alpha * tl.load(x + o_i, mask=m_i) + tl.load(y + o_i, mask=m_i), mask=m_i)


_axpy_even = triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})(_axpy)


@triton.jit
def _with_default(x, out, SCALE: tl.constexpr = 2.0, BLOCK: tl.constexpr = 16):
    o_i = tl.arange(0, BLOCK)
    tl.store(out + o_i, tl.load(x + o_i) * SCALE)


class Bindings:
    """Stand-in for `jaxlib.gpu_triton`: records what the launcher builds."""

    def __init__(self):
        self.pools_kept = []  # scratch_pool.ensure() calls (the stubs' fixture)
        self.kernels = []

    def TritonKernel(self, *args):
        self.kernels.append(args)
        return ("kernel", args)

    def TritonKernelCall(self, kernel, g0, g1, g2, params):
        return Call(kernel, (g0, g1, g2), params)

    def TritonAutotunedKernelCall(self, name, calls, sizes):
        return Call(("autotuned", name, tuple(d for _, d in calls), sizes), (0, 0, 0), [c for c, _ in calls])

    @staticmethod
    def create_array_parameter(zeroed, divisibility):
        return ("array", zeroed, divisibility)

    @staticmethod
    def create_scalar_parameter(value, kind):
        return ("scalar", value, kind)

    @staticmethod
    def create_tma_descriptor_parameter(**fields):
        return ("tma", fields)

    @staticmethod
    def get_compute_capability(device):
        return 90


class Call:
    def __init__(self, kernel, grid, params):
        self.kernel, self.grid, self.params = kernel, grid, params

    def to_proto(self, name, metadata):
        return json.dumps([name, repr(self.kernel), self.grid, repr(self.params)]).encode()


class Compiler:
    """Stand-in for `compiler.compile_kernel`: counts compiles; reports `warps` (None: as asked) and `scratch`."""

    def __init__(self, warps=None, scratch=0, descriptors=()):
        self.calls, self.warps, self.scratch, self.descriptors = [], warps, scratch, descriptors

    def __call__(self, fn, sig, constants, *, num_warps, num_stages, num_ctas, capability, last, maxnreg=None):
        self.calls.append((fn.__name__, dict(sig), dict(constants), num_warps, num_stages, capability))
        self.maxnreg = maxnreg
        return compiler.Compiled(name=f"{fn.__name__}_0d1d", binary=f"ptx {len(self.calls)}", ttir="ttir",
                                 shared=1024, num_warps=self.warps or num_warps,
                                 global_scratch_size=self.scratch, global_scratch_align=128 if self.scratch else 1,
                                 tensordesc_meta=self.descriptors)


@pytest.fixture
def stubs(tmp_path, monkeypatch):
    lib, comp = Bindings(), Compiler()
    monkeypatch.setenv(cache.CACHE_VAR, str(tmp_path / "cache"))
    monkeypatch.delenv(cache.MODE_VAR, raising=False)
    monkeypatch.setattr(gpu_call, "bindings", lambda: lib)
    monkeypatch.setattr(gpu_call.compiler, "compile_kernel", comp)
    monkeypatch.setattr(gpu_call, "_COMPILED", {})
    monkeypatch.setattr(gpu_call, "_KERNELS", {})
    monkeypatch.setattr(gpu_call, "STATS", gpu_call.STATS.__class__())
    monkeypatch.setattr(scratch_pool, "ensure", lambda: lib.pools_kept.append(1))
    return lib, comp


def _new_process(monkeypatch):
    monkeypatch.setattr(gpu_call, "_COMPILED", {})
    monkeypatch.setattr(gpu_call, "_KERNELS", {})


N = 40
X = jax.ShapeDtypeStruct((N,), jnp.bfloat16)


def _bind(kernel=_axpy_even, args=(X, 0.5, X), n=N, **meta):
    return gpu_call.Bound(kernel, [*args, n] if n is not None else list(args), [X], {"BLOCK": 16, **meta})


# ----------------------------------------------------------------------------- binding


def test_arguments_bind_to_a_signature_and_constants_as_triton_types_them():
    bound = _bind()
    assert bound.signature == {"x": "*bf16", "alpha": "fp32", "y": "*bf16", "n": "i32", "out": "*bf16",
                               "BLOCK": "constexpr", "EVEN": "constexpr"}
    assert bound.constants == {"BLOCK": 16, "EVEN": False}  # the heuristic, from n and BLOCK
    assert [name for name, _, _ in bound.runtime] == ["x", "alpha", "y", "n", "out"]
    assert _bind(n=48).constants["EVEN"] is True
    one = _bind(n=1)  # an int equal to 1 is compiled in, as Triton's launcher does
    assert one.signature["n"] == "constexpr" and one.constants["n"] == 1 and "n" not in [r[0] for r in one.runtime]
    assert _bind(args=(X, 2 ** 40, X)).signature["alpha"] == "i64"
    assert _bind(args=(X, np.float64(1e300), X)).signature["alpha"] == "fp64"
    assert _bind(args=(X, True, X)).signature["alpha"] == "i1"
    none = _bind(args=(X, None, X))
    assert none.signature["alpha"] == "constexpr" and none.constants["alpha"] is None


def test_binding_errors_name_the_parameter():
    with pytest.raises(ValueError, match="alpha: a str"):
        _bind(args=(X, "half", X))
    with pytest.raises(ValueError, match="alpha: a scalar of dtype float16"):
        _bind(args=(X, np.float16(0.5), X))
    with pytest.raises(ValueError, match="no value for the constexpr parameter 'BLOCK'"):
        gpu_call.Bound(_axpy, [X, 0.5, X, N], [X], {"EVEN": True})
    with pytest.raises(ValueError, match="no argument for the parameter 'n'"):
        gpu_call.Bound(_axpy, [X, 0.5, X], [], {"BLOCK": 16, "EVEN": True})
    with pytest.raises(ValueError, match="6 arguments and 1 outputs, positional, must fill its parameters before"):
        gpu_call.Bound(_axpy, [X, 0.5, X, N, X, X], [X], {"BLOCK": 16, "EVEN": True})


def test_constexpr_defaults_apply_and_the_grid_sees_the_meta_parameters():
    bound = gpu_call.Bound(_with_default, [X], [X], {})
    assert bound.constants == {"SCALE": 2.0, "BLOCK": 16}
    assert gpu_call.Bound(_with_default, [X], [X], {"BLOCK": 32}).constants["BLOCK"] == 32
    assert _bind().grid(lambda meta: (triton.cdiv(N, meta["BLOCK"]), 2 if meta["EVEN"] else 3)) == (3, 3, 1)
    assert _bind().grid(5) == (5, 1, 1)
    with pytest.raises(ValueError, match="at most 3 dimensions"):
        _bind().grid((1, 1, 1, 1))


# ----------------------------------------------------------------------------- compiled kernels


def test_a_compiled_kernel_is_kept_on_disk_and_loaded_by_the_next_process(stubs, monkeypatch, tmp_path):
    lib, comp = stubs
    first = gpu_call.compiled(_bind(), num_warps=4, num_stages=2, num_ctas=1, cc=90)
    assert len(comp.calls) == 1 and gpu_call.compiled(_bind(), num_warps=4, num_stages=2, num_ctas=1, cc=90) == first
    (entry,) = (tmp_path / "cache" / "kernels").glob("*.json")
    _new_process(monkeypatch)
    assert gpu_call.compiled(_bind(), num_warps=4, num_stages=2, num_ctas=1, cc=90) == first
    assert len(comp.calls) == 1 and gpu_call.STATS == {"kernels_compiled": 1, "kernels_loaded": 1}
    for change in ({"num_warps": 8}, {"num_stages": 3}, {"cc": 100}):  # each its own kernel
        gpu_call.compiled(_bind(), **{"num_warps": 4, "num_stages": 2, "num_ctas": 1, "cc": 90, **change})
    gpu_call.compiled(_bind(n=48), num_warps=4, num_stages=2, num_ctas=1, cc=90)  # EVEN flips
    gpu_call.compiled(_bind(args=(X, 2, X)), num_warps=4, num_stages=2, num_ctas=1, cc=90)  # alpha: i32
    assert len(comp.calls) == 6

    entry.write_text("{torn")
    _new_process(monkeypatch)
    with pytest.warns(cache.CacheWarning, match="corrupt"):
        gpu_call.compiled(_bind(), num_warps=4, num_stages=2, num_ctas=1, cc=90)
    assert len(comp.calls) == 7 and json.loads(entry.read_text())["binary"] == "ptx 7"  # rewritten


def test_off_reads_and_writes_no_kernel(stubs, monkeypatch, tmp_path):
    _, comp = stubs
    monkeypatch.setenv(cache.MODE_VAR, "off")
    gpu_call.compiled(_bind(), num_warps=4, num_stages=2, num_ctas=1, cc=90)
    _new_process(monkeypatch)
    gpu_call.compiled(_bind(), num_warps=4, num_stages=2, num_ctas=1, cc=90)
    assert len(comp.calls) == 2 and not (tmp_path / "cache" / "kernels").exists()


@pytest.mark.parametrize("warps, scratch", [(None, 0), (12, 0), (None, 512), (12, 640)])
def test_the_kernel_is_built_with_the_warps_and_scratch_the_compiler_reports(stubs, monkeypatch, warps, scratch):
    """A warp-specialized kernel runs more warps than its config asked (Triton raises `num_warps` to the sum of
    its partitions'); one that makes descriptors on the device asks for global scratch. Both reach jaxlib's
    kernel, when compiled and when loaded from disk by the next process."""
    lib, comp = stubs
    comp.warps, comp.scratch = warps, scratch
    x = jnp.zeros(N, jnp.bfloat16)
    for _ in range(2):  # lowered, not run: this CPU has no Triton handler
        jax.jit(lambda x: gpu_call.launch([x, 0.5, x, N], kernel=_axpy_even, out_shapes=[X], grid=(3,), num_warps=4,
                                          metaparams={"BLOCK": 16})).lower(x)
        _new_process(monkeypatch)
    assert len(comp.calls) == 1 and len(lib.kernels) == 2 and lib.kernels[0] == lib.kernels[1]
    name, num_warps, ctas, shared, ptx, ttir, cc, *rest = lib.kernels[0]
    assert (name, num_warps, ctas, shared, ptx, cc) == ("_axpy_0d1d", warps or 4, 1, 1024, "ptx 1", 90)
    assert rest == ([scratch, 128] if scratch else [])


# ----------------------------------------------------------------------------- parameters and the call


def test_parameters_follow_the_arguments_and_zeroed_outputs(stubs):
    lib, _ = stubs
    bound = gpu_call.Bound(_axpy_even, [X, 0.5, X, N], [X], {"BLOCK": 16})
    result = compiler.Compiled(name="k", binary="", ttir="", shared=0, num_warps=4)
    params = gpu_call._parameters(lib, bound, result, gpu_call._zeroed(bound, [X], [0]))
    assert params == [("array", 0, 16), ("scalar", 0.5, "fp32"), ("array", 0, 16), ("scalar", N, "i32"),
                      ("array", N * 2, 16)]


def test_a_host_descriptor_becomes_a_tma_parameter_then_its_shape_and_strides(stubs, monkeypatch):
    if signature.triton_version() < signature.HOST_DESCRIPTORS_SINCE:
        with pytest.raises(ValueError, match="need Triton >= 3.8"):
            signature.TensorDescriptor(jnp.zeros((64, 32), jnp.bfloat16), (16, 32))
        return
    import sys
    import types

    driver = types.ModuleType("triton.backends.nvidia.driver")
    driver.TMA_DTYPE_DEVICE_TO_HOST = {5: 6}
    monkeypatch.setitem(sys.modules, "triton.backends.nvidia.driver", driver)
    lib, _ = stubs
    desc = signature.TensorDescriptor(jax.ShapeDtypeStruct((64, 32), jnp.bfloat16), (16, 32))
    bound = gpu_call.Bound(_axpy_even, [desc, 0.5, X, N], [X], {"BLOCK": 16})
    assert bound.signature["x"] == "tensordesc<bf16[16, 32]>"
    meta = ({"block_size": [16, 32], "elem_size": 2, "elem_type": 5, "fp4_padded": False, "swizzle": 3},)
    result = compiler.Compiled(name="k", binary="", ttir="", shared=0, num_warps=4, tensordesc_meta=meta)
    params = gpu_call._parameters(lib, bound, result, {})
    assert params[:5] == [("tma", dict(elem_type=6, swizzle=3, shape=[64, 32], strides=[32, 1], block_shape=[16, 32],
                                       oob_fill=0)),
                          ("scalar", 64, "i32"), ("scalar", 32, "i32"), ("scalar", 32, "i64"), ("scalar", 1, "i64")]
    assert params[5] == ("scalar", 0.5, "fp32")


def test_descriptors_are_checked_where_they_are_made():
    if signature.triton_version() < signature.HOST_DESCRIPTORS_SINCE:
        pytest.skip("host descriptors need Triton >= 3.8; the error on older releases is tested above")
    with pytest.raises(ValueError, match="power of two.*base \\(64, 32\\) bfloat16, block_shape \\(16, 24\\)"):
        signature.TensorDescriptor(jnp.zeros((64, 32), jnp.bfloat16), (16, 24))
    with pytest.raises(ValueError, match="multiple of 16 bytes.*rows of 10 bytes"):
        signature.TensorDescriptor(jnp.zeros((64, 5), jnp.bfloat16), (16, 8))
    with pytest.raises(ValueError, match="one entry per dimension"):
        signature.TensorDescriptor(jnp.zeros((64, 32), jnp.float32), (16,))
    with pytest.raises(ValueError, match="padding='nan' needs a floating array"):
        signature.TensorDescriptor(jnp.zeros((64, 32), jnp.int32), (16, 32), padding="nan")


def test_the_custom_call_carries_the_kernel_call_and_maps_aliases_to_operands(stubs):
    """What XLA receives: one custom call to jaxlib's Triton handler, the arrays as operands (scalars are in the
    call's parameters), an output aliased to its input's operand, and the compressed call description."""
    def f(x, y):
        return gpu_call.launch([x, 0.5, y, N], kernel=_axpy_even, out_shapes=[X], grid=(3,), name="axpy",
                               metaparams={"BLOCK": 16}, input_output_aliases={2: 0})[0]

    text = jax.jit(f).lower(jnp.zeros(N, jnp.bfloat16), jnp.zeros(N, jnp.bfloat16)).as_text()
    (line,) = [l for l in text.splitlines() if "custom_call" in l]
    assert "@triton_kernel_call_ffi(%arg0, %arg1)" in line and "operand_index = 1" in line
    assert "opaque" in line


def _lower_axpy():
    """A jitted launch of `_axpy_even` on zeros, lowered (the stubs compile it; nothing runs)."""
    x = jnp.zeros(N, jnp.bfloat16)
    return jax.jit(lambda x: gpu_call.launch([x, 0.5, x, N], kernel=_axpy_even, out_shapes=[X], grid=(3,),
                                             metaparams={"BLOCK": 16})).lower(x)


def test_a_kernel_with_global_scratch_goes_to_the_handler_xla_keeps_out_of_cuda_graphs(stubs, monkeypatch):
    _, comp = stubs
    monkeypatch.setenv(cache.MODE_VAR, "off")  # compiled anew below, not loaded
    lower = lambda: _lower_axpy().as_text()  # noqa: E731
    plain = lower()
    assert "@triton_kernel_call_ffi(" in plain and "opaque = " in plain
    comp.scratch = 256
    gpu_call._COMPILED.clear()
    scratch = lower()
    assert "@triton_kernel_call(" in scratch and "api_version = 2" in scratch and "backend_config = " in scratch


def test_only_a_kernel_with_global_scratch_asks_for_the_pools_to_keep_freed_memory(stubs, monkeypatch):
    """jaxlib allocates a kernel's global scratch at every launch from the default pool (scratch_pool.py)."""
    lib, comp = stubs
    monkeypatch.setenv(cache.MODE_VAR, "off")
    _lower_axpy()
    assert lib.pools_kept == []
    comp.scratch = 256
    gpu_call._COMPILED.clear()
    _lower_axpy()
    assert lib.pools_kept == [1]


class FakeDriver:
    """Stand-in for libcuda's memory-pool calls: `thresholds` per device; `fail` names a call that returns error 1."""

    def __init__(self, thresholds, fail=None):
        self.thresholds, self.fail, self.set = list(thresholds), fail, []

    def _status(self, name):
        return 1 if name == self.fail else 0

    def cuInit(self, flags):
        return self._status("cuInit")

    def cuDeviceGetCount(self, count):
        count._obj.value = len(self.thresholds)
        return self._status("cuDeviceGetCount")

    def cuDeviceGet(self, device, ordinal):
        device._obj.value = 100 + ordinal
        return self._status("cuDeviceGet")

    def cuDeviceGetDefaultMemPool(self, pool, device):
        pool._obj.value = 1000 + device.value
        return self._status("cuDeviceGetDefaultMemPool")

    def cuMemPoolGetAttribute(self, pool, attr, value):
        assert attr == scratch_pool.ATTR_RELEASE_THRESHOLD
        value._obj.value = self.thresholds[pool.value - 1100]
        return self._status("cuMemPoolGetAttribute")

    def cuMemPoolSetAttribute(self, pool, attr, value):
        assert attr == scratch_pool.ATTR_RELEASE_THRESHOLD
        self.set.append((pool.value - 1100, value._obj.value))
        self.thresholds[pool.value - 1100] = value._obj.value
        return self._status("cuMemPoolSetAttribute")


def test_the_default_pools_are_raised_to_keep_freed_memory_and_never_lowered():
    cuda = FakeDriver([0, 1 << 40, (1 << 20) - 1])
    assert scratch_pool.keep_freed_memory(cuda) == [scratch_pool.RELEASE_THRESHOLD, 1 << 40,
                                                    scratch_pool.RELEASE_THRESHOLD]
    assert cuda.set == [(0, scratch_pool.RELEASE_THRESHOLD), (2, scratch_pool.RELEASE_THRESHOLD)]
    assert scratch_pool.release_thresholds(cuda) == [scratch_pool.RELEASE_THRESHOLD, 1 << 40,
                                                     scratch_pool.RELEASE_THRESHOLD]
    assert scratch_pool.keep_freed_memory(cuda) and len(cuda.set) == 2  # the second time, nothing to raise


@pytest.mark.parametrize("fail", ["cuInit", "cuDeviceGetDefaultMemPool", "cuMemPoolSetAttribute"])
def test_a_driver_that_refuses_the_pools_is_a_warning_naming_the_call(monkeypatch, fail):
    with pytest.raises(OSError, match=fail):
        scratch_pool.keep_freed_memory(FakeDriver([0], fail=fail))
    monkeypatch.setattr(scratch_pool, "driver", lambda: FakeDriver([0], fail=fail))
    scratch_pool.ensure.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match=f"could not be set to keep freed memory.*{fail}"):
            assert scratch_pool.ensure() is None
    finally:
        scratch_pool.ensure.cache_clear()


def test_an_empty_grid_launches_nothing_and_leaves_outputs_as_the_interpreter_does(stubs):
    lib, comp = stubs
    x = jnp.arange(N, dtype=jnp.float32)

    def empty(out=X, **kw):
        (o,) = gpu_call.launch([x, 0.5, x, N], kernel=_axpy_even, out_shapes=[out], grid=(0, 4),
                               metaparams={"BLOCK": 16}, **kw)
        return o

    assert (empty(input_output_aliases={0: 0}) == x).all()  # an aliased output keeps its input
    assert (empty(zeroed_outputs=[0]) == 0).all() and jnp.isnan(empty()).all()
    assert (empty(jax.ShapeDtypeStruct((N,), jnp.int32)) == np.iinfo(np.int32).min).all()
    assert comp.calls == [] and lib.kernels == []


def test_the_autotuned_fallback_hands_every_config_to_jaxlib(stubs):
    lib, comp = stubs
    configs = [triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((16, 2), (32, 4))]
    x = jnp.zeros(N, jnp.bfloat16)
    def f(x):
        return gpu_call.launch_autotuned([x, 0.5, x, N], configs=configs, kernel=_axpy_even, out_shapes=[X],
                                         grid=lambda m: (triton.cdiv(N, m["BLOCK"]),), name="axpy")[0]

    text = jax.jit(f).lower(x).as_text()
    assert "triton_kernel_call_ffi" in text and [c[3] for c in comp.calls] == [2, 4]
    assert [c[2]["BLOCK"] for c in comp.calls] == [16, 32]


def test_a_launch_through_the_launcher_reaches_gpu_call_with_its_arguments(stubs, monkeypatch):
    """`launch.triton_call`'s GPU branch (the launcher told it is on a GPU) hands gpu_call what the op passed and
    returns the custom call's outputs."""
    monkeypatch.setattr(launch, "INTERPRET", False)
    seen = []
    real = gpu_call.launch
    monkeypatch.setattr(gpu_call, "launch", lambda args, **kw: seen.append((args, kw)) or real(args, **kw))
    x = jnp.zeros(N, jnp.bfloat16)
    lowered = jax.jit(lambda x: launch.triton_call(x, 0.5, x, N, kernel=_axpy_even, out_shape=X, grid=(3,),
                                                   BLOCK=16)).lower(x)
    assert "triton_kernel_call_ffi" in lowered.as_text()
    ((args, kw),) = seen
    assert isinstance(args[0], jax.core.Tracer) and args[1:2] + args[3:] == (0.5, N)
    assert kw["metaparams"] == {"BLOCK": 16} and kw["out_shapes"] == [X]


def test_without_jaxs_cuda_plugin_a_gpu_launch_says_what_to_install(monkeypatch):
    monkeypatch.setattr(gpu_call, "_COMPILED", {})
    x = jnp.zeros(N, jnp.bfloat16)
    with pytest.raises(RuntimeError, match="no CUDA Triton support"):
        jax.jit(lambda x: gpu_call.launch([x, 0.5, x, N], kernel=_axpy_even, out_shapes=[X], grid=(3,),
                                          metaparams={"BLOCK": 16})).lower(x)


def test_a_register_cap_is_its_own_kernel_and_reaches_the_compiler(stubs):
    """`maxnreg` (triton_call's, or an autotune config's) is in a kernel's key only when set, so the keys of
    kernels without one are those of earlier releases (their disk cache stays valid)."""
    lib, comp = stubs
    plain = gpu_call.kernel_key(_bind(), num_warps=4, num_stages=2, num_ctas=1, cc=90)
    capped = gpu_call.kernel_key(_bind(), num_warps=4, num_stages=2, num_ctas=1, cc=90, maxnreg=168)
    assert "maxnreg" not in plain and capped == {**plain, "maxnreg": 168}
    gpu_call.compiled(_bind(), num_warps=4, num_stages=2, num_ctas=1, cc=90)
    assert comp.maxnreg is None
    gpu_call.compiled(_bind(), num_warps=4, num_stages=2, num_ctas=1, cc=90, maxnreg=168)
    assert len(comp.calls) == 2 and comp.maxnreg == 168
    configs = [triton.Config({"BLOCK": 16}, num_warps=4, maxnreg=96)]
    jax.jit(lambda x: gpu_call.launch_autotuned([x, 0.5, x, N], configs=configs, kernel=_axpy_even, out_shapes=[X],
                                                grid=(3,))[0]).lower(jnp.zeros(N, jnp.bfloat16))
    assert comp.maxnreg == 96


def test_triton_calls_register_cap_reaches_gpu_call(stubs, monkeypatch):
    monkeypatch.setattr(launch, "INTERPRET", False)
    seen = []
    real = gpu_call.launch
    monkeypatch.setattr(gpu_call, "launch", lambda args, **kw: seen.append(kw) or real(args, **kw))
    jax.jit(lambda x: launch.triton_call(x, 0.5, x, N, kernel=_axpy_even, out_shape=X, grid=(3,), maxnreg=128,
                                         BLOCK=16)).lower(jnp.zeros(N, jnp.bfloat16))
    assert seen[0]["maxnreg"] == 128 and stubs[1].maxnreg == 128

"""A Triton kernel run on a CUDA GPU from JAX: compiled to PTX by `workbench.compiler` (kept on disk), and
launched by XLA through jaxlib's Triton custom call.

The call is the one jax-triton builds: a `stablehlo.custom_call` to jaxlib's handler `triton_kernel_call_ffi`
(`jax.ffi.ffi_call`), whose `opaque` attribute is a compressed kernel-call description made with jaxlib's
Triton bindings (`jaxlib.gpu_triton`: the kernel's PTX and launch sizes, then one parameter per kernel
argument); a kernel with global scratch goes to jaxlib's API-2 handler of the same description
(`LEGACY_CUSTOM_CALL`, which XLA never records into a CUDA graph). Why not jax-triton's own `triton_call` (0.4.1): it launches a warp-specialized kernel with the
warps the caller asked for, where the compiler has raised them to the sum of its partitions' (the kernel
then requires more threads per block than it is given, and the launch fails), and it keeps compiled kernels
in memory only, with no public way to keep them across processes; jax-triton 0.3.1 also dropped a
kernel's global scratch. Here the launch takes the warps and scratch the compiler reports.

Arguments, in kernel-parameter order (inputs, then one pointer per output): arrays (16-byte aligned
pointers), run-time scalars typed by `workbench.signature`, and host-made tensor descriptors
(`signature.TensorDescriptor`: a TMA descriptor built by jaxlib at launch, then the array's shape and
strides). `None` and ints equal to 1 are compiled in as constants, like every `tl.constexpr` and every
value passed by keyword (meta-parameters, `@triton.heuristics` flags, which are evaluated here as Triton's
launcher does, and scalars an op passes by name, as jax-triton 0.3.1 compiled them in).

Compiled kernels: a key of the kernel's source hash (`workbench.kernel_hash`), signature, constants, warps,
stages, CTAs, compute capability and Triton version names one file in `<cache>/kernels/` (`workbench.cache`):
the PTX and what its launch needs. A later process loads it instead of compiling; with
`WORKBENCH_AUTOTUNE=off` nothing is read or written.
"""

from __future__ import annotations

import collections
import math
import threading
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from . import cache, compiler, scratch_pool, signature
from .kernel_hash import source_hash

CUSTOM_CALL = "triton_kernel_call_ffi"  # jaxlib's typed-FFI handler of Triton kernel calls
# jaxlib's older handler of the same calls (custom-call API 2, the call in `backend_config`), for kernels with
# global scratch: XLA may record FFI calls into a CUDA graph, and jaxlib 0.11's FFI handler then fails to give
# such a kernel its scratch ("Failed to create a child graph node ...: CUDA_ERROR_NOT_SUPPORTED", H200,
# 2026-11-27; jax-ml/jax#37482 adds the FFI's scratch support); the API-2 handler is never captured.
LEGACY_CUSTOM_CALL = "triton_kernel_call"
FORMAT = 2  # of the compiled-kernel entries (1: jax-triton 0.3.1's capture, before this launcher)

STATS: collections.Counter = collections.Counter()
"""Compiled kernels this process `kernels_loaded` (from disk) and `kernels_compiled`."""

_LOCK = threading.Lock()
_COMPILED: dict[str, compiler.Compiled] = {}  # digest of the kernel key → compiled kernel
_KERNELS: dict[tuple[str, int], Any] = {}  # (digest, CTAs) → jaxlib's TritonKernel


def bindings():
    """jaxlib's Triton kernel-call bindings (from JAX's CUDA plugin)."""
    from jaxlib import gpu_triton

    if not hasattr(gpu_triton, "TritonKernelCall"):
        raise RuntimeError("workbench: this jaxlib has no CUDA Triton support (JAX's CUDA plugin is not installed); "
                           'install JAX with its CUDA extra, e.g. pip install -e ".[cuda12]"')
    return gpu_triton


def capability() -> int:
    """The compute capability of the first GPU, as an int (90 for an H100)."""
    return int(bindings().get_compute_capability(0))


# ----------------------------------------------------------------------------- binding the arguments


class Bound:
    """One launch's kernel arguments bound to its parameters: the compile signature and constants, the
    meta-parameters (heuristic flags included) the grid and zeroed outputs are computed from, and the
    run-time arguments in order."""

    def __init__(self, kernel, args: Sequence[Any], out_shapes: Sequence[Any], metaparams: Mapping[str, Any]):
        tuner, rules, fn = signature.unwrap(kernel)
        if tuner is not None:
            raise TypeError(f"gpu_call: {fn.__name__} is autotuned; its config is chosen by workbench.autotune first")
        self.fn = fn
        names = list(fn.arg_names)
        constexprs = signature.constexpr_names(fn)
        given = names[:len(args) + len(out_shapes)]
        if len(args) + len(out_shapes) > len(names) or any(name in constexprs for name in given):
            raise ValueError(f"{fn.__name__}: {len(args)} arguments and {len(out_shapes)} outputs, positional, "
                             f"must fill its parameters before the first constexpr ({', '.join(names)})")
        named = dict(zip(names, [*args, *out_shapes]))
        self.output_names = names[len(args):len(args) + len(out_shapes)]
        meta = {**signature.constexpr_defaults(fn), **metaparams}
        for values in rules:  # outermost first: inner rules see the outer flags
            for flag, rule in values.items():
                meta[flag] = rule({**named, **meta})
        self.meta = meta
        self.signature: dict[str, str] = {}
        self.constants: dict[str, Any] = {}
        self.runtime: list[tuple[str, str, Any]] = []  # (name, signature type, value) of each run-time argument
        for name in names:
            if name in constexprs or (name not in named and name in meta):  # a keyword value is compiled in
                if name not in meta:
                    raise ValueError(f"{fn.__name__}: no value for the constexpr parameter {name!r}")
                self.signature[name], self.constants[name] = "constexpr", meta[name]
                continue
            if name not in named:
                raise ValueError(f"{fn.__name__}: no argument for the parameter {name!r} (arguments and outputs "
                                 f"cover {len(args) + len(out_shapes)} of {len(names)} parameters)")
            value = named[name]
            if isinstance(value, signature.TensorDescriptor):
                kind = value.type_name
            elif signature.is_array(value):
                kind = signature.pointer_type(value.dtype, name)
            elif value is None or signature.is_constant_one(value):
                self.signature[name], self.constants[name] = "constexpr", None if value is None else 1
                continue
            else:
                kind = signature.scalar_type(value, name)
            self.signature[name] = kind
            self.runtime.append((name, kind, value))

    def grid(self, grid: Any) -> tuple[int, int, int]:
        dims = grid(dict(self.meta)) if callable(grid) else grid
        dims = (dims,) if isinstance(dims, int) else tuple(int(d) for d in dims)
        if len(dims) > 3:
            raise ValueError(f"{self.fn.__name__}: a grid has at most 3 dimensions, got {dims}")
        return dims + (1,) * (3 - len(dims))


# ----------------------------------------------------------------------------- compiling


def kernel_key(bound: Bound, *, num_warps: int, num_stages: int, num_ctas: int, cc: int,
               maxnreg: int | None = None) -> dict[str, Any]:
    """The key of one compiled kernel: everything the compiler's output depends on (`maxnreg` only when set, so
    that the keys of kernels without it are those of earlier releases)."""
    import triton

    return cache.canonical({
        "kind": "kernel", "format": FORMAT, "kernel": bound.fn.__name__, "source": source_hash(bound.fn),
        "signature": bound.signature, "constants": sorted([k, repr(v)] for k, v in bound.constants.items()),
        "num_warps": num_warps, "num_stages": num_stages, "num_ctas": num_ctas, "capability": cc,
        "triton": triton.__version__, **({} if maxnreg is None else {"maxnreg": maxnreg}),
    })


def compiled(bound: Bound, *, num_warps: int, num_stages: int, num_ctas: int, cc: int,
             maxnreg: int | None = None) -> tuple[str, compiler.Compiled]:
    """(digest of the kernel key, the kernel compiled to PTX): from this process, the disk, or the compiler."""
    key = kernel_key(bound, num_warps=num_warps, num_stages=num_stages, num_ctas=num_ctas, cc=cc, maxnreg=maxnreg)
    name = cache.digest(key)
    with _LOCK:
        hit = _COMPILED.get(name)
    if hit is not None:
        return name, hit
    store = cache.Store(cache.cache_dir() / "kernels") if cache.mode() != "off" else None
    entry = store.read(key) if store is not None else None
    result = None
    if entry is not None:
        try:
            result = compiler.Compiled.from_json(entry)
            STATS["kernels_loaded"] += 1
        except (KeyError, TypeError):
            result = None
    if result is None:
        result = compiler.compile_kernel(bound.fn, bound.signature, bound.constants, num_warps=num_warps,
                                         num_stages=num_stages, num_ctas=num_ctas, capability=cc, last="ptx",
                                         maxnreg=maxnreg)
        STATS["kernels_compiled"] += 1
        if store is not None:
            store.write(key, result.as_json())
    with _LOCK:
        _COMPILED[name] = result
    return name, result


def _kernel(name: str, result: compiler.Compiled, num_ctas: int, cc: int):
    """jaxlib's TritonKernel of a compiled kernel (once per process)."""
    with _LOCK:
        hit = _KERNELS.get((name, num_ctas))
    if hit is not None:
        return hit
    if result.profile_scratch_size:
        raise RuntimeError(f"{result.name}: the kernel asks for {result.profile_scratch_size} bytes of profiling "
                           "scratch (Triton's instrumentation is on), which a launch from JAX cannot give")
    lib = bindings()
    scratch = ((result.global_scratch_size, result.global_scratch_align) if result.global_scratch_size else ())
    kernel = lib.TritonKernel(result.name, result.num_warps, num_ctas, result.shared, result.binary, result.ttir,
                              cc, *scratch)
    with _LOCK:
        _KERNELS[(name, num_ctas)] = kernel
    return kernel


# ----------------------------------------------------------------------------- the call


def _parameters(lib, bound: Bound, result: compiler.Compiled, zeroed_bytes: Mapping[str, int]) -> list[Any]:
    """jaxlib's launch parameters, one (or, for a descriptor, 1 + 2 × rank) per run-time argument."""
    out, descriptors = [], iter(result.tensordesc_meta)
    for name, kind, value in bound.runtime:
        if isinstance(value, signature.TensorDescriptor):
            meta = next(descriptors)
            if meta.get("is_im2col") or meta.get("fp4_padded"):
                raise ValueError(f"{name}: im2col and fp4-padded tensor descriptors cannot be launched from JAX")
            from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST

            out.append(lib.create_tma_descriptor_parameter(
                elem_type=TMA_DTYPE_DEVICE_TO_HOST[meta["elem_type"]], swizzle=meta["swizzle"],
                shape=list(value.shape), strides=list(value.strides), block_shape=list(meta["block_size"]),
                oob_fill=1 if value.padding == "nan" else 0))
            out += [lib.create_scalar_parameter(int(d), "i32") for d in value.shape]
            out += [lib.create_scalar_parameter(int(s), "i64") for s in value.strides]
        elif kind.startswith("*"):
            out.append(lib.create_array_parameter(zeroed_bytes.get(name, 0), 16))
        else:
            python = {"i1": bool, "fp32": float, "fp64": float}.get(kind, int)
            out.append(lib.create_scalar_parameter(python(value), kind))
    return out


def _zeroed(bound: Bound, out_shapes: Sequence[Any], indices: Sequence[int]) -> dict[str, int]:
    """Bytes to zero before the launch, by output parameter name."""
    import numpy as np

    return {bound.output_names[i]: math.prod(out_shapes[i].shape) * np.dtype(out_shapes[i].dtype).itemsize
            for i in indices}


def _operands(args: Sequence[Any]) -> tuple[list[Any], dict[int, int]]:
    """The custom call's operands (arrays, and each descriptor's base) and a map from an argument's position to
    its operand's."""
    operands, position = [], {}
    for i, a in enumerate(args):
        base = a.base if isinstance(a, signature.TensorDescriptor) else a
        if signature.is_array(base):
            position[i] = len(operands)
            operands.append(base)
    return operands, position


def _unlaunched(args, out_shapes, zeroed: Sequence[int], aliases: Mapping[int, int]):
    """The outputs of a launch on an empty grid, as the interpreter leaves them: aliased inputs as they were,
    zeroed outputs zero, the rest NaN (integers: their minimum)."""
    import jax.numpy as jnp

    by_output = {o: i for i, o in aliases.items()}
    return [args[by_output[j]] if j in by_output else
            jnp.full(s.shape, 0 if j in zeroed else signature.unwritten(s.dtype), s.dtype)
            for j, s in enumerate(out_shapes)]


def _ffi(name: str, call, args, out_shapes, aliases: Mapping[int, int], scratch: bool = False):
    """The custom call XLA runs: jaxlib's FFI handler, or its API-2 handler for a kernel with global scratch
    (`LEGACY_CUSTOM_CALL`)."""
    import jax

    operands, position = _operands(args)
    opaque = zlib.compress(call.to_proto(name or "workbench", b""))
    common = dict(input_output_aliases={position[i]: o for i, o in aliases.items()}, vmap_method="sequential")
    if scratch:
        return jax.ffi.ffi_call(LEGACY_CUSTOM_CALL, list(out_shapes), custom_call_api_version=2,
                                legacy_backend_config=opaque, **common)(*operands)
    return jax.ffi.ffi_call(CUSTOM_CALL, list(out_shapes), **common)(*operands, opaque=opaque)


def _kernel_call(args, out_shapes, kernel, grid, meta, zeroed_outputs, aliases, *, num_warps, num_stages,
                 num_ctas, maxnreg=None):
    """(jaxlib's call of `kernel` under one config, whether the kernel has global scratch, None), or, for an empty
    grid, (None, False, the outputs it leaves)."""
    bound = Bound(kernel, args, out_shapes, meta)
    dims = bound.grid(grid)
    zeroed = zeroed_outputs(dict(bound.meta)) if callable(zeroed_outputs) else tuple(zeroed_outputs)
    if 0 in dims:
        return None, False, _unlaunched(args, out_shapes, zeroed, aliases)
    lib, cc = bindings(), capability()
    digest, result = compiled(bound, num_warps=num_warps, num_stages=num_stages, num_ctas=num_ctas, cc=cc,
                              maxnreg=maxnreg)
    params = _parameters(lib, bound, result, _zeroed(bound, out_shapes, zeroed))
    call = lib.TritonKernelCall(_kernel(digest, result, num_ctas, cc), *dims, params)
    if result.global_scratch_size:
        scratch_pool.ensure()  # jaxlib allocates the scratch per launch from the default pool (scratch_pool.py)
    return call, result.global_scratch_size > 0, None


def launch(args: Sequence[Any], *, kernel, out_shapes: Sequence[Any], grid, name: str = "",
           num_warps: int | None = None, num_stages: int | None = None, num_ctas: int = 1,
           maxnreg: int | None = None, metaparams: Mapping[str, Any] | None = None, zeroed_outputs=(),
           input_output_aliases: Mapping[int, int] | None = None) -> list[Any]:
    """Run `kernel` (a `@triton.jit` function, possibly under `@triton.heuristics`) on the GPU: `args` in
    parameter order (arrays, scalars, descriptors), then one output per `out_shapes` entry; `grid` a tuple or
    a function of the meta-parameters; `input_output_aliases` maps an argument's position to the output that
    reuses its buffer; `zeroed_outputs` (indices, or a function of the meta-parameters) start at zero; `maxnreg`
    caps the registers per thread. A Gluon kernel (`triton.experimental.gluon.jit`) launches the same way."""
    aliases = dict(input_output_aliases or {})
    call, scratch, empty = _kernel_call(args, out_shapes, kernel, grid, dict(metaparams or {}), zeroed_outputs,
                                        aliases, num_warps=4 if num_warps is None else num_warps,
                                        num_stages=3 if num_stages is None else num_stages, num_ctas=num_ctas,
                                        maxnreg=maxnreg)
    return empty if call is None else list(_ffi(name, call, args, out_shapes, aliases, scratch))


def launch_autotuned(args: Sequence[Any], *, configs: Sequence[Any], kernel, out_shapes: Sequence[Any], grid,
                     name: str = "", metaparams: Mapping[str, Any] | None = None, zeroed_outputs=(),
                     input_output_aliases: Mapping[int, int] | None = None) -> list[Any]:
    """Like `launch`, for `kernel` under each of `configs` (`triton.Config`s): jaxlib times them all at the
    first execution and keeps the fastest for the process (nothing is remembered across processes). The
    autotuner's fallback for calls it cannot time ahead."""
    import numpy as np

    aliases = dict(input_output_aliases or {})
    calls, scratch = [], False
    for config in configs:
        call, has_scratch, empty = _kernel_call(args, out_shapes, kernel, grid,
                                                {**(metaparams or {}), **config.kwargs}, zeroed_outputs, aliases,
                                                num_warps=config.num_warps, num_stages=config.num_stages,
                                                num_ctas=config.num_ctas, maxnreg=config.maxnreg)
        if call is None:
            return empty
        calls.append((call, str(config)))
        scratch = scratch or has_scratch
    if len(calls) == 1:
        return list(_ffi(name, calls[0][0], args, out_shapes, aliases, scratch))
    operands, position = _operands(args)
    sizes = tuple((position[i], o, math.prod(operands[position[i]].shape) * np.dtype(operands[position[i]].dtype).itemsize)
                  for i, o in aliases.items())
    call = bindings().TritonAutotunedKernelCall(f"{name} ({signature.unwrap(kernel)[2].__name__})", calls, sizes)
    return list(_ffi(name, call, args, out_shapes, aliases, scratch))

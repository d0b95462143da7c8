"""Triton's interpreter as the CPU launcher runs it: NumPy arrays as kernel arguments, scalars typed as the
compiled path types them, fixes for the interpreter's bugs that change results, and address checks.

Triton's interpreter (TRITON_INTERPRET=1) runs a `@triton.jit` function's Python source on NumPy tiles. It
was written for torch tensors; here a kernel's arrays are `HostTensor`s, NumPy arrays that answer the
handful of questions the interpreter asks of an argument, so no torch is needed. Each fix below names the
interpreter behaviour it replaces and the Triton releases it was checked against (3.7.1, 3.8.0, 3.9.0;
`tests/test_interpreter.py` fails on any of them without the fix):

* bfloat16 (`_fix_bfloat16`): the interpreter keeps bfloat16 as uint16 bits and converts float32 → bfloat16
  by truncating the mantissa (`_convert_float` rounds only when asked for RTNE), float64 → bfloat16 with an
  integer `astype` (garbage); its elementwise arithmetic, comparisons and `tl.dot` on bfloat16 operands
  compute on the uint16 bit patterns as integers (`x * 2.0` of a bfloat16 `x` is garbage); and before 3.9.0
  its builder has no `get_bf16`, so a Python number meeting a bfloat16 tile fails with `AttributeError:
  'InterpreterBuilder' object has no attribute 'get_bf16'`. Here casts to and from bfloat16 round to
  nearest even through ml_dtypes, arithmetic on bfloat16 values is done in float32 and rounded once, as a
  GPU's bfloat16 instructions do, and `get_bf16` rounds its value (see also triton-lang/triton#11897).
* the order of a product's sums (`_fix_dot_order`): the interpreter's `tl.dot` is NumPy's float32 `matmul`,
  that is the host's BLAS, which picks its kernel by CPU at run time (OpenBLAS's DYNAMIC_ARCH) and with it the
  order of each dot product's additions. So the last bits of a product follow the machine: two kernels that
  form the same values by different routes can agree bit for bit on one CPU and differ by an ulp on another
  (found on an AMD EPYC with AVX-512, where OpenBLAS's default, Haswell and Zen kernels gave tests/kda's
  bit-equality tests one-ulp differences that its SkylakeX kernel did not; which products differ was not
  traced: making the operands contiguous did not remove them, summing in float64 did). Here floating-point
  operands are multiplied and summed in float64 (each product of two float32 values exact there) and the sum
  rounded once to the result's type: the result no longer depends on the order of the additions, except
  where a sum lies within K float64 ulps of a rounding boundary of the result's type (about K·2⁻²⁹ of float32
  results). A GPU's tensor cores sum in an order of their own; what the interpreter gives is the product's
  rounded value, a reference for it.
  (NumPy's product is the host's on every Triton release; checked with 3.7.1 and 3.9.0.)
* constants holding tensors (`_unwrap_constant_tensors`): a product like `LOG2E * x` of a `tl.constexpr` and
  a tensor is, in the interpreter, a constexpr wrapping the tensor, which `tl.exp2` and other builtins then
  refuse (`TypeError: cannot convert ... to tensor`, 3.7.1 to 3.9.0; the compiler takes it).
* Scalars passed to a kernel: the interpreter hands a Python float to the kernel as a Python number (a weakly
  typed constant: `x * a` stays bfloat16 for a bfloat16 `x`), while a GPU receives a float32 run-time
  argument (`x * a` is float32); Triton 3.7.1's interpreter cannot take a bool at all. `scalar_argument`
  gives the interpreter the GPU's typed scalar.
* Masks (`_check_memory_ops`): a comparison's result is stored as booleans labelled with the operands'
  integer type, so a scalar condition broadcast against a tile (`(o < K) & (i < n)`) becomes an int32 mask,
  which Triton 3.9.0's native loads and stores reject (`ValueError: mask has unsupported dtype`).
* Repeated patching (`_skip_nested_patches`, speed only): the interpreter re-patches `triton.language` on
  every call of a `@triton.jit` helper inside a running kernel, an `inspect.getmembers` sweep per call that
  was more than half the time of kernels calling helpers per tile; a helper whose modules the launch has
  already patched skips it.

Address checks (`WORKBENCH_CHECK_BOUNDS=1`): every load, store and atomic of a launch is checked against
the launch's buffers; an address outside all of them raises `OutOfBoundsError` naming the kernel and the
offsets, where the interpreter would otherwise read or write this process's memory.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from . import _backend  # noqa: F401  (first: TRITON_INTERPRET is set before triton is imported)
from . import signature

import ml_dtypes
import numpy as np
import triton.language as tl

ALIGNMENT = 64  # bytes: every HostTensor starts at a multiple (TMA descriptors need 16, as a GPU buffer has)


# ----------------------------------------------------------------------------- arguments


class ElementType(str):
    """Triton's name of an element type ("bf16", "fp32", ...), with the two attributes Triton's host-side
    `TensorDescriptor` reads of a torch dtype (`itemsize`, `is_floating_point`)."""

    itemsize: int
    is_floating_point: bool

    def __new__(cls, dtype: np.dtype):
        self = super().__new__(cls, signature.element_type(dtype))
        self.itemsize = np.dtype(dtype).itemsize
        self.is_floating_point = self.startswith(("fp", "bf"))
        return self


def aligned_copy(array: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of `array` whose first byte is at a multiple of ALIGNMENT."""
    array = np.asarray(array)
    raw = np.empty(array.nbytes + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    out = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    out[...] = array
    return out


class HostTensor:
    """A NumPy array as Triton's interpreter takes a kernel argument.

    The interpreter asks an argument for its address (`data_ptr`) and element type (`dtype`, here Triton's
    name), and, to copy it to the host before the kernel runs and back after, for its storage
    (`untyped_storage`, `cpu`, `new_empty`, `set_`, `storage_offset`, `size`, `stride`, `copy_`). The array
    is on the host already: its storage is itself, and both copies leave it where it is.
    """

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray):
        self.array = array

    @classmethod
    def copy_of(cls, array: Any) -> HostTensor:
        """A HostTensor of an aligned copy of `array` (the kernel may write to it)."""
        return cls(aligned_copy(np.asarray(array)))

    @property
    def dtype(self) -> ElementType:
        return ElementType(self.array.dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape

    def data_ptr(self) -> int:
        return self.array.ctypes.data

    def numel(self) -> int:
        return self.array.size

    def element_size(self) -> int:
        return self.array.itemsize

    def untyped_storage(self) -> HostTensor:
        return self

    def cpu(self) -> HostTensor:
        return self

    def new_empty(self, *_: Any, **__: Any) -> HostTensor:
        return HostTensor(self.array[:0])

    def set_(self, storage: HostTensor, offset: int, size: Any, stride: Any) -> HostTensor:
        # The interpreter makes a host view of `storage`; on the host that is the storage's array itself.
        if offset != 0 or tuple(size) != storage.array.shape:
            raise ValueError(f"HostTensor.set_: expected a whole view of the storage, got offset {offset}, "
                             f"size {tuple(size)} of an array of shape {storage.array.shape}")
        self.array = storage.array
        return self

    def storage_offset(self) -> int:
        return 0

    def size(self) -> tuple[int, ...]:
        return self.array.shape

    def stride(self) -> tuple[int, ...]:
        return tuple(s // self.array.itemsize for s in self.array.strides)

    def copy_(self, other: HostTensor) -> HostTensor:
        if other.data_ptr() != self.data_ptr():
            np.copyto(self.array, other.array)
        return self


_SCALARS = {"i1": (tl.int1, np.bool_), "i32": (tl.int32, np.int32), "u32": (tl.uint32, np.uint32),
            "i64": (tl.int64, np.int64), "u64": (tl.uint64, np.uint64), "fp32": (tl.float32, np.float32),
            "fp64": (tl.float64, np.float64)}


def scalar_argument(value: Any, name: str = "argument") -> Any:
    """A run-time scalar argument as the kernel receives it on a GPU: a scalar tensor of the type
    `signature.scalar_type` gives it (a float is float32, not a weakly typed Python number; a bool is int1,
    which Triton 3.7's interpreter cannot make of a Python bool), and an int equal to 1 the constant 1, as the
    compiled path specializes it. Raises ValueError for what the compiled path cannot pass."""
    from triton.runtime.interpreter import TensorHandle

    if signature.is_constant_one(value):
        return tl.constexpr(1)
    dtype, numpy_type = _SCALARS[signature.scalar_type(value, name)]
    return tl.tensor(TensorHandle(np.array([value], numpy_type), dtype), dtype)


def tensor_descriptor(base: HostTensor, block_shape, padding: str = "zero"):
    """Triton's host-side tensor descriptor of a whole dense row-major array (the interpreter's TMA load)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    shape = list(base.shape)
    strides = [int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(len(shape))]
    return TensorDescriptor(base, shape, strides, list(block_shape), padding=padding)


# ----------------------------------------------------------------------------- fixes


def _fix_bfloat16() -> None:
    """Casts to and from bfloat16 round to nearest even; `tl.dot` of bfloat16 tiles multiplies values; the
    builder makes bfloat16 constants (module docstring)."""
    from triton.runtime import interpreter as interp

    builder_cls = type(interp.interpreter_builder)
    if vars(builder_cls).get("_workbench_bfloat16"):
        return
    original_cast, original_fp_to_fp = builder_cls.cast_impl, builder_cls.create_fp_to_fp
    original_dot = builder_cls.create_dot
    original_binary, original_unary = builder_cls.binary_op, builder_cls.unary_op
    original_fma, original_clamp = builder_cls.create_fma, builder_cls.create_clampf
    bf16 = tl.bfloat16

    def values(handle) -> np.ndarray:
        return handle.data.view(ml_dtypes.bfloat16) if handle.dtype.scalar == bf16 else np.asarray(handle.data)

    def convert(src, dst_type):
        dst = dst_type.scalar
        data = values(src)
        out = data.astype(ml_dtypes.bfloat16).view(np.uint16) if dst == bf16 else \
            data.astype(interp._get_np_dtype(dst_type))
        return interp.TensorHandle(out, dst)

    def cast_impl(self, src, dst_type):
        floats = src.dtype.scalar.is_floating() and dst_type.scalar.is_floating()
        if floats and bf16 in (src.dtype.scalar, dst_type.scalar):
            return convert(src, dst_type)
        return original_cast(self, src, dst_type)

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        if bf16 in (src.dtype.scalar, dst_type.scalar):
            return convert(src, dst_type)
        return original_fp_to_fp(self, src, dst_type, rounding_mode)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if bf16 in (a.dtype.scalar, b.dtype.scalar):
            return interp.TensorHandle(rounded_product(values(a), values(b), d.data.dtype) + d.data, d.dtype.scalar)
        return original_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    def get_bf16(self, value):
        return interp.TensorHandle(np.array([value], np.float32).astype(ml_dtypes.bfloat16).view(np.uint16), bf16)

    def rounded(out, label):  # a float result as bfloat16 bits (round to nearest even), a comparison's as it is
        if out.dtype == np.bool_:
            return interp.TensorHandle(out, label)
        return interp.TensorHandle(np.asarray(out, np.float32).astype(ml_dtypes.bfloat16).view(np.uint16), bf16)

    # Elementwise arithmetic on bfloat16 operands, in float32 and rounded once to bfloat16 (what a GPU's
    # bfloat16 instructions give: float32 holds every product exactly, and rounding a float32 sum or
    # quotient again to bfloat16 equals rounding the exact one, float32 having more than 2 × 8 + 2 bits).
    def binary_op(self, lhs, rhs, op):
        if bf16 in (lhs.dtype.scalar, rhs.dtype.scalar):
            return rounded(op(values(lhs).astype(np.float32), values(rhs).astype(np.float32)), lhs.dtype.scalar)
        return original_binary(self, lhs, rhs, op)

    def unary_op(self, arg, op):
        if arg.dtype.scalar == bf16:
            return rounded(op(values(arg).astype(np.float32)), bf16)
        return original_unary(self, arg, op)

    def create_fma(self, x, y, z):
        if bf16 in (x.dtype.scalar, y.dtype.scalar, z.dtype.scalar):
            exact = values(x).astype(np.float64) * values(y).astype(np.float64) + values(z).astype(np.float64)
            return interp.TensorHandle(exact.astype(ml_dtypes.bfloat16).view(np.uint16), bf16)
        return original_fma(self, x, y, z)

    def create_clampf(self, arg, lo, hi, propagate_nans):
        if arg.dtype.scalar == bf16:
            clipped = np.clip(values(arg).astype(np.float32), values(lo).astype(np.float32),
                              values(hi).astype(np.float32))
            return rounded(clipped, bf16)
        return original_clamp(self, arg, lo, hi, propagate_nans)

    builder_cls.cast_impl = cast_impl
    builder_cls.create_fp_to_fp = create_fp_to_fp
    builder_cls.create_dot = create_dot
    builder_cls.get_bf16 = get_bf16
    builder_cls.binary_op, builder_cls.unary_op = binary_op, unary_op
    builder_cls.create_fma, builder_cls.create_clampf = create_fma, create_clampf
    for name in ("create_fp_ext", "create_fp_trunc"):
        setattr(builder_cls, name, lambda self, src, dst_type: self.cast_impl(src, dst_type))
    builder_cls._workbench_bfloat16 = True


def rounded_product(x: np.ndarray, y: np.ndarray, dtype) -> np.ndarray:
    """x @ y summed in float64 and rounded once to `dtype`: the same on every host, whatever order its BLAS adds
    in (module docstring, `_fix_dot_order`)."""
    return np.matmul(np.asarray(x, np.float64), np.asarray(y, np.float64)).astype(dtype)


def _fix_dot_order() -> None:
    """`tl.dot` of float16, float32 or float64 tiles as `rounded_product` (bfloat16 tiles: `_fix_bfloat16`'s dot,
    which takes it too; fp8 and integer tiles as the interpreter has them)."""
    from triton.runtime import interpreter as interp

    builder_cls = type(interp.interpreter_builder)
    if vars(builder_cls).get("_workbench_dot_order"):
        return
    original_dot = builder_cls.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        kinds = (a.data.dtype, b.data.dtype, d.data.dtype)
        if all(k in (np.float16, np.float32, np.float64) for k in kinds):
            return interp.TensorHandle(rounded_product(a.data, b.data, d.data.dtype) + d.data, d.dtype.scalar)
        return original_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    builder_cls.create_dot = create_dot
    builder_cls._workbench_dot_order = True


def _skip_nested_patches() -> None:
    """A `@triton.jit` helper called inside a running kernel skips re-patching the language modules the launch
    has patched already (module docstring); anything else patches as before."""
    from triton.runtime import interpreter as interp

    if getattr(interp, "_workbench_nested_patch", False):
        return
    original = interp._patch_lang
    active: list[set[int]] = []  # ids of the language modules patched by the running launch

    def languages(fn) -> set[int]:  # the modules interpreter._patch_lang patches for fn
        return {id(v) for v in fn.__globals__.values() if v is interp.tl or v is interp.tl.core}

    class _Nothing:
        def restore(self) -> None:
            pass

    def patch_lang(fn):
        if active:  # a kernel is running: this is a helper's call
            needed = languages(fn)
            if needed <= active[-1]:
                return _Nothing()
            active[-1] |= needed
            return original(fn)
        scope = original(fn)  # a launch (GridExecutor restores the scope when the kernel ends)
        active.append(languages(fn))
        restore = scope.restore

        def restore_and_close() -> None:
            active.pop()
            restore()

        scope.restore = restore_and_close
        return scope

    interp._patch_lang = patch_lang
    interp._workbench_nested_patch = True


def _unwrap_constant_tensors() -> None:
    """A `tl.constexpr` that holds a tensor is that tensor (module docstring)."""
    from triton.runtime import interpreter as interp

    semantic = interp.interpreter_semantic
    if getattr(semantic, "_workbench_constexpr", False):
        return
    to_tensor = semantic.to_tensor

    def unwrapping(x, *rest, **named):
        if isinstance(x, tl.constexpr) and isinstance(x.value, tl.tensor):
            x = x.value
        return to_tensor(x, *rest, **named)

    semantic.to_tensor = unwrapping  # this instance only: the compiler's semantics are untouched
    semantic._workbench_constexpr = True


# ----------------------------------------------------------------------------- address checks

CHECK_BOUNDS_VARIABLE = "WORKBENCH_CHECK_BOUNDS"


class OutOfBoundsError(IndexError):
    """A kernel running in the interpreter touched memory outside every buffer it was given."""


def check_bounds_enabled() -> bool:
    """Whether the interpreter checks every address a kernel loads or stores (`WORKBENCH_CHECK_BOUNDS=1`)."""
    value = os.environ.get(CHECK_BOUNDS_VARIABLE, "0")
    if value not in ("0", "1", ""):
        raise ValueError(f"{CHECK_BOUNDS_VARIABLE}: expected 0 or 1, got {value!r}")
    return value == "1"


class Buffers:
    """The byte ranges of one launch's arguments and outputs, for checking addresses against them."""

    def __init__(self, kernel: str, tensors: Mapping[str, HostTensor]):
        spans = sorted((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size(), name)
                       for name, t in tensors.items() if t.numel() > 0)
        self.kernel = kernel
        self.starts = np.array([a for a, _, _ in spans], np.uint64)
        self.ends = np.array([b for _, b, _ in spans], np.uint64)
        self.names = [n for _, _, n in spans]
        self.empty = sorted(name for name, t in tensors.items() if t.numel() == 0)

    def check(self, what: str, ptrs, mask) -> None:
        """Raise OutOfBoundsError if an element at `ptrs` (interpreter TensorHandle) where `mask` holds
        does not lie wholly inside one buffer."""
        element = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
        addresses = np.asarray(ptrs.data, np.uint64)
        mask = mask if mask is None or isinstance(mask, np.ndarray) else mask.data
        where = None if mask is None else np.broadcast_to(np.asarray(mask, bool), addresses.shape)
        if where is not None and not where.any():
            return
        # fast path: the lowest and highest address lie in one buffer (so does everything between)
        low = np.min(addresses, where=where, initial=np.iinfo(np.uint64).max) if where is not None else addresses.min()
        high = np.max(addresses, where=where, initial=0) if where is not None else addresses.max()
        i = int(np.searchsorted(self.starts, low, side="right")) - 1
        if i >= 0 and high + np.uint64(element) <= self.ends[i]:
            return
        addresses = (addresses if where is None else addresses[where]).ravel()
        i = np.searchsorted(self.starts, addresses, side="right").astype(np.int64) - 1
        inside = (i >= 0) & (addresses + np.uint64(element) <= self.ends[np.maximum(i, 0)]) if len(self.starts) \
            else np.zeros(addresses.shape, bool)
        if inside.all():
            return
        bad = addresses[~inside]
        raise OutOfBoundsError(f"{self.kernel}: {what} of {bad.size} element(s) of {element} byte(s) outside every "
                               f"buffer, e.g. {'; '.join(self._describe(int(a), element) for a in bad[:3])}"
                               + (f" (zero-size arguments: {', '.join(self.empty)})" if self.empty else ""))

    def _describe(self, address: int, element: int) -> str:
        """The address as an element offset from the start of the nearest buffer."""
        if not self.names:
            return f"address {address:#x} (no buffer has any bytes)"
        distance = [max(int(a) - address, address - int(b) + 1, 0) for a, b in zip(self.starts, self.ends)]
        i = int(np.argmin(distance))
        start, end = int(self.starts[i]), int(self.ends[i])
        return (f"element offset {(address - start) // element:+d} of '{self.names[i]}' "
                f"({(end - start) // element} elements)")


_CHECKED: Buffers | None = None  # the running launch's buffers while addresses are checked


def _check_memory_ops() -> None:
    """Every load, store and atomic: its mask as booleans, and (while `_CHECKED` is set) its addresses checked.

    Masks: the interpreter's comparisons return booleans labelled with the operands' integer type, so a
    scalar condition broadcast against a tile (`(o < K) & (i < n)`) becomes an int32 mask; Triton 3.9.0's
    native load and store then fail with `ValueError: mask has unsupported dtype` (3.7.1 and 3.8.0 accepted
    it). A GPU reads the mask as booleans, and so does this."""
    from triton.runtime import interpreter as interp

    builder_cls = type(interp.interpreter_builder)
    if vars(builder_cls).get("_workbench_memory_ops"):
        return
    load, store = builder_cls.create_masked_load, builder_cls.create_masked_store
    rmw, cas = builder_cls.create_atomic_rmw, builder_cls.create_atomic_cas

    def boolean(mask):  # a TensorHandle, or (3.7.1's descriptor loads) a bare NumPy array
        if isinstance(mask, np.ndarray):
            return mask if mask.dtype == np.bool_ else mask.astype(np.bool_)
        if mask is None or mask.data.dtype == np.bool_:
            return mask
        return interp.TensorHandle(mask.data.astype(np.bool_), tl.int1)

    # Positional arguments as every release since 3.6 has them (3.9 merged the cache arguments after `mask`).
    def create_masked_load(self, ptrs, mask, *rest, **named):
        if _CHECKED is not None:
            _CHECKED.check("load", ptrs, mask)
        return load(self, ptrs, boolean(mask), *rest, **named)

    def create_masked_store(self, ptrs, value, mask, *rest, **named):
        if _CHECKED is not None:
            _CHECKED.check("store", ptrs, mask)
        return store(self, ptrs, value, boolean(mask), *rest, **named)

    def create_atomic_rmw(self, rmwOp, ptr, val, mask, *rest, **named):
        if _CHECKED is not None:
            _CHECKED.check("atomic", ptr, mask)
        return rmw(self, rmwOp, ptr, val, boolean(mask), *rest, **named)

    def create_atomic_cas(self, ptr, *rest, **named):
        if _CHECKED is not None:
            _CHECKED.check("atomic", ptr, None)
        return cas(self, ptr, *rest, **named)

    builder_cls.create_masked_load = create_masked_load
    builder_cls.create_masked_store = create_masked_store
    builder_cls.create_atomic_rmw = create_atomic_rmw
    builder_cls.create_atomic_cas = create_atomic_cas
    builder_cls._workbench_memory_ops = True


FIXES = {"bfloat16": _fix_bfloat16, "dot_order": _fix_dot_order, "constexpr_tensors": _unwrap_constant_tensors,
         "nested_patches": _skip_nested_patches, "memory_ops": _check_memory_ops}
"""What `install` applies, by name (tests/test_interpreter.py checks each is still needed)."""


def install() -> None:
    """Apply every fix (idempotent). Called by the launcher when kernels run in the interpreter."""
    for fix in FIXES.values():
        fix()


# ----------------------------------------------------------------------------- one launch

_LOCK = threading.Lock()


@contextlib.contextmanager
def checking(buffers: Buffers | None) -> Iterator[None]:
    """Check addresses against `buffers` while the block runs (None: no checks)."""
    global _CHECKED
    _CHECKED = buffers
    try:
        yield
    finally:
        _CHECKED = None


def run(fn, grid: tuple[int, ...], args: list[Any], meta: Mapping[str, Any], check: bool = False) -> None:
    """Run the interpreted `fn` on `grid` with positional `args` (HostTensors, descriptors, typed scalars) and
    keyword `meta` (constexprs), one kernel at a time: the interpreter keeps global state (the builder's grid
    index, its AST cache), and XLA runs the host callbacks of several devices on parallel threads."""
    tensors = {name: a for name, a in zip(fn.arg_names, args) if isinstance(a, HostTensor)}
    tensors.update({f"{name} (descriptor)": a.base for name, a in zip(fn.arg_names, args)
                    if isinstance(getattr(a, "base", None), HostTensor)})
    with _LOCK, np.errstate(over="ignore"):  # integer arithmetic wraps on a GPU (hashes rely on it)
        with checking(Buffers(fn.__name__, tensors) if check else None):
            fn[grid](*args, **meta)

"""How a kernel's arguments are typed for Triton, the same way on every path (compiled, interpreted, sm_90 check).

A JAX array is a pointer to its element type (`*bf16`, `*fp32`, ...), aligned to 16 bytes (XLA's buffers
are). A Python scalar is a run-time argument of the type Triton's own launcher gives it: `bool` → `i1`,
`int` → `i32` (`u32`, `i64`, `u64` when it does not fit), `float` → `fp32` (`fp64` beyond float32's
range, as a NumPy float64); NumPy integers as ints, a NumPy float32 as `fp32` (the scalar types a launch
can carry: no 8- or 16-bit scalars). An `int` equal to 1 is specialised to the constant 1,
and `None` to the constant None, as Triton's launcher does. Anything else is a `ValueError` naming the
argument: a kernel must not see a scalar typed one way on a GPU and another in the interpreter.

A `TensorDescriptor` is a host-made TMA descriptor of a whole array (Triton ≥ 3.8): the kernel reads and
writes `block_shape` boxes of it with `desc.load([i, j])` / `desc.store([i, j], tile)`, Hopper's copy engine
on a GPU, the interpreter's emulation of it on a CPU.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from typing import Any

import jax
import numpy as np

ELEMENT_TYPES = {"bool": "i1", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8",
                 "uint16": "u16", "uint32": "u32", "uint64": "u64", "float16": "fp16", "bfloat16": "bf16",
                 "float32": "fp32", "float64": "fp64"}
"""NumPy/JAX dtype name → Triton's element type name."""

_FLOAT32_MAX = float(np.finfo(np.float32).max)
_FLOAT32_TINY = float(np.finfo(np.float32).tiny)


def is_array(a: Any) -> bool:
    """Whether a kernel argument is an array (concrete, traced or abstract), not a scalar (NumPy's included)."""
    return hasattr(a, "shape") and hasattr(a, "dtype") and not isinstance(a, (bool, int, float, np.generic))


def unwritten(dtype: Any) -> Any:
    """What an output element holds when the kernel does not write it (outputs start so, on both paths, unless
    zeroed): NaN for floats, the minimum for integers (loud), False for booleans."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return False
    return np.iinfo(dtype).min if np.issubdtype(dtype, np.integer) else np.nan


def element_type(dtype: Any, name: str = "argument") -> str:
    """Triton's name of an array's element type (`dtype`: anything `np.dtype` reads, bfloat16 included)."""
    key = np.dtype(dtype).name
    if key not in ELEMENT_TYPES:
        raise ValueError(f"{name}: arrays of dtype {key} cannot be passed to a Triton kernel "
                         f"(supported: {', '.join(ELEMENT_TYPES)})")
    return ELEMENT_TYPES[key]


def pointer_type(dtype: Any, name: str = "argument") -> str:
    """The signature entry of an array argument: `*` and its element type."""
    return "*" + element_type(dtype, name)


def scalar_type(value: Any, name: str = "argument") -> str:
    """The signature entry of a run-time scalar argument (module docstring)."""
    if isinstance(value, (bool, np.bool_)):
        return "i1"
    if isinstance(value, (int, np.integer)):
        value = int(value)
        for kind, low, high in (("i32", -2**31, 2**31), ("u32", 2**31, 2**32), ("i64", -2**63, 2**63),
                                ("u64", 2**63, 2**64)):
            if low <= value < high:
                return kind
        raise ValueError(f"{name}: integer {value} does not fit in 64 bits")
    if isinstance(value, np.floating) and value.dtype != np.float64:
        if value.dtype != np.float32:
            raise ValueError(f"{name}: a scalar of dtype {value.dtype} cannot be passed to a Triton kernel; pass a "
                             "Python float (float32 on the kernel's side)")
        return "fp32"
    if isinstance(value, float):  # a NumPy float64 too
        magnitude = abs(value)
        if math.isnan(value) or math.isinf(value) or magnitude == 0.0 or _FLOAT32_TINY <= magnitude <= _FLOAT32_MAX:
            return "fp32"
        return "fp64"
    raise ValueError(f"{name}: a {type(value).__name__} ({value!r}) cannot be passed to a Triton kernel as a "
                     "run-time argument; pass an array, a bool, an int or a float (or make the parameter a "
                     "tl.constexpr)")


def is_constant_one(value: Any) -> bool:
    """Whether a scalar argument is compiled as the constant 1 (an int, not a bool, equal to 1)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and value == 1


def unwrap(kernel) -> tuple[Any, list[Any], Any]:
    """Split an autotune/heuristics stack into (autotuner or None, [heuristics rules, outermost first], the
    jitted function)."""
    from triton.runtime.autotuner import Autotuner, Heuristics

    tuner = kernel if isinstance(kernel, Autotuner) else None
    fn = kernel.fn if tuner is not None else kernel
    rules = []
    while isinstance(fn, Heuristics):
        rules.append(fn.values)
        fn = fn.fn
    if isinstance(fn, Autotuner):
        raise ValueError("kernel: put @triton.autotune outermost, above @triton.heuristics")
    return tuner, rules, fn


def constexpr_defaults(fn) -> dict[str, Any]:
    """The declared defaults of a `@triton.jit` function's `tl.constexpr` parameters."""
    names = constexpr_names(fn)
    parameters = inspect.signature(getattr(fn, "fn", fn)).parameters
    return {name: p.default for name, p in parameters.items()
            if name in names and p.default is not inspect.Parameter.empty}


def constexpr_names(fn) -> set[str]:
    """The parameters of a `@triton.jit` function annotated `tl.constexpr` (compiled or interpreted)."""
    import triton.language as tl

    params = getattr(fn, "params", None)
    if params is not None and all(hasattr(p, "is_constexpr") for p in params):
        return {p.name for p in params if p.is_constexpr}
    signature = inspect.signature(getattr(fn, "fn", fn))
    return {name for name, p in signature.parameters.items()
            if p.annotation is tl.constexpr or "constexpr" in str(p.annotation)}


HOST_DESCRIPTORS_SINCE = (3, 8, 0)
"""The first Triton release whose host-made tensor descriptors workbench launches (on a GPU and in the
interpreter alike)."""


def triton_version() -> tuple[int, ...]:
    """The installed Triton's release as a tuple of ints (3, 9, 0)."""
    import triton

    return tuple(int("".join(c for c in part if c.isdigit()) or 0)
                 for part in triton.__version__.split("+")[0].split(".")[:3])


@dataclasses.dataclass(frozen=True)
class TensorDescriptor:
    """A TMA descriptor of the whole dense, row-major array `base`, made on the host, for `triton_call`.

    The kernel takes it where it would take a pointer and reads or writes `block_shape` boxes with
    `desc.load([i, j, ...])` / `desc.store([...], tile)` (offsets in elements); rows and columns past the
    array read as 0 (`padding="zero"`) or NaN (`"nan"`, floating arrays only) and are not written. Each block
    dimension is a power of two, and a row of `base` (the stride of its second-to-last dimension) must be a
    multiple of 16 bytes, as TMA requires. Needs Triton ≥ 3.8.
    """

    base: Any
    block_shape: tuple[int, ...]
    padding: str = "zero"

    def __post_init__(self):
        if not (hasattr(self.base, "shape") and hasattr(self.base, "dtype")):
            return  # JAX rebuilding the pytree around a placeholder leaf (an axis spec, a sentinel)
        if triton_version() < HOST_DESCRIPTORS_SINCE:
            raise ValueError(f"TensorDescriptor: host-made tensor descriptors need Triton >= "
                             f"{'.'.join(map(str, HOST_DESCRIPTORS_SINCE))} (installed: "
                             f"{'.'.join(map(str, triton_version()))}); pass the array and load it with pointers")
        shape, block = tuple(self.base.shape), tuple(int(b) for b in self.block_shape)
        object.__setattr__(self, "block_shape", block)
        where = f"base {shape} {np.dtype(self.base.dtype).name}, block_shape {block}"
        if not 1 <= len(shape) <= 5 or len(block) != len(shape):
            raise ValueError(f"TensorDescriptor: base must have 1 to 5 dimensions and block_shape one entry per "
                             f"dimension ({where})")
        if any(b < 1 or b & (b - 1) for b in block):
            raise ValueError(f"TensorDescriptor: every block_shape entry must be a power of two ({where})")
        if any(d == 0 for d in shape):
            raise ValueError(f"TensorDescriptor: base must not be empty ({where})")
        itemsize = np.dtype(self.base.dtype).itemsize
        if any(stride * itemsize % 16 for stride in self.strides[:-1]):
            raise ValueError(f"TensorDescriptor: every row must be a multiple of 16 bytes, as TMA requires "
                             f"({where}: rows of {self.strides[-2] * itemsize if len(shape) > 1 else 0} bytes)")
        if self.padding not in ("zero", "nan"):
            raise ValueError(f"TensorDescriptor: padding must be 'zero' or 'nan', got {self.padding!r}")
        if self.padding == "nan" and not np.issubdtype(np.dtype(self.base.dtype), np.floating) \
                and np.dtype(self.base.dtype).name != "bfloat16":
            raise ValueError(f"TensorDescriptor: padding='nan' needs a floating array ({where})")
        element_type(self.base.dtype, "TensorDescriptor base")

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.base.shape)

    @property
    def strides(self) -> tuple[int, ...]:
        """In elements, dense row-major."""
        shape = self.shape
        return tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))

    @property
    def type_name(self) -> str:
        """The signature entry Triton gives such a descriptor."""
        return f"tensordesc<{element_type(self.base.dtype)}[{', '.join(map(str, self.block_shape))}]>"


jax.tree_util.register_dataclass(TensorDescriptor, data_fields=["base"], meta_fields=["block_shape", "padding"])

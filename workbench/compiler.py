"""Triton's NVIDIA compiler run stage by stage on a kernel and its signature; no GPU needed.

The GPU launcher (`workbench.gpu_call`) compiles to PTX here and hands the PTX to XLA, which assembles and
loads it; the sm_90 check (`workbench.compile_check`) compiles the same way to a cubin. Both build the
kernel's `triton.compiler.ASTSource` with `source` (arrays 16-byte aligned, as XLA's buffers are) and run
the stages the backend declares (`add_stages`: ttir, ttgir, llir, ptx, cubin), as `triton.compile` does,
stopping at the one asked for: `triton.compile` always runs them all, and a kernel handed to XLA as PTX
would then be assembled twice.

`Compiled` keeps what a launch needs from the metadata the stages fill in: the kernel's name, its shared
memory, the warps it runs (a warp-specialized kernel runs more than it was compiled with: Triton sets
`num_warps` to the sum of its partitions'), its global scratch (tensor descriptors made on the device),
and the layout of its host-made tensor descriptors (`tensordesc_meta`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

STAGES = ("ttir", "ttgir", "llir", "ptx", "cubin")  # Triton's NVIDIA pipeline, in order


@dataclasses.dataclass(frozen=True)
class Compiled:
    """A kernel compiled up to some stage, and what its launch needs."""

    name: str
    binary: Any  # the last stage's output: PTX text, a cubin's bytes, or an IR module
    ttir: str  # the kernel's IR before any pass
    shared: int  # bytes of shared memory per block
    num_warps: int  # warps per block the kernel runs
    global_scratch_size: int = 0  # bytes per program (descriptors made on the device)
    global_scratch_align: int = 1
    profile_scratch_size: int = 0
    tensordesc_meta: tuple = ()  # one dict per host-made tensor descriptor argument

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> Compiled:
        """The inverse of `as_json` (KeyError or TypeError for an entry that is not one)."""
        fields = {name: entry[name] for name in cls.__dataclass_fields__}
        fields["tensordesc_meta"] = tuple(dict(m) for m in fields["tensordesc_meta"])
        return cls(**fields)


def is_gluon(fn) -> bool:
    """Whether `fn` is a Gluon kernel (`triton.experimental.gluon.jit`): written against the GPU's own layouts,
    barriers and warp groups, compiled from its own IR, and never run by Triton's interpreter."""
    return bool(getattr(fn, "is_gluon", lambda: False)())


def source(fn, signature: Mapping[str, str], constexprs: Mapping[str, Any]):
    """The kernel's `ASTSource` (Gluon's `GluonASTSource` for a Gluon kernel): every pointer argument declared
    16-byte aligned (`tt.divisibility` 16), which lets the compiler vectorise its accesses; XLA's buffers are
    aligned so."""
    from triton.compiler import ASTSource

    attrs = {(fn.arg_names.index(name),): [["tt.divisibility", 16]]
             for name, kind in signature.items() if kind.startswith("*")}
    make = ASTSource
    if is_gluon(fn):
        import triton
        from triton.experimental import gluon

        make = getattr(gluon, "GluonASTSource", None)
        if make is None:
            raise ValueError(f"kernel: {fn.__name__} is a Gluon kernel, which workbench compiles with Triton 3.9 or "
                             f"later (its public GluonASTSource); this is Triton {triton.__version__}")
    return make(fn=fn, signature=dict(signature), constexprs=dict(constexprs), attrs=attrs)


def compiles_gluon() -> bool:
    """Whether this Triton compiles Gluon kernels through workbench: 3.9 and later, whose `GluonASTSource` is
    public (`source`)."""
    from triton.experimental import gluon

    return hasattr(gluon, "GluonASTSource")


def compile_kernel(fn, signature: Mapping[str, str], constexprs: Mapping[str, Any], *, num_warps: int,
                   num_stages: int, num_ctas: int = 1, capability: int = 90, last: str = "ptx",
                   maxnreg: int | None = None) -> Compiled:
    """Compile `fn` (a `triton.JITFunction`, Triton's or Gluon's) for `sm_<capability>` up to stage `last` (STAGES);
    `maxnreg` caps the registers per thread (PTX `.maxnreg`; a warp-specialized kernel divides them between its
    partitions from there)."""
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    if last not in STAGES:
        raise ValueError(f"last: expected one of {', '.join(STAGES)}, got {last!r}")
    src = source(fn, signature, constexprs)
    target = GPUTarget("cuda", capability, 32)
    backend = make_backend(target)
    # fused multiply-adds on, as jax-triton and Triton's own launcher (up to 3.9) compile: explicit, so that
    # Triton 3.10's new default (off) changes nothing here
    limit = {} if maxnreg is None else {"maxnreg": int(maxnreg)}
    options = backend.parse_options({"num_warps": num_warps, "num_stages": num_stages, "num_ctas": num_ctas,
                                     "enable_fp_fusion": True, **limit, **src.parse_options()})
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    module = src.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(),
                         context)
    ttir = str(module)
    stages: dict[str, Any] = {}
    backend.add_stages(stages, options, src.language)
    metadata: dict[str, Any] = {"hash": src.hash(), "target": target, **options.__dict__}
    for name, stage in stages.items():
        module = stage(module, metadata)
        if name == last:
            break
    return Compiled(name=metadata.get("name", fn.__name__), binary=module, ttir=ttir,
                    shared=int(metadata.get("shared") or 0), num_warps=int(metadata.get("num_warps") or num_warps),
                    global_scratch_size=int(metadata.get("global_scratch_size") or 0),
                    global_scratch_align=int(metadata.get("global_scratch_align") or 1),
                    profile_scratch_size=int(metadata.get("profile_scratch_size") or 0),
                    tensordesc_meta=tuple(dict(m) for m in metadata.get("tensordesc_meta") or ()))

"""Compile every kernel launch for a Hopper GPU (sm_90) on a machine without one.

Triton's interpreter (the CPU path) runs a kernel's Python source with NumPy: it never builds the
kernel's IR, so code the compiler rejects can pass every CPU test. Two such failures reached a GPU:
a loop-carried variable whose type changed inside the loop, and code after a static `if ...: return`
that the compiler builds too (with the placeholder of an absent argument). Both are caught here.

How: `record()` collects, while an op is traced on the CPU (`jax.eval_shape` is enough: no kernel
runs), every `launch.triton_call` as the GPU launcher would see it — argument dtypes, scalars,
meta-parameters, and for an autotuned kernel every candidate config (`autotune.candidates`, the same
pruning as on a GPU) with its `@triton.heuristics` flags. `compile_all` then builds each distinct
(kernel, signature, constexprs, warps, stages) with `triton.compile` for `GPUTarget("cuda", 90, 32)`
in a child process that imports workbench with compiled (not interpreted) Triton; Triton's own
compiler and `ptxas` need no GPU. What it cannot see: run-time faults, resource limits of the real
device (shared memory per block is checked at launch), and jax-triton's argument specialisation
(pointer alignment), which changes the generated code but not whether it compiles.

    python -m workbench.compile_check specs.json [STAGE]   # the child: one JSON line per failure
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

TARGET = ("cuda", 90, 32)  # Hopper: compute capability 9.0, warp size 32
SHARED_LIMIT = 232448  # bytes of shared memory one block may ask on an H100 or H200 (227 KiB); more fails to launch


_POINTER = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64", "int8": "i8",
            "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8", "uint32": "u32", "uint64": "u64",
            "bool": "i1"}


@contextlib.contextmanager
def record(all_configs: bool = False) -> Iterator[list[dict[str, Any]]]:
    """Collect the compile specs of every `triton_call` traced inside the block (interpreter path): for an
    autotuned kernel the candidates the GPU autotuner would time, or with `all_configs` every config
    that agrees with the call's meta-parameters (the kernel's pruning skipped). It observes the launcher
    (`launch.observing`)."""
    from . import launch

    specs: list[dict[str, Any]] = []
    with launch.observing(lambda seen: specs.extend(launch_specs(seen, all_configs))):
        yield specs


def _kernel_address(kernel, fn) -> tuple[str, str]:
    """(module, attribute) under which `kernel` (the launched object, autotuner included) is importable."""
    module = sys.modules[fn.fn.__module__]
    for name, value in vars(module).items():
        if value is kernel:
            return module.__name__, name
    raise ValueError(f"compile_check: kernel {fn.fn.__name__} is not a module attribute of {module.__name__}")


def _constexpr_names(fn) -> set[str]:
    """Arguments annotated `tl.constexpr` (the interpreter's function keeps no list of them)."""
    import inspect

    import triton.language as tl

    if hasattr(fn, "constexprs"):
        return {fn.arg_names[i] for i in fn.constexprs}
    params = inspect.signature(fn.fn).parameters
    return {name for name, p in params.items()
            if p.annotation is tl.constexpr or "constexpr" in str(p.annotation)}


def _scalar_type(value: Any) -> str:
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -2 ** 31 <= value < 2 ** 31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"compile_check: cannot type scalar argument {value!r}")


def launch_specs(seen, all_configs: bool = False) -> list[dict[str, Any]]:
    """The compile specs of one launch (`launch.Launch`): one per candidate config (see `record`)."""
    import jax
    from triton.runtime.autotuner import Autotuner

    from . import autotune, launch

    kernel, args, out_shapes, metaparams = seen.kernel, seen.args, seen.out_shapes, seen.metaparams
    num_warps, num_stages = seen.num_warps, seen.num_stages
    tuner, rules, fn = launch.unwrap(kernel)
    values = [jax.ShapeDtypeStruct(tuple(a.shape), a.dtype) if autotune.is_array(a) else a for a in args]
    named = dict(zip(fn.arg_names, [*values, *out_shapes]))
    if not isinstance(tuner, Autotuner):
        configs = [None]
    elif all_configs:
        configs = [c for c in tuner.configs if all(c.kwargs.get(k, v) == v for k, v in metaparams.items())]
    else:
        configs = autotune.candidates(tuner, named, metaparams)
    module, attribute = _kernel_address(kernel, fn)
    constexpr_names = _constexpr_names(fn)
    specs = []
    for config in configs:
        meta = {**metaparams, **(config.kwargs if config is not None else {})}
        scope = {**named, **meta}
        for values_ in rules:  # outermost first, as Triton runs them: inner rules see the outer flags
            for flag, rule in values_.items():
                scope[flag] = meta[flag] = rule(scope)
        signature, constexprs = {}, {}
        for name in fn.arg_names:
            if name in constexpr_names:
                if name not in scope:
                    raise ValueError(f"compile_check: {attribute}: no value for constexpr {name}")
                value = scope[name]
                signature[name], constexprs[name] = "constexpr", value
            elif name in named and autotune.is_array(named[name]):
                signature[name] = "*" + _POINTER[jax.numpy.dtype(named[name].dtype).name]
            else:
                signature[name] = _scalar_type(scope[name])
        warps = config.num_warps if config is not None else (num_warps or 4)
        stages = config.num_stages if config is not None else (num_stages or 3)
        specs.append({"module": module, "kernel": attribute, "signature": signature,
                      "constexprs": constexprs, "num_warps": warps, "num_stages": stages})
    return specs


def distinct(specs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each spec once (two launches of the same kernel, dtypes, constexprs and config compile alike)."""
    seen, out = set(), []
    for spec in specs:
        key = json.dumps(spec, sort_keys=True, default=repr)
        if key not in seen:
            seen.add(key)
            out.append(dict(spec))
    return out


STAGES = ("ttir", "ttgir", "llir", "ptx", "cubin")  # Triton's NVIDIA pipeline, in order


def _source(spec: Mapping[str, Any]):
    """The kernel's `ASTSource`, its array arguments 16-byte aligned as jax-triton declares them
    (`tt.divisibility` 16: JAX's buffers are aligned), which lets the compiler vectorise their accesses."""
    import triton
    from triton.compiler import ASTSource

    fn = getattr(importlib.import_module(spec["module"]), spec["kernel"])
    while not isinstance(fn, triton.runtime.jit.JITFunction):
        fn = fn.fn
    signature = dict(spec["signature"])
    attrs = {(fn.arg_names.index(name),): [["tt.divisibility", 16]]
             for name, kind in signature.items() if kind.startswith("*")}
    return ASTSource(fn=fn, signature=signature, constexprs=dict(spec["constexprs"]), attrs=attrs)


def _compile_one(spec: Mapping[str, Any], last: str):
    """Triton's own pipeline (`triton.compile`, without its cache) from the kernel's source up to stage
    `last`: "ttir" is the front end (where type errors are found), "cubin" runs ptxas too. Returns that
    stage's module (IR) or binary."""
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    source = _source(spec)
    target = GPUTarget(*TARGET)
    backend = make_backend(target)
    options = backend.parse_options({"num_warps": spec["num_warps"], "num_stages": spec["num_stages"],
                                     **source.parse_options()})
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    module = source.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(),
                            context)
    stages: dict[str, Any] = {}
    backend.add_stages(stages, options, source.language)
    metadata = {"hash": "0" * 64, "target": target, **options.__dict__}
    for name, stage in stages.items():
        module = stage(module, metadata)
        if name == last:
            return module
    raise ValueError(f"compile_check: no stage {last!r} in {list(stages)}")


_SASS_COUNTS = ("HGMMA", "HMMA", "LDL", "STL", "MUFU.EX2", "BAR")


def _resources(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Compile to a cubin and read what the compiler made of it with the cuobjdump and nvdisasm that come
    with Triton: registers per thread, stack bytes (spills), shared memory, and counts of a few SASS
    instructions (HGMMA: Hopper's warpgroup MMA; LDL/STL: local-memory spill traffic)."""
    import re
    import subprocess
    import tempfile

    import triton
    from triton.backends.compiler import GPUTarget

    compiled = triton.compile(_source(spec), target=GPUTarget(*TARGET),
                              options={"num_warps": spec["num_warps"], "num_stages": spec["num_stages"]})
    tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        usage = subprocess.run([os.path.join(tools, "cuobjdump"), "--dump-resource-usage", f.name],
                               capture_output=True, text=True, check=True).stdout
        sass = subprocess.run([os.path.join(tools, "nvdisasm"), "-c", f.name],
                              capture_output=True, text=True, check=True).stdout
    field = lambda name: int(re.search(rf"{name}:(\d+)", usage).group(1))  # noqa: E731
    ops = re.findall(r"\b(" + "|".join(re.escape(op) for op in _SASS_COUNTS) + r")\b", sass)
    return {"registers": field("REG"), "stack": field("STACK"), "shared": compiled.metadata.shared,
            **{op: ops.count(op) for op in _SASS_COUNTS}}


def _child(path: str, last: str) -> int:
    """Compile every spec of the JSON file to stage `last`; one JSON line per failure, then a summary."""
    specs = json.loads(open(path).read())
    failed = 0
    start = time.perf_counter()
    for spec in specs:
        try:
            if last == "resources":
                print(json.dumps({"spec": spec, "resources": _resources(spec)}, default=repr), flush=True)
            else:
                _compile_one(spec, last)
        except Exception as exc:  # noqa: BLE001 - every failure is reported, not raised
            failed += 1
            print(json.dumps({"spec": spec, "error": f"{type(exc).__name__}: {exc}"}, default=repr), flush=True)
    print(json.dumps({"compiled": len(specs) - failed, "failed": failed,
                      "seconds": round(time.perf_counter() - start, 1)}), flush=True)
    return 1 if failed else 0


def compile_all(specs: Sequence[Mapping[str, Any]], *, last: str = "cubin", workers: int = 1,
                timeout: float = 1200.0, folder: str | None = None) -> dict[str, Any]:
    """Compile the distinct specs for sm_90 up to stage `last` (STAGES) in `workers` child processes
    (compiled Triton, no GPU needed).

    `last="resources"` compiles to a cubin and adds each spec's `_resources` under "resources".
    Returns {"compiled": n, "failed": [{"spec", "error"}, ...], "resources": [{"spec", "resources"}, ...],
    "seconds": wall}."""
    import tempfile

    if last not in (*STAGES, "resources"):
        raise ValueError(f"last: expected one of {', '.join(STAGES)} or resources, got {last!r}")
    specs = distinct(specs)
    folder = folder or tempfile.mkdtemp(prefix="workbench-compile-check-")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["WORKBENCH_INTERPRET"] = "0"
    env["TRITON_CACHE_DIR"] = os.path.join(folder, "triton-cache")  # triton.compile needs one ($HOME may not)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    parts = [specs[i::workers] for i in range(workers)]
    procs = []
    start = time.perf_counter()
    for i, part in enumerate(parts):
        path = os.path.join(folder, f"specs-{i}.json")
        with open(path, "w") as f:
            json.dump(part, f)
        procs.append(subprocess.Popen([sys.executable, "-m", "workbench.compile_check", path, last], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    failures, compiled, resources = [], 0, []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=max(1.0, timeout - (time.perf_counter() - start)))
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise TimeoutError(f"compile_check: children still compiling after {timeout:.0f} s") from None
        lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        if not lines or "compiled" not in lines[-1]:
            raise RuntimeError(f"compile_check: a child ended without a summary (exit {proc.returncode}):\n"
                               f"{err[-4000:]}")
        failures += [line for line in lines[:-1] if "error" in line]
        resources += [line for line in lines[:-1] if "resources" in line]
        compiled += lines[-1]["compiled"]
    return {"compiled": compiled, "failed": failures, "resources": resources,
            "seconds": round(time.perf_counter() - start, 1)}


def describe(failure: Mapping[str, Any]) -> str:
    spec = failure["spec"]
    config = {k: v for k, v in spec["constexprs"].items() if k.startswith("B")}
    return (f"{spec['module']}.{spec['kernel']} {config} warps={spec['num_warps']} stages={spec['num_stages']}: "
            f"{failure['error'].splitlines()[-1] if failure['error'] else ''}\n{failure['error']}")


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "cubin"))

"""Compile every kernel launch for a Hopper GPU (sm_90) on a machine without one.

Triton's interpreter (the CPU path) runs a kernel's Python source with NumPy: it never builds the
kernel's IR, so code the compiler rejects can pass every CPU test. Two such failures reached a GPU:
a loop-carried variable whose type changed inside the loop, and code after a static `if ...: return`
that the compiler builds too (with the placeholder of an absent argument). Both are caught here.

How: `record()` collects, while an op is traced on the CPU (`jax.eval_shape` is enough: no kernel
runs), every `launch.triton_call` bound as the GPU launcher binds it (`gpu_call.Bound`: the signature,
the constants, the `@triton.heuristics` flags), and for an autotuned kernel every candidate config
(`autotune.candidates`, the same pruning as on a GPU). `compile_all` then builds each distinct (kernel,
signature, constexprs, warps, stages) with `compiler.compile_kernel` for sm_90 in a child process that
imports workbench with compiled (not interpreted) Triton: the same compile the GPU launcher runs, up to a
cubin (Triton's compiler and `ptxas` need no GPU). What it cannot see: run-time faults and the resource
limits of the real device (shared memory per block is checked at launch).

The same children serve `workbench tune --compile-workers` on a GPU machine: `precompile` compiles a tuning's
candidates to PTX all at once, into the compiled-kernel store under the keys `gpu_call.compiled` looks up, before
the autotuner times them one by one (`autotune.precompiling`, which the harness installs).

    python -m workbench.compile_check specs.json [STAGE [SASS_DIR | STORE]]   # the child: one JSON line per failure
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

CAPABILITY = 90  # Hopper (H100, H200)
PRECOMPILE_TIMEOUT = 300.0  # seconds for one kernel's candidates (`precompile`); past it the tuner compiles them
SHARED_LIMIT = 232448  # bytes of shared memory one block may ask on an H100 or H200 (227 KiB); more fails to launch


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


def launch_specs(seen, all_configs: bool = False) -> list[dict[str, Any]]:
    """The compile specs of one launch (`launch.Launch`): one per candidate config (see `record`), each bound
    as the GPU launcher binds it (`gpu_call.Bound`: signature, constants, heuristic flags)."""
    import jax
    from triton.runtime.autotuner import Autotuner

    from . import autotune, gpu_call, signature

    kernel, args, out_shapes, metaparams = seen.kernel, seen.args, seen.out_shapes, seen.metaparams
    tuner, _, fn = signature.unwrap(kernel)
    values = [jax.ShapeDtypeStruct(tuple(a.shape), a.dtype) if autotune.is_array(a) else a for a in args]
    if not isinstance(tuner, Autotuner):
        configs = [None]
    elif all_configs:
        configs = [c for c in tuner.configs if all(c.kwargs.get(k, v) == v for k, v in metaparams.items())]
    else:
        configs = autotune.candidates(tuner, dict(zip(fn.arg_names, [*values, *out_shapes])), metaparams)
    module, attribute = _kernel_address(kernel, fn)
    specs = []
    for config in configs:
        meta = {**metaparams, **(config.kwargs if config is not None else {})}
        bound = gpu_call.Bound(tuner.fn if tuner is not None else kernel, values, out_shapes, meta)
        warps = config.num_warps if config is not None else (seen.num_warps or 4)
        stages = config.num_stages if config is not None else (seen.num_stages or 3)
        maxnreg = getattr(config, "maxnreg", None) if config is not None else seen.maxnreg
        specs.append({"module": module, "kernel": attribute, "signature": bound.signature,
                      "constexprs": bound.constants, "num_warps": warps, "num_stages": stages,
                      **({"maxnreg": maxnreg} if maxnreg is not None else {})})
    return specs


def key_of(spec: Mapping[str, Any]) -> str:
    """A spec's identity: two launches of the same kernel, signature, constants and config compile alike."""
    return json.dumps(spec, sort_keys=True, default=repr)


def distinct(specs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each spec once."""
    seen, out = set(), []
    for spec in specs:
        key = key_of(spec)
        if key not in seen:
            seen.add(key)
            out.append(dict(spec))
    return out


def _function(spec: Mapping[str, Any]):
    """The compiled `triton.JITFunction` a spec names (its module imported in this child process)."""
    import triton

    fn = getattr(importlib.import_module(spec["module"]), spec["kernel"])
    while not isinstance(fn, triton.runtime.jit.JITFunction):
        fn = fn.fn
    return fn


def _compile_one(spec: Mapping[str, Any], last: str):
    """`compiler.compile_kernel` of a spec up to stage `last`: "ttir" is the front end (where type errors are
    found), "cubin" runs ptxas too."""
    from . import compiler

    return compiler.compile_kernel(_function(spec), spec["signature"], spec["constexprs"],
                                   num_warps=spec["num_warps"], num_stages=spec["num_stages"],
                                   num_ctas=spec.get("num_ctas", 1), capability=spec.get("capability", CAPABILITY),
                                   last=last, maxnreg=spec.get("maxnreg"))


def precompile(kernel, args: Sequence[Any], out_shapes: Sequence[Any], configs: Sequence[Any],
               metaparams: Mapping[str, Any], *, workers: int, cc: int | None = None,
               folder: str | None = None) -> dict[str, Any]:
    """Compile an autotuned `kernel` (the launched autotuner, a module attribute) under each of `configs` to PTX in
    up to `workers` child processes, into the compiled-kernel store (`<cache>/kernels/`, `workbench.cache`) under
    the key `gpu_call.compiled` looks up: the autotuner's timings then load each candidate instead of compiling
    them one after another (`workbench tune --compile-workers`, through `autotune.precompiling`). `args` and
    `out_shapes` as the launch binds them (arrays: only shapes and dtypes are read); `cc`: the compute capability
    (default the first GPU's). Kernels already on disk are skipped; with the cache `off` nothing is done.
    Returns `compile_all`'s summary with "skipped"; a config that fails here is only reported (its launch
    compiles it again and fails where the tuner counts it)."""
    import jax

    from . import cache, gpu_call, signature

    if cache.mode() == "off":
        return {"compiled": 0, "failed": [], "resources": [], "seconds": 0.0, "skipped": len(configs)}
    tuner, _, fn = signature.unwrap(kernel)
    cc = gpu_call.capability() if cc is None else int(cc)
    store = cache.Store(cache.cache_dir() / "kernels")
    module, attribute = _kernel_address(kernel, fn)
    values = [jax.ShapeDtypeStruct(tuple(a.shape), a.dtype) if signature.is_array(a) else a for a in args]
    specs, skipped = [], 0
    for config in configs:
        bound = gpu_call.Bound(tuner.fn, values, out_shapes, {**metaparams, **config.kwargs})
        key = gpu_call.kernel_key(bound, num_warps=config.num_warps, num_stages=config.num_stages,
                                  num_ctas=config.num_ctas, cc=cc, maxnreg=config.maxnreg)
        if store.read(key) is not None:
            skipped += 1
            continue
        specs.append({"module": module, "kernel": attribute, "signature": bound.signature,
                      "constexprs": bound.constants, "num_warps": config.num_warps, "num_stages": config.num_stages,
                      "num_ctas": config.num_ctas, "capability": cc, "key": key,
                      **({"maxnreg": config.maxnreg} if config.maxnreg is not None else {})})
    if not specs:
        return {"compiled": 0, "failed": [], "resources": [], "seconds": 0.0, "skipped": skipped}
    result = compile_all(specs, last="store", workers=max(1, min(workers, len(specs))), folder=folder,
                         store=str(store.folder), timeout=PRECOMPILE_TIMEOUT)
    return {**result, "skipped": skipped}


_SASS_COUNTS = ("HGMMA", "HMMA", "LDL", "STL", "MUFU.EX2", "BAR")


def sass_name(spec: Mapping[str, Any]) -> str:
    """The file `compile_all(..., sass_dir=...)` writes a spec's SASS to: the kernel's name and a digest of the
    spec (two configs of one kernel get two files)."""
    import hashlib

    return f"{spec['kernel']}-{hashlib.sha1(key_of(spec).encode()).hexdigest()[:10]}.sass"


def _resources(spec: Mapping[str, Any], sass_dir: str | None = None) -> dict[str, Any]:
    """Compile to a cubin and read what the compiler made of it with the cuobjdump and nvdisasm that come
    with Triton: registers per thread, stack bytes (spills), shared memory, and counts of a few SASS
    instructions (HGMMA: Hopper's warpgroup MMA; LDL/STL: local-memory spill traffic), the ids of the named
    barriers its BAR instructions use, and of those with a BAR compiled without `.aligned`. With `sass_dir`,
    the whole SASS is also written there (`sass_name`): where the spills and barriers sit in the loop."""
    import re
    import subprocess
    import tempfile

    import triton

    compiled = _compile_one(spec, "cubin")
    tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.binary)
        f.flush()
        usage = subprocess.run([os.path.join(tools, "cuobjdump"), "--dump-resource-usage", f.name],
                               capture_output=True, text=True, check=True).stdout
        elf = subprocess.run([os.path.join(tools, "cuobjdump"), "-elf", f.name],
                             capture_output=True, text=True, check=True).stdout
        sass = subprocess.run([os.path.join(tools, "nvdisasm"), "-c", f.name],
                              capture_output=True, text=True, check=True).stdout
    if sass_dir is not None:
        with open(os.path.join(sass_dir, sass_name(spec)), "w") as f:
            f.write(sass)
    field = lambda name: int(re.search(rf"{name}:(\d+)", usage).group(1))  # noqa: E731
    ops = re.findall(r"\b(" + "|".join(re.escape(op) for op in _SASS_COUNTS) + r")\b", sass)
    bars = [(int(at, 16), int(b, 0)) for at, b in re.findall(
        r"/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?BAR\.(?:SYNC|ARV|RED)[.\w]*\s+(0x[0-9a-f]+|\d+)", sass)]
    # ptxas lists the offsets of the barriers written without .aligned (PTX `barrier.sync`, not `bar.sync`);
    # compute-sanitizer's synccheck reads the list: a barrier met from two places in the code must be on it
    listed = re.search(r"EIATTR_COOP_GROUP_INSTR_OFFSETS\s+Format:\s*\S+\s+Value:\s*((?:0x[0-9a-f]+\s*)+)", elf)
    unaligned = {int(x, 16) for x in listed.group(1).split()} if listed else set()
    return {"registers": field("REG"), "stack": field("STACK"), "shared": compiled.shared,
            **{op: ops.count(op) for op in _SASS_COUNTS}, "named_barriers": sorted({b for _, b in bars}),
            "unaligned_barriers": sorted({b for at, b in bars if at in unaligned})}


def _chain(exc: BaseException) -> str:
    """An exception and what raised it, innermost last: Triton's CompilationError names only the outermost call
    (a `gl.warp_specialize` line), its cause the line that failed."""
    parts, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        parts.append(f"{type(exc).__name__}: {exc}")
        exc = exc.__cause__ or exc.__context__
    return "\n-- raised from --\n".join(parts)


def _child(path: str, last: str = "cubin", extra: str | None = None) -> int:
    """Compile every spec of the JSON file to stage `last`; one JSON line per failure, then a summary. `extra`:
    with "resources" the folder for each spec's SASS (or none); with "store" the compiled-kernel store's folder,
    where each spec's PTX is written under its "key" (`precompile`)."""
    specs = json.loads(open(path).read())
    failed = 0
    start = time.perf_counter()
    for spec in specs:
        try:
            if last == "resources":
                print(json.dumps({"spec": spec, "resources": _resources(spec, extra)}, default=repr), flush=True)
            elif last == "store":
                from pathlib import Path

                from . import cache

                cache.Store(Path(extra)).write(spec["key"], _compile_one(spec, "ptx").as_json())
            else:
                _compile_one(spec, last)
        except Exception as exc:  # noqa: BLE001 - every failure is reported, not raised
            failed += 1
            print(json.dumps({"spec": spec, "error": _chain(exc)}, default=repr), flush=True)
    print(json.dumps({"compiled": len(specs) - failed, "failed": failed,
                      "seconds": round(time.perf_counter() - start, 1)}), flush=True)
    return 1 if failed else 0


def compile_all(specs: Sequence[Mapping[str, Any]], *, last: str = "cubin", workers: int = 1,
                timeout: float = 1200.0, folder: str | None = None, sass_dir: str | None = None,
                store: str | None = None) -> dict[str, Any]:
    """Compile the distinct specs for sm_90 (or a spec's "capability") up to stage `last` (STAGES) in `workers`
    child processes (compiled Triton, JAX on the CPU: no GPU is used).

    `last="resources"` compiles to a cubin and adds each spec's `_resources` under "resources"; with `sass_dir`
    (an existing folder) each spec's SASS is written there too, named by `sass_name`. `last="store"` compiles to
    PTX and writes each spec's kernel into the compiled-kernel store at `store` under its "key" (`precompile`).
    Returns {"compiled": n, "failed": [{"spec", "error"}, ...], "resources": [{"spec", "resources"}, ...],
    "seconds": wall}."""
    import tempfile

    from .compiler import STAGES

    if last not in (*STAGES, "resources", "store"):
        raise ValueError(f"last: expected one of {', '.join(STAGES)}, resources or store, got {last!r}")
    if sass_dir is not None and (last != "resources" or not os.path.isdir(sass_dir)):
        raise ValueError(f"sass_dir: an existing folder, with last='resources'; got {sass_dir!r} with last={last!r}")
    if (store is None) != (last != "store") or (store is not None and not all("key" in s for s in specs)):
        raise ValueError(f"store: a folder exactly when last='store', and then every spec has a 'key'; got "
                         f"store={store!r} with last={last!r}")
    specs = distinct(specs)
    folder = folder or tempfile.mkdtemp(prefix="workbench-compile-check-")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["WORKBENCH_INTERPRET"] = "0"
    env["JAX_PLATFORMS"] = "cpu"  # a child only compiles: on a GPU machine it must not take the GPU's memory
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
        extra = [os.path.abspath(sass_dir)] if sass_dir is not None else [os.path.abspath(store)] if store else []
        procs.append(subprocess.Popen([sys.executable, "-m", "workbench.compile_check", path, last, *extra], env=env,
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
    sys.exit(_child(*sys.argv[1:4]))

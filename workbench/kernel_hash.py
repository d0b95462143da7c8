"""A compiled Triton kernel's source hash that does not depend on what the process hashed before: the key
of the autotune cache, the compiled-kernel cache and the tuning table (`autotune`, `tuning_table`)."""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import sys
import threading
from pathlib import Path
from typing import Any

_LOCK = threading.Lock()


def source_hash(fn) -> str:
    """A compiled `@triton.jit` function's source hash: sha256 of its source and of every `@triton.jit`
    function it reaches (by name, `module.name` or a closure) with the `tl.constexpr` globals they read
    (`_reached`), Triton's own functions (`tl.sum`, `tl.cumsum`, ...) left out: they are the compiler's, whose
    release every key records beside the hash, and a new release must not change the hash of unchanged
    kernels (the tuning table's entries are found by it). Anything else (an interpreted function, a test's
    stand-in): its `cache_key` if it has one, else sha256 of its own source.

    Not Triton's `JITFunction.cache_key`: Triton 3.6 merges a callee's globals into its caller's key
    before computing the callee's, so a kernel's `cache_key` depends on which kernels sharing its helpers
    were hashed first in the process (chunk_kda's prep kernel has two, after or before its intra
    kernel): the cache and the tuning table would miss whenever ops ran in another order. This one
    depends only on the text and the constexpr values, computed once per function and process."""
    from triton.runtime.jit import JITCallable

    if not isinstance(fn, JITCallable):
        key = getattr(fn, "cache_key", None)
        return str(key) if key else hashlib.sha256(inspect.getsource(getattr(fn, "fn", fn)).encode()).hexdigest()
    with _LOCK:
        known = _SOURCE_HASHES.get(id(fn))
    if known is not None and known[0] is fn:
        return known[1]
    functions, constants = _reached(fn)
    parts = [[f"{package_module_name(f.fn.__module__)}.{f.fn.__qualname__}", f.src, bool(getattr(f, "noinline", False))]
             for f in functions]
    digest_ = hashlib.sha256(json.dumps([sorted(parts), sorted(constants)]).encode()).hexdigest()
    with _LOCK:
        _SOURCE_HASHES[id(fn)] = (fn, digest_)
    return digest_


_SOURCE_HASHES: dict[int, tuple[Any, str]] = {}


def package_module_name(module: str) -> str:
    """`module`'s name as its package's folder spells it: a package imported under another name (another
    checkout of workbench loaded by `workbench bench --against` as `workbench_against_<hash>`) is named by its
    folder (`workbench`), so an unchanged kernel of it hashes as ours and finds the tuning table's entries. A
    module outside a package, or a package imported under its folder's name (every usual import), is unchanged."""
    top, dot, rest = module.partition(".")
    spec = getattr(sys.modules.get(top), "__spec__", None)
    origin = getattr(spec, "origin", None)
    if origin and Path(origin).name == "__init__.py":
        folder = Path(origin).parent.name
        if folder != top and folder.isidentifier():
            return folder + dot + rest
    return module


def _reached(fn) -> tuple[list[Any], list[list[str]]]:
    """The `@triton.jit` functions `fn` reaches (itself first; Triton's own not followed) and the constexpr
    globals they read as [name, repr(value)]: each function's source is parsed, and every name and attribute
    chain (`steps.exp_e`) is resolved in its closure and globals, as Triton's dependency finder does."""
    from triton.language.core import constexpr
    from triton.runtime.jit import JITCallable

    seen: dict[int, Any] = {}
    constants: set[tuple[str, str]] = set()
    todo = [fn]
    while todo:
        f = todo.pop()
        if id(f) in seen:
            continue
        seen[id(f)] = f
        scope = {**f.__globals__, **inspect.getclosurevars(f.fn).nonlocals}

        def resolve(node, scope=scope):
            if isinstance(node, ast.Name):
                return scope.get(node.id)
            if isinstance(node, ast.Attribute):
                base = resolve(node.value)
                return None if base is None else getattr(base, node.attr, None)
            return None

        for node in ast.walk(ast.parse(f.src)):
            if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(getattr(node, "ctx", None), ast.Load):
                value = resolve(node)
                if isinstance(value, JITCallable) and not value.fn.__module__.startswith("triton."):
                    todo.append(value)
                elif isinstance(value, constexpr):
                    constants.add((ast.unparse(node), repr(value.value)))
    return list(seen.values()), [list(c) for c in constants]

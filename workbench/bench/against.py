"""`workbench bench --against DIR`: another checkout of workbench timed beside this one, in the same process.

Two versions of a kernel compared in two runs carry the GPU's drift between the runs: on an H200 the same
program's median moved by up to 39 % from one process to the next (1.849 against 1.331 ms: chunk_gla's forward at
B1 T64k, two processes of one call: data/bench/chunk_gla_next/20261129T0254-h200),
more than most changes to a kernel are worth. Loaded into this process, the other checkout's op is one more
peer of the run: timed on the same inputs, its errors checked like every row's, and with `--paired N` timed
round by round beside this checkout's kernel.

The other checkout's package is imported under its own module name (`workbench_against_<hash of the path>`),
from its own files: its kernels, glue and tuning tables, not this one's. Its kernels hash under their package
folder's name (`kernel_hash.package_module_name`), so an unchanged kernel finds the same tuning-table entries as
ours; the record keeps what its autotune chose (`against[i].autotune`), where a table miss would show. Both
share the process's Triton and JAX, the autotune caches on disk (keyed by each kernel's source, so a kernel
changed in one checkout is tuned apart) and, in Triton's interpreter, this checkout's interpreter fixes (installed
once per process: the other checkout's address checks under WORKBENCH_CHECK_BOUNDS do not run).
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax

from .machine import git_state
from .spec import OpBench, Peer, PeerCalls
from .timing import jax_calls

HERE = Path(__file__).resolve().parents[2]  # this checkout: the folder holding the `workbench` package


def load(path: str | Path) -> str:
    """Import the workbench package of the checkout at `path` (the folder holding `workbench/`) under a
    module name of its own, once per process; return that name. A folder without the package, or this
    checkout itself, is a ValueError naming `--against`."""
    root = Path(path).expanduser().resolve()
    init = root / "workbench" / "__init__.py"
    if not init.is_file():
        raise ValueError(f"--against: {str(path)!r} is not a checkout of workbench (no {init})")
    if root == HERE:
        raise ValueError(f"--against: {str(path)!r} is this checkout itself; give another one")
    name = "workbench_against_" + hashlib.sha256(str(root).encode()).hexdigest()[:10]
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(init.parent)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
                del sys.modules[loaded]
            raise
    return name


def label(path: str | Path) -> str:
    """The peer's name in the record: `workbench@<folder name>`."""
    return "workbench@" + Path(path).expanduser().resolve().name


def describe(path: str | Path) -> dict[str, Any]:
    """What the record keeps of a checkout timed against: its path, name, module and git state."""
    root = Path(path).expanduser().resolve()
    return {"path": str(root), "name": label(root), "module": load(root), "git": git_state(root)}


def peers(op: OpBench, paths: Sequence[str | Path]) -> tuple[Peer, ...]:
    """One JAX peer per checkout: its op's Triton path (the op's `call` with `library=` the other package)."""
    names = [label(p) for p in paths]
    if len(set(names)) != len(names):
        raise ValueError(f"--against: two checkouts with one folder name would share a row name: {list(paths)}")
    return tuple(_peer(op, name, load(p)) for name, p in zip(names, paths))


def _peer(op: OpBench, name: str, module: str) -> Peer:
    def setup(inputs: Mapping[str, jax.Array], cotangents: Sequence[jax.Array]) -> PeerCalls:
        return jax_calls(op, "triton", inputs, cotangents, library=sys.modules[module])

    return Peer(name, module, setup, needs_cuda=False, runtime="jax", interpretable=True)

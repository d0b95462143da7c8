"""The package's import graph, read from its source (no import runs): what tests/test_architecture.py checks.

Every `import` and `from … import …` statement of every module under `workbench/` counts, at module level or
inside a function (a lazy import is still a dependency). `from P import n` is an edge to the module `P.n` when
that is a module, else to `P` itself; `import P.Q` to `P.Q`. Run as a script, it prints the modules with their
sizes and dependencies, the cycles and the private names that cross a module boundary.
"""

from __future__ import annotations

import ast
import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "workbench"


@dataclasses.dataclass
class Module:
    name: str  # dotted: workbench.kda.kernels_forward
    path: Path
    is_package: bool
    lines: int
    first_line: str  # the first line of its docstring ('' when it has none)
    imports: set[str] = dataclasses.field(default_factory=set)  # modules of the package it imports
    private: list[tuple[int, str]] = dataclasses.field(default_factory=list)  # (line, what) crossing a boundary


def modules(root: Path = ROOT) -> dict[str, Module]:
    """Every module of the package, with its imports resolved (`Module.imports`, `Module.private`)."""
    found: dict[str, Module] = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        text = path.read_text()
        tree = ast.parse(text)
        doc = ast.get_docstring(tree) or ""
        found[name] = Module(name, path, is_package, len(text.splitlines()), doc.strip().splitlines()[0] if doc else "")
    for module in found.values():
        _resolve(module, found)
    return found


def _package_of(module: Module) -> str:
    return module.name if module.is_package else module.name.rpartition(".")[0]


def _private_owner(target: str) -> str | None:
    """The package a private module belongs to (`workbench.kda` for `workbench.kda._x`), or None if public."""
    head, _, last = target.rpartition(".")
    return head if last.startswith("_") and not last.startswith("__") else None


def _resolve(module: Module, found: dict[str, Module]) -> None:
    tree = ast.parse(module.path.read_text())
    bound: dict[str, str] = {}  # local name → module of the package it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [(alias.name, None) for alias in node.names if alias.name.split(".")[0] == PACKAGE]
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    bound[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(module).split(".")
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != PACKAGE:
                continue
            targets = []
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                targets.append((sub, None) if sub in found else (source, alias.name))
                if sub in found:
                    bound[alias.asname or alias.name] = sub
        else:
            continue
        for target, attribute in targets:
            if target == module.name:
                continue
            module.imports.add(target)
            owner = _private_owner(target)
            if owner is not None and not (module.name + ".").startswith(owner + "."):
                module.private.append((node.lineno, f"module {target} (private to {owner})"))
            if attribute is not None and attribute.startswith("_") and not attribute.startswith("__"):
                module.private.append((node.lineno, f"{target}.{attribute}"))
    for node in ast.walk(tree):  # `launch._unwrap(...)`: a private name of another module, reached as an attribute
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound \
                and node.attr.startswith("_") and not node.attr.startswith("__"):
            target = bound[node.value.id]
            if f"{target}.{node.attr}" not in found and target != module.name:
                module.private.append((node.lineno, f"{target}.{node.attr}"))


def cycles(found: dict[str, Module]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan): each holds an import circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(found[v].imports):
            if w not in found:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for v in sorted(found):
        if v not in index:
            visit(v)
    return out


def report(found: dict[str, Module]) -> str:
    lines = []
    for m in sorted(found.values(), key=lambda m: m.name):
        deps = ", ".join(sorted(d.removeprefix(PACKAGE + ".") for d in m.imports))
        lines.append(f"{m.lines:5d}  {m.name}: {m.first_line}\n       → {deps or '-'}")
    for c in cycles(found):
        lines.append("CYCLE: " + " ↔ ".join(c))
    for m in found.values():
        for line, what in m.private:
            lines.append(f"PRIVATE: {m.path.relative_to(ROOT)}:{line} imports {what}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(modules()))

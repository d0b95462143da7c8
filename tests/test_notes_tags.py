"""Every tagged equation of every workbench/**/NOTES.md names a check that exists.

A tagged equation is a line with `**(tag)**`, e.g. `**(rec.4)** dq_t = scale · S_t do_t`. Before the
next blank line or the next tag it must be followed by a line

    check: tests/recurrent/test_derivation.py::test_rec_4

naming a test function of that file (found with `ast`, not by importing it). Several tags may share
a test only if its name lists each of them (`test_rec_8_rec_9_…` for rec.8 and rec.9). Any other
`check:` line in the notes must name an existing test too, and every tag the family's Python files
cite, like `# (rec.7)`, must be defined in its NOTES.md.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TAG = re.compile(r"\*\*\(([A-Za-z]+\.\d+)\)\*\*")
CHECK = re.compile(r"^\s*check:\s*`?([^`\s:]+)::([\w:]+)`?\s*$")
NOTES = sorted((ROOT / "workbench").rglob("NOTES.md"))


def _test_names(path: Path) -> set[str]:
    """`name` for module-level test functions and `Class::name` for methods of test classes."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.update(f"{node.name}::{item.name}" for item in node.body
                         if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return names


def _slow_tests(path: Path) -> set[str]:
    """Test names (as `_test_names` gives them) marked `slow`, which the CI run leaves out: by a
    decorator `@pytest.mark.slow` (called or not), or by a module- or class-level `pytestmark`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))

    def is_slow(node) -> bool:
        node = node.func if isinstance(node, ast.Call) else node
        return isinstance(node, ast.Attribute) and node.attr == "slow"

    def marked(body) -> bool:
        return any(isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in n.targets)
                   and any(is_slow(x) for x in ast.walk(n.value)) for n in body)

    names, module_slow = set(), marked(tree.body)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if module_slow or any(is_slow(d) for d in node.decorator_list):
                names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            class_slow = module_slow or marked(node.body) or any(is_slow(d) for d in node.decorator_list)
            names.update(f"{node.name}::{item.name}" for item in node.body
                         if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                         and (class_slow or any(is_slow(d) for d in item.decorator_list)))
    return names


def _check_error(root: Path, path: str, name: str, where: str) -> str | None:
    file = root / path
    if not file.is_file():
        return f"{where}: check file {path} does not exist"
    if not name.split("::")[-1].startswith("test"):
        return f"{where}: {name} is not a test (pytest collects only test* names)"
    if name not in _test_names(file):
        return f"{where}: {path} has no test function {name}"
    if name in _slow_tests(file):
        return f"{where}: {path}::{name} is marked slow, so the CI run (-m 'not slow') never runs it"
    return None


def _lists_tag(name: str, tag: str) -> bool:
    """Whether a test name lists a tag: rec.8 → rec_8, not followed by another digit."""
    return re.search(re.escape(tag.replace(".", "_")) + r"(?!\d)", name) is not None


def notes_errors(notes: Path, root: Path = ROOT) -> tuple[list[str], set[str]]:
    """(problems, tags defined) for one NOTES.md."""
    lines = notes.read_text(encoding="utf-8").splitlines()
    rel = notes.relative_to(root) if notes.is_relative_to(root) else notes
    errors, defined, checked_lines = [], set(), set()
    shared: dict[tuple[str, str], list[str]] = {}
    for n, line in enumerate(lines):
        tags = TAG.findall(line)
        for tag in tags:
            if tag in defined:
                errors.append(f"{rel}:{n + 1}: tag ({tag}) is defined twice")
            defined.add(tag)
        if not tags:
            continue
        check = None
        for m in range(n + 1, len(lines)):
            if not lines[m].strip() or TAG.search(lines[m]):
                break
            if (found := CHECK.match(lines[m])) is not None:
                check, checked_lines = found.groups(), checked_lines | {m}
                break
        where = f"{rel}:{n + 1} ({', '.join(tags)})"
        if check is None:
            errors.append(f"{where}: no `check: path::test_name` line follows the equation")
            continue
        if (err := _check_error(root, *check, where)) is not None:
            errors.append(err)
        for tag in tags:
            shared.setdefault(check, []).append(tag)
    for (path, name), tags in shared.items():
        if len(set(tags)) > 1:
            errors.extend(f"{rel}: {path}::{name} checks ({', '.join(sorted(set(tags)))}) but its name does "
                          f"not list ({tag})" for tag in sorted(set(tags)) if not _lists_tag(name, tag))
    for m, line in enumerate(lines):
        if m in checked_lines or not line.strip().startswith("check:"):
            continue
        found = CHECK.match(line)
        if found is None:
            errors.append(f"{rel}:{m + 1}: malformed check line {line.strip()!r}")
        elif (err := _check_error(root, *found.groups(), f"{rel}:{m + 1}")) is not None:
            errors.append(err)
    return errors, defined


def test_there_are_notes():
    assert NOTES, "no workbench/**/NOTES.md found"


@pytest.mark.parametrize("notes", NOTES, ids=[str(p.relative_to(ROOT)) for p in NOTES])
def test_every_tag_has_a_check(notes):
    errors, defined = notes_errors(notes)
    assert defined, f"{notes.relative_to(ROOT)} defines no tagged equation"
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("notes", NOTES, ids=[str(p.relative_to(ROOT)) for p in NOTES])
def test_tags_cited_in_code_are_defined(notes):
    _, defined = notes_errors(notes)
    prefixes = {tag.split(".")[0] for tag in defined}
    cite = re.compile(r"\b(" + "|".join(map(re.escape, sorted(prefixes))) + r")\.(\d+)\b")
    missing = [f"{py.relative_to(ROOT)}:{n + 1}: cites ({prefix}.{num}), not defined in "
               f"{notes.relative_to(ROOT)}"
               for py in sorted(notes.parent.rglob("*.py"))
               for n, line in enumerate(py.read_text(encoding="utf-8").splitlines())
               for prefix, num in cite.findall(line) if f"{prefix}.{num}" not in defined]
    assert not missing, "\n".join(missing)


def test_every_config_test_runs_in_ci():
    """Every kernel config is exercised in CI: no `test_every*config*` test is marked slow."""
    tests = sorted((ROOT / "tests").rglob("test_*.py"))
    configs = {(p, n) for p in tests for n in _test_names(p) if re.fullmatch(r"(\w+::)?test_every\w*config\w*", n)}
    assert configs, "no test_every*config* test found"
    slow = [f"{p.relative_to(ROOT)}::{n}" for p, n in sorted(configs) if n in _slow_tests(p)]
    assert not slow, f"marked slow (left out of CI): {slow}"


# ----------------------------------------------------------------------------- the checker can fail


def _write(tmp_path, notes: str, tests: str = "def test_x_1():\n    pass\n") -> Path:
    (tmp_path / "t.py").write_text(tests)
    path = tmp_path / "NOTES.md"
    path.write_text(notes)
    return path


@pytest.mark.parametrize("notes, problem", [
    ("**(x.1)** a = b\n", "no `check"),
    ("**(x.1)** a = b\n\ncheck: t.py::test_x_1\n", "no `check"),  # a blank line ends the equation
    ("**(x.1)** a = b\ncheck: t.py::test_x_2\n", "no test function test_x_2"),
    ("**(x.1)** a = b\ncheck: missing.py::test_x_1\n", "does not exist"),
    ("**(x.1)** a\ncheck: t.py::test_x_1\n**(x.2)** b\ncheck: t.py::test_x_1\n", "does not list (x.2)"),
    ("**(x.1)** a\ncheck: t.py::test_x_1\n\n**(x.1)** b\ncheck: t.py::test_x_1\n", "defined twice"),
    ("Prose.\ncheck: t.py::test_gone\n", "no test function test_gone"),
])
def test_checker_reports(tmp_path, notes, problem):
    errors, _ = notes_errors(_write(tmp_path, notes), root=tmp_path)
    assert any(problem in e for e in errors), errors


@pytest.mark.parametrize("tests", [
    "import pytest\n\n@pytest.mark.slow\ndef test_x_1():\n    pass\n",
    "import pytest\npytestmark = [pytest.mark.slow]\n\ndef test_x_1():\n    pass\n",
], ids=["decorator", "pytestmark"])
def test_checker_reports_a_slow_check(tmp_path, tests):
    errors, _ = notes_errors(_write(tmp_path, "**(x.1)** a = b\ncheck: t.py::test_x_1\n", tests), root=tmp_path)
    assert any("marked slow" in e for e in errors), errors


def test_checker_accepts(tmp_path):
    tests = "def test_x_1():\n    pass\n\ndef test_x_2_x_3():\n    pass\n"
    notes = ("**(x.1)** a = b\ncheck: t.py::test_x_1\n\n"
             "**(x.2)** c\ncheck: t.py::test_x_2_x_3\n**(x.3)** d\ncheck: t.py::test_x_2_x_3\n")
    errors, defined = notes_errors(_write(tmp_path, notes, tests), root=tmp_path)
    assert errors == [] and defined == {"x.1", "x.2", "x.3"}

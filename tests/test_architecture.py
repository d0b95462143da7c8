"""The house rules of docs/architecture.md, read from the source: floors, no circles, no private names across
modules, modules of one job and at most ~800 lines.

Each test fails with the offending modules named; `python tests/architecture.py` prints the whole graph.
"""

from __future__ import annotations

import pytest

from tests import architecture

MODULES = architecture.modules()
MAX_LINES = 800

# Floors, bottom to top (docs/architecture.md): a module imports only modules on its own floor or below.
FLOORS = [
    ("base", ["workbench._backend", "workbench._precision", "workbench._checks", "workbench._sharding",
              "workbench._partitioned",
              "workbench.tl_helpers"]),
    ("bounds", ["workbench._bounds"]),
    ("launcher", ["workbench.signature", "workbench.interpreter", "workbench.compiler", "workbench.cache",
                  "workbench.gpu_call", "workbench.scratch_pool", "workbench.launch", "workbench.autotune", "workbench.device_time",
                  "workbench.kernel_hash", "workbench.tuning_table", "workbench.compile_check", "workbench.tl_chunked"]),
    ("toolkit", ["workbench.testing", "workbench.strategies", "workbench.plots"]),
    ("families", ["workbench.recurrent", "workbench.chunk_gla", "workbench.kda", "workbench.flash_attention",
                  "workbench.ring_attention"]),
    ("package", ["workbench"]),
    ("harnesses", ["workbench.bench", "workbench.verify", "workbench.verify_report", "workbench.cli",
                    "workbench.__main__"]),
]
# A family builds on another's public names only along these edges (each said in docs/architecture.md):
# the chunked form's reference starts from the recurrent definition; the ring runs flash attention's blocks.
FAMILY_EDGES = {("workbench.chunk_gla", "workbench.recurrent"), ("workbench.ring_attention", "workbench.flash_attention")}


def floor_of(name: str) -> tuple[int, str]:
    """(floor index, the floor's entry the module belongs to): the longest entry that is the module or a parent."""
    best = None
    for index, (_, entries) in enumerate(FLOORS):
        for entry in entries:
            if (name == entry or name.startswith(entry + ".")) and (best is None or len(entry) > len(best[1])):
                best = (index, entry)
    if best is None:
        raise AssertionError(f"{name} is on no floor: add it to FLOORS and to docs/architecture.md")
    return best


def test_every_module_is_on_a_floor():
    for name in MODULES:
        floor_of(name)


def test_no_import_circles():
    assert architecture.cycles(MODULES) == []


def test_imports_go_down_or_sideways_within_a_family():
    wrong = []
    for name, module in MODULES.items():
        floor, entry = floor_of(name)
        for target in module.imports:
            if target not in MODULES:
                continue
            target_floor, target_entry = floor_of(target)
            if target_floor > floor:
                wrong.append(f"{name} (floor {FLOORS[floor][0]}) imports {target} (floor {FLOORS[target_floor][0]})")
            elif (target_floor == floor and FLOORS[floor][0] == "families" and target_entry != entry
                  and (entry, target_entry) not in FAMILY_EDGES):
                wrong.append(f"{name} imports the sibling family {target}")
    assert wrong == []


def test_no_private_name_crosses_a_module_boundary():
    crossings = [f"{m.path.relative_to(architecture.ROOT)}:{line} {what}"
                 for m in MODULES.values() for line, what in m.private]
    assert crossings == []


def test_modules_stay_small():
    assert {name: m.lines for name, m in MODULES.items() if m.lines > MAX_LINES} == {}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_each_module_says_its_job_in_its_first_line(name):
    assert MODULES[name].first_line, f"{name} has no docstring"


def test_the_checks_can_fail(tmp_path):
    """A planted circle and a planted private import are found (the checks above are not vacuous)."""
    package = tmp_path / "workbench"
    (package / "fam").mkdir(parents=True)
    (package / "__init__.py").write_text('"""root."""\n')
    (package / "a.py").write_text('"""a."""\nfrom . import b\n')
    (package / "b.py").write_text('"""b."""\nfrom .a import _hidden\n')
    (package / "fam" / "__init__.py").write_text('"""fam."""\nfrom .._c import x\n')
    (package / "fam" / "_inner.py").write_text('"""inner."""\n')
    (package / "_c.py").write_text('"""c."""\nfrom .fam import _inner\n')
    found = architecture.modules(tmp_path)
    assert architecture.cycles(found) == [["workbench.a", "workbench.b"]]
    private = {(name, what) for name, m in found.items() for _, what in m.private}
    assert ("workbench.b", "workbench.a._hidden") in private
    assert ("workbench._c", "module workbench.fam._inner (private to workbench.fam)") in private
    assert not any(name == "workbench.fam" for name, _ in private)  # a private module of the package itself is fine

"""The documentation a user reads from a clone is true: README.md and docs/*.md.

- the README's python block runs (in a fresh process, as a user would run it) and checks itself;
- every repository path the README and docs mention, or link to, exists and would be in a clone
  (tracked, or new and not git-ignored), and every `#anchor` of a link names a heading;
- nothing in the repository (data/ aside) refers to a sibling folder or to the git-ignored wheel bundle;
- the README's CPU test command is the one `.ci/run` runs, with the same install;
- docs/API.md names every public op, every `Tuning` field and every command-line option;
- the performance tables are generated: `scripts/perf_table.py` writes a row per op recorded in
  data/bench/, picks the right record, and the committed tables are what it writes now.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import workbench

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PERF_TABLE = ROOT / "scripts" / "perf_table.py"
MARKERS = ("<!-- perf-table:start -->", "<!-- perf-table:end -->")
FIRST_CALL_MARKERS = ("<!-- first-call:start -->", "<!-- first-call:end -->")

# Repository paths as prose and code blocks write them: `scripts/x.py`, `data/bench/`, `LICENSE`.
REPO_PATH = re.compile(r"(?<![\w./-])((?:scripts|docs|notebooks|workbench|tests|data/bench)/[\w./-]*|LICENSE)")
LINK = re.compile(r"\]\(([^)\s]+)\)")
# Spelled in two parts so that this file does not match itself.
FORBIDDEN = ("../" + "shared", "." + "whl/")


def _repo_files() -> set[str] | None:
    """Files a clone would have once the work in progress is committed: tracked, or untracked and not
    ignored. None outside a git checkout (then existence alone is checked)."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                             capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return {name for name in out.decode().split("\0") if name and (ROOT / name).exists()}


FILES = _repo_files()


def _in_clone(rel: str) -> bool:
    path = (ROOT / rel).resolve()
    if not path.exists() or ROOT not in (path, *path.parents):
        return False
    if FILES is None:
        return True
    rel = path.relative_to(ROOT).as_posix()
    return rel in FILES or any(name.startswith(rel.rstrip("/") + "/") for name in FILES)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", path.read_text(), re.MULTILINE)}


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


# ----------------------------------------------------------------------------- the README's example


def test_readme_example_runs():
    """The README's one python block, run as a script from the repository root in a fresh interpreter
    (its own asserts compare the Triton path's gradients with the reference's)."""
    blocks = _python_blocks(README.read_text())
    assert len(blocks) == 1, f"README.md: expected one ```python block, found {len(blocks)}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    result = subprocess.run([sys.executable, "-c", blocks[0]], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, f"README.md's python block failed:\n{result.stdout}\n{result.stderr}"
    assert re.search(r"loss \d+\.\d+, reference \d+\.\d+", result.stdout), result.stdout


# ----------------------------------------------------------------------------- paths and links


@pytest.mark.parametrize("doc", [README, *DOCS], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_mentioned_paths_exist(doc: Path):
    text = doc.read_text()
    missing = sorted({m for m in REPO_PATH.findall(text) if not _in_clone(m)})
    assert not missing, f"{doc.name} mentions paths a clone does not have: {missing}"


@pytest.mark.parametrize("doc", [README, *DOCS], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_links_resolve(doc: Path):
    """Relative links point at files of the clone; `#anchor`s at headings of their target."""
    bad = []
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+://|mailto:", target):
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        rel = os.path.relpath(path, ROOT)
        if not _in_clone(rel):
            bad.append(f"{target} (no such file in the repository)")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            bad.append(f"{target} (no heading with that anchor)")
    assert not bad, f"{doc.name}: broken links: {bad}"


def test_path_check_can_fail(tmp_path):
    """The two checks above catch a wrong path and a wrong anchor (so their passing means something)."""
    assert not _in_clone("scripts/no_such_script.py")
    assert not _in_clone("../elsewhere/API.md")
    assert _in_clone("scripts/perf_table.py") and _in_clone("data/bench/")
    assert REPO_PATH.findall("run `scripts/x.py` and see docs/API.md#tuning, LICENSE") == [
        "scripts/x.py", "docs/API.md", "LICENSE"]
    assert "tuning" in _anchors(ROOT / "docs" / "API.md")
    assert "no-such-heading" not in _anchors(ROOT / "docs" / "API.md")


def test_nothing_refers_outside_the_repository():
    """No file a clone has (data/ aside; .gitignore lists ignored folders by design) mentions the
    sibling shared folder or the git-ignored wheel bundle."""
    if FILES is None:
        pytest.skip("not a git checkout: cannot tell which files a clone has")
    hits = []
    for name in sorted(FILES):
        if name.startswith("data/") or name == ".gitignore":
            continue
        try:
            text = (ROOT / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if any(word in line for word in FORBIDDEN):
                hits.append(f"{name}:{n}: {line.strip()[:100]}")
    assert not hits, "references to files outside the repository:\n" + "\n".join(hits)


PRIVATE_USE = re.compile(r"\bworkbench(\.\w+)*\._\w+|from workbench[\w.]* import [^#\n]*\b_\w+")


def test_notebooks_use_only_public_names():
    """A notebook shows what a user can write: nothing private of `workbench` (a `_name` attribute or import)."""
    hits = [f"{path.name}:{n}: {line.strip()}" for path in sorted((ROOT / "notebooks").glob("*.py"))
            for n, line in enumerate(path.read_text().splitlines(), 1) if PRIVATE_USE.search(line)]
    assert not hits, "private names in notebooks:\n" + "\n".join(hits)
    assert PRIVATE_USE.search("x = workbench._backend.INTERPRET") and PRIVATE_USE.search(
        "from workbench.launch import _unwrap, triton_call")  # the check can fail
    assert not PRIVATE_USE.search("from workbench.testing import check  # _private in a comment")


# ----------------------------------------------------------------------------- README vs CI


def test_ci_runs_the_readme_test_command():
    readme = README.read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    commands = [line for line in readme.splitlines() if "python -m pytest" in line and "--nbmake" in line]
    assert len(commands) == 1, f"README.md: expected one CI test command, found {commands}"
    env, _, command = commands[0].partition(" ")
    assert env == "HYPOTHESIS_PROFILE=ci", commands[0]
    assert command in ci.splitlines(), f".ci/run does not run the README's test command {command!r}"
    assert "export HYPOTHESIS_PROFILE=ci" in ci
    assert 'pip install -e ".[test]"' in readme and '-e ".[test]"' in ci  # the README's install, on both stacks
    assert 'stack newest "$(python_of 3.12)"' in ci and 'stack oldest "$(python_of 3.11)"' in ci


# ----------------------------------------------------------------------------- the contract


def test_api_names_every_public_op():
    api = (ROOT / "docs" / "API.md").read_text()
    readme = README.read_text()
    for name in workbench.__all__:
        assert f"`workbench.{name}`" in api, f"docs/API.md has no section for workbench.{name}"
        assert f"`{name}(" in api, f"docs/API.md does not give the signature of workbench.{name}"
        assert f"workbench.{name}" in readme, f"README.md does not list workbench.{name}"


@pytest.mark.parametrize("module", ["recurrent", "chunk_gla", "kda", "flash_attention"])
def test_api_names_every_tuning_field(module):
    api = (ROOT / "docs" / "API.md").read_text()
    tuning = importlib.import_module(f"workbench.{module}").Tuning
    for field in dataclasses.fields(tuning):
        assert f"`{field.name}=" in api, f"docs/API.md, Tuning: {module}'s field {field.name} is missing"


def test_api_names_every_command_line_option():
    from workbench import cli

    api = (ROOT / "docs" / "API.md").read_text()
    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers()
    for register in (cli._verify_parser, cli._bench_parser):
        register(subparsers)
    missing = []
    for name, sub in subparsers.choices.items():
        usage = next((line for line in api.splitlines() if line.startswith(f"`workbench {name} ")), "")
        for action in sub._actions:
            for option in action.option_strings:
                if option.startswith("--") and option != "--help" and option not in usage:
                    missing.append(f"workbench {name} {option}")
    assert not missing, f"docs/API.md's command-line usage lines lack {missing}"


# ----------------------------------------------------------------------------- performance tables


def _run_perf_table(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PERF_TABLE), *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def _table_rows(text: str) -> list[str]:
    block = text.split(MARKERS[0])[1].split(MARKERS[1])[0]
    return [line for line in block.splitlines() if line.startswith("| ") and not line.startswith("| op ")]


def test_perf_table_has_a_row_per_recorded_op(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{MARKERS[0]}\nold\n{MARKERS[1]}\noutro\n")
    docs = tmp_path / "performance.md"
    result = _run_perf_table("--docs", docs, "--readme", readme, "--autotune-doc", _autotune_doc(tmp_path))
    assert result.returncode == 0, result.stderr
    ops = {json.loads(p.read_text())["op"] for p in (ROOT / "data" / "bench").glob("*.json")}
    assert ops
    for path in (readme, docs):
        text = path.read_text()
        assert "old" not in text.split(MARKERS[0])[1].split(MARKERS[1])[0]
        labels = [row.split("|")[1].strip() for row in _table_rows(text)]
        for op in ops:
            assert any(label == op or label.startswith(op + " (") for label in labels), (
                f"{path.name}: no row for {op} (rows: {labels})")
    assert readme.read_text().startswith("intro\n") and readme.read_text().endswith("outro\n")


def _record(op, date, *, ours, peer, reps=10, complete=None, shape_set="target", timer=None):
    """A minimal `workbench bench` record: our forward and forward+backward times and one peer's."""
    shape = {"B": 1, "T": 64, "H": 2, "K": 16, "V": 16}
    results = []
    for impl, kind, times in (("triton", "kernel", ours), ("peerlib.op", "peer", peer)):
        for pass_, ms in zip(("forward", "forward_backward"), times):
            results.append({"shape": shape, "implementation": impl, "kind": kind, "pass": pass_, "status": "ok",
                            "ms": {"median": ms}, "ratio_to_best_peer": ms / peer[0 if pass_ == "forward" else 1]})
    record = {"op": op, "date": date, "device": {"kind": "NVIDIA TestGPU"}, "interpreted": False, "reps": reps,
              "shape_set": shape_set, "shapes": [shape], "results": results}
    if complete is not None:
        record["complete"] = complete
    if timer is not None:
        record["timer"] = timer
    return record


def test_perf_table_picks_the_latest_complete_device_timed_record(tmp_path):
    """Device-timed: several calls per sample, or copies of the call in one program (`--timer copies`, one
    call per sample of a program that holds them); a later record timed one call per sample, cut short, or
    timed against another checkout of workbench, does not speak for the op."""
    bench = tmp_path / "bench"
    bench.mkdir()
    records = {
        "newop-20260101T000000Z": _record("newop", "2026-01-01T00:00:00", ours=(1.0, 4.0), peer=(2.0, 8.0)),
        "newop-20260102T000000Z": _record("newop", "2026-01-02T00:00:00", ours=(3.0, 6.0), peer=(2.0, 8.0)),
        "newop-20260102T120000Z": _record("newop", "2026-01-02T12:00:00", ours=(3.0, 4.0), peer=(2.0, 8.0), reps=1,
                                          timer="copies"),
        "newop-20260103T000000Z": _record("newop", "2026-01-03T00:00:00", ours=(9.0, 9.0), peer=(1.0, 1.0), reps=1),
        "newop-20260104T000000Z": _record("newop", "2026-01-04T00:00:00", ours=(7.0, 7.0), peer=(1.0, 1.0),
                                          complete=False),
        # `--against`: another checkout of workbench as the peer, an A/B of our own code, not a peer comparison
        "newop-20260105T000000Z": {**_record("newop", "2026-01-05T00:00:00", ours=(5.0, 5.0), peer=(5.0, 5.0)),
                                   "against": [{"path": "/elsewhere/main", "name": "workbench@main"}]},
    }
    for name, record in records.items():
        (bench / f"{name}.json").write_text(json.dumps(record))
    readme = tmp_path / "README.md"
    readme.write_text(f"{MARKERS[0]}\n{MARKERS[1]}\n")
    result = _run_perf_table("--bench", bench, "--docs", tmp_path / "performance.md", "--readme", readme,
                             "--autotune-doc", _autotune_doc(tmp_path))
    assert result.returncode == 0, result.stderr
    rows = _table_rows(readme.read_text())
    assert rows == ["| newop | TestGPU | 3.00 ms (1.50) | 4.00 ms (0.50) | peerlib.op |"], rows
    assert "newop-20260102T120000Z.json" in (tmp_path / "performance.md").read_text()


def _autotune_doc(tmp_path):
    path = tmp_path / "autotune.md"
    path.write_text(f"# page\n{FIRST_CALL_MARKERS[0]}\nSTALE\n{FIRST_CALL_MARKERS[1]}\nend\n")
    return path


def _first_call_record(op, date, cold, cached, device="NVIDIA TestGPU", shape_set=None, mode=None):
    stats = {"cold": {"chosen_tuned": 3, "kernels_compiled": 9}, "cached": {"chosen_disk": 3, "kernels_loaded": 4}}
    if mode == "table":
        stats = {"cold": {"chosen_table": 1, "chosen_table_nearest": 2, "kernels_compiled": 3},
                 "cached": {"chosen_table_nearest": 2, "chosen_table": 1, "kernels_loaded": 3}}
    record = {"op": op, "date": date, "device": {"kind": device}, "interpreted": False, "complete": True,
              "shapes": [{"B": 2, "T": 64, "H": 2, "K": 16, "V": 16}],
              "first_call": {"cold_s": cold, "cached_s": cached, "ratio": cached / cold,
                             "runs": {run: {"stats": s} for run, s in stats.items()}}}
    if shape_set is not None:  # records before the off_table set have none: target
        record["shape_set"] = shape_set
    if mode is not None:  # records before the tuning table ran with `on` and did not say so
        record["first_call"]["environment"] = {"WORKBENCH_AUTOTUNE": mode}
    return record


def test_first_call_tables_take_each_ops_latest_record(tmp_path):
    folder = tmp_path / "bench" / "first_call"
    folder.mkdir(parents=True)
    for name, record in {"chunk_gla-20260101T000000Z": _first_call_record("chunk_gla", "2026-01-01T00:00", 50, 40),
                         "chunk_gla-20260102T000000Z": _first_call_record("chunk_gla", "2026-01-02T00:00", 100, 5),
                         "recurrent-20260101T000000Z": _first_call_record("recurrent", "2026-01-01T00:00", 80, 4),
                         "recurrent-20260103T000000Z": _first_call_record("recurrent", "2026-01-03T00:00", 9, 2,
                                                                          shape_set="off_table", mode="table"),
                         # another GPU kind: its own (older) record stays, in its own line and rows
                         "recurrent-20251231T000000Z": _first_call_record("recurrent", "2025-12-31T00:00", 12, 3,
                                                                          device="NVIDIA ZetaGPU", mode="table"),
                         "chunk_gla-20251231T000000Z": _first_call_record("chunk_gla", "2025-12-31T00:00", 14, 4,
                                                                          device="NVIDIA ZetaGPU", mode="table",
                                                                          shape_set="off_table"),
                         }.items():
        (folder / f"{name}.json").write_text(json.dumps(record))
    readme = tmp_path / "README.md"
    readme.write_text(f"{MARKERS[0]}\n{MARKERS[1]}\n- cached:\n{FIRST_CALL_MARKERS[0]}\n{FIRST_CALL_MARKERS[1]}\n")
    page = _autotune_doc(tmp_path)
    result = _run_perf_table("--bench", tmp_path / "bench", "--docs", tmp_path / "performance.md", "--readme",
                             readme, "--autotune-doc", page)
    assert result.returncode == 0, result.stderr
    rows = [line for line in page.read_text().splitlines() if line.startswith("| ") and not line.startswith("| op ")]
    assert [row.split(" | ")[:3] for row in rows] == [["| recurrent", "TestGPU", "target"],
                                                      ["| recurrent", "TestGPU", "off_table"],
                                                      ["| chunk_gla", "TestGPU", "target"],
                                                      ["| recurrent", "ZetaGPU", "target"],
                                                      ["| chunk_gla", "ZetaGPU", "off_table"]], rows
    assert "| on | 100.0 | 5.0 | 0.05 | 3 / 0 (0) → 3 | 9 → 4 |" in rows[2] and "STALE" not in page.read_text()
    assert "| table | 9.0 | 2.0 | 0.22 | 0 / 3 (2) → 3 | 3 → 3 |" in rows[1]
    text = readme.read_text()
    assert "at the target shape" in text and "at T = 3000, H = 12" in text and "WORKBENCH_AUTOTUNE=on and table" in text
    assert "- TestGPU: recurrent 80 → 4.0 s; chunk_gla 100 → 5.0 s. Off-table: recurrent 9 → 2.0 s.\n" in text
    assert "- ZetaGPU: recurrent 12 → 3.0 s. Off-table: chunk_gla 14 → 4.0 s.\n" in text


def test_committed_perf_tables_are_current():
    """README.md, docs/performance.md and docs/autotune.md hold what scripts/perf_table.py writes from
    data/bench/ now."""
    result = _run_perf_table("--check")
    assert result.returncode == 0, result.stderr + "run: python scripts/perf_table.py"


# ----------------------------------------------------------------------------- scripts


@pytest.mark.parametrize("script", ["fetch_peers.sh", "install_peers.sh"])
def test_shell_scripts_parse(script):
    subprocess.run(["bash", "-n", str(ROOT / "scripts" / script)], check=True)


def test_install_peers_says_what_is_missing(tmp_path):
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    result = subprocess.run(["bash", str(ROOT / "scripts" / "install_peers.sh"), str(tmp_path / "empty"),
                             str(tmp_path / "site")], capture_output=True, text=True)
    assert result.returncode == 1 and "fetch_peers.sh" in result.stderr, result.stderr


def test_tuning_table_price_table_matches_its_records():
    """data/bench/tuning_table/README.md's table: each row's medians and ratio are those of the records in
    <run>/table/ and <run>/on/ (the same op, shape and pass), and every Triton row of those records has a
    row."""
    folder = ROOT / "data" / "bench" / "tuning_table"
    medians = {}
    for path in sorted(folder.glob("*/*/*.json")):
        run, mode = path.parent.parent.name, path.parent.name
        record = json.loads(path.read_text())
        for row in record["results"]:
            if row["implementation"] == "triton":
                shape = " ".join(f"{k}={v}" for k, v in row["shape"].items())
                medians[(run, mode, record["op"], shape, row["pass"])] = row["ms"]["median"]
    rows = [[c.strip() for c in line.strip("|").split("|")]
            for line in (folder / "README.md").read_text().splitlines()
            if line.startswith("| ") and not line.startswith("| run ")]
    assert len(rows) == len(medians) // 2 >= 54, (len(rows), len(medians))
    for run, op, shape, name, table_ms, tuned_ms, ratio in rows:
        p = {"forward": "forward", "forward+backward": "forward_backward"}[name]
        t, u = medians[(run, "table", op, shape, p)], medians[(run, "on", op, shape, p)]
        assert (table_ms, tuned_ms, ratio) == (f"{t:.3f}", f"{u:.3f}", f"{t / u:.3f}"), (run, op, shape, name)

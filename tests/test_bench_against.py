"""`workbench bench --against DIR`: another checkout of workbench loaded into the run as a peer (bench/against.py)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workbench import bench, cli
from workbench.bench import against

PACKAGE = Path(__file__).resolve().parents[1] / "workbench"

DOUBLED_OUTPUT = '''

_recurrent_of_this_checkout = recurrent


def recurrent(*args, **kwargs):  # a regression in this checkout: the output doubled
    o, state = _recurrent_of_this_checkout(*args, **kwargs)
    return o * 2, state
'''


def _checkout(folder: Path, edit: str = "") -> Path:
    """A copy of this checkout's package in `folder` (sources only), `edit` appended to its __init__.py."""
    shutil.copytree(PACKAGE, folder / "workbench", ignore=shutil.ignore_patterns("__pycache__"))
    if edit:
        with open(folder / "workbench" / "__init__.py", "a") as f:
            f.write(edit)
    return folder


def _rows(record, name):
    return {r["pass"]: r for r in record["results"] if r["implementation"] == name}


def test_another_checkout_is_timed_as_a_peer_and_paired_with_the_kernel(tmp_path):
    """The other checkout's op runs on the run's inputs as the peer `workbench@<folder>`, from its own files; an
    unchanged copy gives our outputs bit for bit; `--paired` pairs the kernel with it; the record names it."""
    other = _checkout(tmp_path / "baseline")
    out = tmp_path / "records"
    assert cli.main(["bench", "--op", "recurrent", "--shapes", "tiny", "--iters", "1", "--implementations", "triton",
                     "--no-variants", "--timer", "copies", "--paired", "2", "--against", str(other),
                     "--out", str(out)]) == 0
    (path,) = out.glob("recurrent-*.json")
    record = json.loads(path.read_text())
    (entry,) = record["against"]
    assert entry["path"] == str(other.resolve()) and entry["name"] == "workbench@baseline"
    assert entry["git"] == {"commit": None}  # a copy outside any git checkout
    module = sys.modules[entry["module"]]
    assert Path(module.__file__).resolve() == (other / "workbench" / "__init__.py").resolve()
    assert Path(sys.modules[entry["module"] + ".recurrent"].__file__).resolve().is_relative_to(other.resolve())
    ours, theirs = _rows(record, "triton"), _rows(record, "workbench@baseline")
    for pass_ in ("forward", "forward_backward"):
        assert theirs[pass_]["kind"] == "peer" and theirs[pass_]["status"] == "ok"
        assert theirs[pass_]["errors"] == ours[pass_]["errors"]  # the same kernels on the same inputs
        assert ours[pass_]["paired"]["peer"] == "workbench@baseline" and ours[pass_]["paired"]["rounds"] == 2
    assert {"peer": "workbench@baseline", "status": "measured"} in record["peers"]


def test_the_other_checkouts_own_code_runs(tmp_path):
    """A checkout whose op doubles its output is WRONG in the record while this checkout's rows stay right: the
    peer runs the other files, not this process's `workbench`."""
    other = _checkout(tmp_path / "regressed", DOUBLED_OUTPUT)
    record = bench.run("recurrent", "tiny", iters=1, implementations=["triton"], variants=False, against=[str(other)])
    ours, theirs = _rows(record, "triton"), _rows(record, "workbench@regressed")
    assert ours["forward"]["status"] == "ok" and theirs["forward"]["status"] == "WRONG"
    assert theirs["forward"]["errors"]["o"]["rms_rel"] > 0.5


def test_a_folder_without_workbench_or_this_checkout_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"--against: .* is not a checkout of workbench \(no .*__init__.py\)"):
        bench.run("recurrent", "tiny", iters=1, implementations=["triton"], variants=False, against=[str(tmp_path)])
    with pytest.raises(ValueError, match=r"--against: .* is this checkout itself"):
        against.load(PACKAGE.parent)
    (tmp_path / "a" / "same").mkdir(parents=True)
    (tmp_path / "b" / "same").mkdir(parents=True)
    for folder in ("a", "b"):
        _checkout(tmp_path / folder / "same")
    with pytest.raises(ValueError, match=r"--against: two checkouts with one folder name"):
        bench.run("recurrent", "tiny", iters=1, implementations=["triton"], variants=False,
                  against=[str(tmp_path / "a" / "same"), str(tmp_path / "b" / "same")])


@pytest.mark.parametrize("mode", [["--first-call"], ["--data-parallel"], ["--op", "ring_attention"]])
def test_against_in_a_mode_without_peers_is_refused(tmp_path, mode, capsys):
    argv = ["bench", "--op", "recurrent", *mode, "--shapes", "tiny", "--against", str(tmp_path)]
    with pytest.raises(SystemExit):
        cli.main(argv)
    assert "--against: times another checkout" in capsys.readouterr().err


HASHES = """
import importlib, json, sys
import workbench  # first: WORKBENCH_INTERPRET=0 keeps Triton compiled, as on a GPU (no GPU is needed to hash)
from workbench.bench import against
from workbench.chunk_gla import kernels
from workbench.kernel_hash import package_module_name, source_hash
from workbench.signature import unwrap


def jitted(module, name):  # the jitted function under the autotuner and heuristics, as the launcher keys it
    return unwrap(getattr(module, name))[2]


names = ("chunk_o_kernel", "chunk_a_kernel")
found = {"ours": [source_hash(jitted(kernels, n)) for n in names]}
for folder in sys.argv[1:]:
    theirs = importlib.import_module(against.load(folder) + ".chunk_gla.kernels")
    assert theirs.__name__ != kernels.__name__ and theirs.chunk_o_kernel is not kernels.chunk_o_kernel
    assert package_module_name(theirs.__name__) == kernels.__name__ == package_module_name(kernels.__name__)
    found[folder] = [source_hash(jitted(theirs, n)) for n in names]
print(json.dumps(found))
"""


def test_the_other_checkouts_unchanged_kernels_hash_as_ours_and_find_the_tables_entries(tmp_path):
    """Its kernels live in modules named `workbench_against_<hash>...`; hashed under that name they would miss
    every tuning-table entry and run untuned, timing the table's absence rather than the code (an identical
    copy read 0.77x ours at B1 T64k on an H200 so, 2026-11-29). A kernel it changed must still hash apart."""
    same = _checkout(tmp_path / "same")
    edited = _checkout(tmp_path / "edited")
    path = edited / "workbench" / "chunk_gla" / "kernels.py"
    path.write_text(path.read_text().replace("def chunk_o_kernel(", "def chunk_o_kernel(  # edited\n", 1))
    env = {**os.environ, "WORKBENCH_INTERPRET": "0", "TRITON_INTERPRET": "0"}
    result = subprocess.run([sys.executable, "-c", HASHES, str(same), str(edited)], env=env, capture_output=True,
                            text=True, cwd=PACKAGE.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    (o_ours, a_ours), (o_same, a_same), (o_edited, a_edited) = found["ours"], found[str(same)], found[str(edited)]
    shipped = {e["source"] for e in json.loads((PACKAGE / "tuning" / "NVIDIA_H200.json").read_text())
               if e["kernel"] == "chunk_o_kernel"}
    assert o_ours in shipped  # the entries an unchanged copy must find
    assert (o_same, a_same) == (o_ours, a_ours)
    assert o_edited != o_ours and a_edited == a_ours  # only the kernel it changed hashes apart


def test_the_table_says_where_each_checkouts_configs_came_from():
    """On a GPU the printed table names each checkout's config sources and warns when any did not come from the
    tuning table — the two ways a paired ratio measured tuning rather than code on 2026-11-29 (a copy whose
    kernels missed the table; choices a refresh run had left in the machine's cache)."""
    from workbench.bench.table import table

    def chosen(*sources):
        return {"mode": "table", "stats": {}, "chosen": [{"kernel": f"k{i}", "key": {}, "config": {}, "source": s}
                                                         for i, s in enumerate(sources)]}

    record = {"op": "chunk_gla", "shape_set": "target", "dtype": "bfloat16", "iters": 1, "warmup": 1,
              "interpreted": False, "device": {"kind": "NVIDIA H200", "platform": "gpu"}, "results": [],
              "peers": [], "autotune": chosen("table", "table", "table_sibling"),
              "against": [{"name": "workbench@main", "autotune": chosen("table", "table_nearest")}]}
    text = table(record)
    assert "configs: triton 2 table, 1 table_sibling; workbench@main 1 table, 1 table_nearest" in text
    assert "note:" not in text
    record["against"][0]["autotune"] = chosen("table", "tuned")
    record["autotune"] = chosen("disk")
    note = [line for line in table(record).splitlines() if line.startswith("note:")]
    assert note == ["note: not every config of triton, workbench@main came from the tuning table: the paired "
                    "ratios compare tuning as well as code"]
    record["interpreted"] = True  # the interpreter chooses no configs: nothing to say
    assert "configs:" not in table(record)
    del record["against"]
    record["interpreted"] = False
    assert "configs:" not in table(record)

"""`workbench bench --against DIR`: another checkout of workbench loaded into the run as a peer (bench/against.py)."""

import json
import shutil
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

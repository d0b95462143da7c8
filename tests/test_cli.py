"""`workbench verify` end to end on its tiny case matrix (`--quick`): exit status, table, report."""

import json

import jax.numpy as jnp
import pytest

import workbench
from workbench import autotune, cli, launch, verify


def test_verify_quick_passes_and_writes_report(tmp_path, capsys):
    """Through the CLI with two worker processes; their rows equal one process's, in the same order."""
    # float32 only: the CLI is under test here; bfloat16 goes through it in the reference test.
    out = tmp_path / "report"
    status = cli.main(["verify", "--op", "recurrent", "--quick", "--dtype", "float32", "--out", str(out),
                       "--jobs", "2"])
    stdout = capsys.readouterr().out
    assert status == 0, stdout
    results = json.loads((out / "results.json").read_text())
    assert results["ok"] and results["implementation"] == "triton" and results["jobs"] == 2
    rows = results["rows"]
    assert {(r["case"], r["dtype"]) for r in rows} == {("tiny_gk", "float32"), ("tiny_varlen", "float32")}
    assert {"o", "final_state", "dq", "dk", "dv", "dgk", "dinitial_state"} <= {r["name"] for r in rows}
    assert all(r["ok"] and r["kernel_err"] <= r["tolerance"] for r in rows)
    assert "FAIL" not in stdout and "PASS" in stdout and "(2 processes)" in stdout
    assert (out / "summary.md").read_text().startswith("# workbench verify")
    figures = sorted(p.name for p in out.glob("*.png"))
    assert "recurrent-tiny_gk.png" in figures and "recurrent-tiny_varlen.png" in figures
    assert any(name.endswith("-dq-map.png") for name in figures)

    one = verify.run(["recurrent"], quick=True, dtypes=("float32",), cases=["tiny_varlen"], jobs=1, progress=None)
    assert one.jobs == 1 and [r["case"] for r in rows] == sorted(r["case"] for r in rows)  # tiny_gk first
    assert [(r["case"], r["name"], r["kernel_err"], r["reference_err"]) for r in rows if r["case"] == "tiny_varlen"] \
        == [(r.case, r.name, r.kernel_err, r.reference_err) for r in one.rows]


def test_verify_jobs_must_be_positive_and_workers_keep_their_own_cache(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="jobs: expected a positive integer, got 0"):
        verify.run(["recurrent"], quick=True, jobs=0, progress=None)
    monkeypatch.setenv(autotune.CACHE_VAR, str(tmp_path))
    monkeypatch.setattr(launch, "INTERPRET", False)
    with verify._Workers(2) as workers:  # no task submitted: no process starts
        assert workers.env == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false",
                               autotune.CACHE_VAR: str(tmp_path / "verify-jobs")}
    monkeypatch.setattr(launch, "INTERPRET", True)
    assert verify.default_jobs() == 1


def test_verify_fails_on_a_wrong_output(tmp_path, capsys, monkeypatch):
    correct = workbench.recurrent

    def off_by_a_bit(*args, implementation=None, **kwargs):
        o, state = correct(*args, implementation=implementation, **kwargs)
        return (o + 1e-2 if implementation != "reference" else o), state

    monkeypatch.setattr(workbench, "recurrent", off_by_a_bit)
    out = tmp_path / "report"
    status = cli.main(["verify", "--op", "recurrent", "--quick", "--case", "tiny_gk", "--dtype", "float32",
                       "--out", str(out)])
    stdout = capsys.readouterr().out
    assert status == 1
    failed = [line for line in stdout.splitlines() if line.rstrip().endswith("FAIL")]
    assert [line.split()[3] for line in failed] == ["o"], stdout
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert [r["name"] for r in rows if not r["ok"]] == ["o"]


def test_verify_reference_holds_its_own_budget(tmp_path, capsys):
    status = cli.main(["verify", "--quick", "--implementation", "reference", "--case", "tiny_varlen",
                       "--out", str(tmp_path)])
    stdout = capsys.readouterr().out
    assert status == 0, stdout
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["implementation"] == "reference"
    assert {r["dtype"] for r in results["rows"]} == {"float32", "bfloat16"}
    assert all(r["kernel_err"] == r["reference_err"] for r in results["rows"])


def test_verify_rejects_an_unknown_case(tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["verify", "--quick", "--case", "no_such_case", "--out", str(tmp_path)])
    assert exit_info.value.code == 2


def test_verify_flash_attention_quick_passes(tmp_path, capsys):
    out = tmp_path / "report"
    status = cli.main(["verify", "--op", "flash_attention", "--quick", "--dtype", "float32", "--out", str(out)])
    stdout = capsys.readouterr().out
    assert status == 0, stdout
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert {r["case"] for r in rows} == {"tiny_causal_sinks", "tiny_varlen"}
    sinks_case = {r["name"] for r in rows if r["case"] == "tiny_causal_sinks"}
    assert sinks_case == {"o", "lse", "dq", "dk", "dv", "dsinks"}
    assert all(r["ok"] and r["kernel_err"] <= r["tolerance"] for r in rows)
    assert "flash_attention-tiny_causal_sinks-float32-dq-map.png" in {p.name for p in out.glob("*.png")}


def test_verify_flash_attention_fails_on_a_wrong_empty_row_lse(tmp_path, capsys, monkeypatch):
    """tiny_varlen has a sequence with queries and no keys: its lse must be −inf, not a finite number."""
    correct = workbench.flash_attention

    def finite_lse(*args, implementation=None, **kwargs):
        o, lse = correct(*args, implementation=implementation, **kwargs)
        return o, (jnp.where(jnp.isneginf(lse), 0.0, lse) if implementation != "reference" else lse)

    monkeypatch.setattr(workbench, "flash_attention", finite_lse)
    status = cli.main(["verify", "--op", "flash_attention", "--quick", "--case", "tiny_varlen", "--dtype", "float32",
                       "--out", str(tmp_path)])
    stdout = capsys.readouterr().out
    assert status == 1
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert [r["name"] for r in rows if not r["ok"]] == ["lse"], stdout


def test_tune_is_refused_without_a_gpu_and_needs_its_flag(capsys):
    """`workbench tune --write-table` tunes on a GPU only: in the interpreter it is refused (exit 2) and
    writes nothing; without --write-table argparse refuses it."""
    from workbench import launch, tuning_table

    if not launch.INTERPRET:
        pytest.skip("on a GPU this would tune for minutes")
    before = sorted(tuning_table.FOLDER.glob("*.json")) if tuning_table.FOLDER.exists() else []
    assert cli.main(["tune", "--write-table", "--op", "recurrent", "--shapes", "tiny"]) == 2
    assert "refused: no CUDA GPU" in capsys.readouterr().err
    assert (sorted(tuning_table.FOLDER.glob("*.json")) if tuning_table.FOLDER.exists() else []) == before
    with pytest.raises(SystemExit):
        cli.main(["tune"])


def test_tune_hands_its_options_to_the_table_builder(monkeypatch, tmp_path):
    """`workbench tune`'s options reach `tune.write_table` as lists and counts (`--compile-workers` included)."""
    from workbench.bench import tune

    seen = {}

    def write_table(ops, shape_sets, **kw):
        seen.update(ops=ops, shape_sets=shape_sets, **kw)
        return tmp_path / "table.json"

    monkeypatch.setattr(tune, "write_table", write_table)
    assert cli.main(["tune", "--write-table", "--op", "chunk_kda", "--shapes", "target,wide", "--kernels", "a,b",
                     "--passes", "forward", "--compile-workers", "16", "--dtypes", "float32"]) == 0
    assert seen["ops"] == ["chunk_kda"] and seen["shape_sets"] == ["target", "wide"]
    assert (seen["kernels"], seen["passes"], seen["compile_workers"], seen["dtypes"]) == (
        ["a", "b"], ["forward"], 16, ["float32"])
    cli.main(["tune", "--write-table", "--op", "recurrent"])
    assert seen["compile_workers"] == 0

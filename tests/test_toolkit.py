"""The public toolkit (docs/API.md, "Toolkit") on a kernel that is not in the package (`tests/toolkit_example.py`):
`workbench.triton_call` launches it, `testing.check` holds it to the oracle rule and catches it when it is
wrong, `strategies` draw its inputs, `plots.report_errors` draws the reports, and `workbench verify --module`
runs its cases in the same table as ours.
"""

from __future__ import annotations

import functools
import json
import sys

import workbench  # noqa: F401  (first: configures Triton's interpreter before triton loads)

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from matplotlib.figure import Figure

from tests import toolkit_example
from workbench import cli, plots, strategies, testing, verify


def _x(dtype=jnp.bfloat16, shape=(40,), seed=0):
    return testing.normal(jax.random.key(seed), shape, dtype, scale=3.0)


def test_a_correct_kernel_passes_in_every_dtype():
    for dtype in (jnp.float32, jnp.bfloat16, jnp.float16):
        report = testing.check(toolkit_example.softplus, toolkit_example.softplus_reference, (_x(dtype),))
        print(report)
        assert report.ok and report.names == ("out", "dx"), report
        assert report.raise_if_failed() is report
    assert jax.config.jax_enable_x64  # the suite's conftest turned it on: check leaves the setting it found


def test_float64_is_enabled_only_inside_check(monkeypatch):
    """The oracle runs in float64 although the caller's process has x64 off, and it stays off afterwards."""
    seen = []

    def reference(x):
        seen.append(jnp.zeros(()).dtype)  # the default float: float64 only with x64 on
        return jax.nn.softplus(x)

    with jax.enable_x64(False):
        report = testing.check(toolkit_example.softplus, reference, (_x(jnp.float32),))
        assert not jax.config.jax_enable_x64
    assert report.ok
    assert np.dtype("float64") in seen and np.dtype("float32") in seen


def test_an_output_off_by_a_few_percent_fails():
    def off(x):
        return toolkit_example.softplus(x) * 1.04

    report = testing.check(off, toolkit_example.softplus_reference, (_x(),))
    assert not report["out"].ok, report
    with pytest.raises(AssertionError, match="over the error budget: out"):
        report.raise_if_failed()


def test_a_gradient_scaled_by_five_percent_fails(monkeypatch):
    monkeypatch.setattr(toolkit_example, "SCALE_GRADIENT", 1.05)
    report = testing.check(toolkit_example.softplus, toolkit_example.softplus_reference, (_x(),))
    print(report)
    assert report["out"].ok and not report["dx"].ok, report


def test_wrong_shapes_and_bad_arguments_are_value_errors():
    x = _x()
    with pytest.raises(ValueError, match=r"^fn: returns .*bfloat16\[39\].*the reference .*bfloat16\[40\]"):
        testing.check(lambda x: toolkit_example.softplus(x)[:-1], toolkit_example.softplus_reference, (x,))
    with pytest.raises(ValueError, match="^argnums: 3 is not an argument index"):
        testing.check(toolkit_example.softplus, toolkit_example.softplus_reference, (x,), argnums=(3,))
    with pytest.raises(ValueError, match="^output_names: 2 names for 1 outputs"):
        testing.check(toolkit_example.softplus, toolkit_example.softplus_reference, (x,), output_names=("a", "b"))


def test_names_follow_the_signature_and_pytrees():
    def fn(q, k, scale):
        return {"o": q * k * scale, "s": (q * k).sum()}

    q, k = _x(jnp.float32, (4, 8), 1), _x(jnp.float32, (4, 8), 2)
    report = testing.check(fn, fn, (q, k, 0.5), keep_arrays=("dk",))
    assert report.names == ("out['o']", "out['s']", "dq", "dk"), report.names
    assert report.ok
    kernel, oracle = report.arrays["dk"]
    assert kernel.shape == oracle.shape == (4, 8)


@given(strategies.shapes(B=strategies.batches, T=strategies.seq_lens, D=8), strategies.seeds,
       strategies.kernel_dtypes)
@strategies.fewer_examples(2)
def test_property_over_shapes(shape, seed, dtype):
    x = testing.normal(jax.random.key(seed), (shape["B"], shape["T"], shape["D"]), dtype, scale=3.0)
    testing.check(toolkit_example.softplus, toolkit_example.softplus_reference, (x,), seed=seed).raise_if_failed()


@given(strategies.log_gates((3, 5), strength=5.0), strategies.arrays((2, 3), jnp.bfloat16), strategies.cu_seqlens())
def test_strategies_draw_what_they_say(gates, array, bounds):
    assert gates.shape == (3, 5) and gates.dtype == jnp.float32 and bool(jnp.all(gates <= 0))
    assert array.shape == (2, 3) and array.dtype == jnp.bfloat16
    assert bounds[0] == 0 and all(a <= b for a, b in zip(bounds, bounds[1:]))


def test_report_errors_draws_one_report_and_a_sweep():
    reports = [testing.check(toolkit_example.softplus, toolkit_example.softplus_reference, (_x(shape=(T,)),))
               for T in (8, 40)]
    assert isinstance(plots.report_errors(reports[0]), Figure)
    fig = plots.report_errors(reports, x=[8, 40], names=["dx"])
    assert isinstance(fig, Figure)
    assert len(fig.axes[0].lines) == 3  # kernel, reference and tolerance of dx
    with pytest.raises(ValueError, match="^x: expected one value per report"):
        plots.report_errors(reports, x=[8])


def test_verify_runs_a_module_of_your_own(tmp_path, capsys):
    code = cli.main(["verify", "--module", "tests.toolkit_example", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "tests.toolkit_example  vector_odd_length" in out and "matrix" in out
    results = json.loads((tmp_path / "results.json").read_text())
    assert {r["op"] for r in results["rows"]} == {"tests.toolkit_example"}
    assert all(r["ok"] for r in results["rows"]) and len(results["rows"]) == 2 * 2 * 2  # cases × dtypes × (out, dx)


def test_verify_fails_a_wrong_module_and_refuses_a_module_without_cases(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(toolkit_example, "SCALE_GRADIENT", 1.05)
    assert cli.main(["verify", "--module", "tests.toolkit_example", "--out", str(tmp_path / "a")]) == 1
    assert "FAIL" in capsys.readouterr().out
    (tmp_path / "no_cases.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["verify", "--module", "no_cases", "--out", str(tmp_path / "b")])
    assert exit_info.value.code == 2 and "must define VERIFY_CASES" in capsys.readouterr().err
    sys.modules.pop("no_cases", None)


def test_triton_call_works_under_vmap():
    x = _x(jnp.float32, (3, 16))
    got = jax.vmap(toolkit_example.softplus)(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(jax.nn.softplus(x)), rtol=1e-6, atol=1e-6)


def test_verify_check_case_is_what_the_cli_runs():
    spec = verify.module_spec("tests.toolkit_example")
    assert [c.name for c in spec.cases] == ["vector_odd_length", "matrix"]
    result = spec.run(spec.cases[0], "float32", "triton", ())
    assert [c.name for c in result.comparisons] == ["out", "dx"] and all(c.ok for c in result.comparisons)
    assert functools.reduce(lambda a, c: a and c.finite, result.comparisons, True)

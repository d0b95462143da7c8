"""`workbench verify`: every op against its float64 oracle over a fixed matrix of cases.

For each case and dtype the op runs on inputs rounded to that dtype, with random cotangents for
every output (final states included), and three results are compared (`workbench.testing`):

    kernel     the implementation under test (`implementation="triton"`, or the reference itself
               with `implementation="reference"`) in the dtype;
    reference  the pure-JAX reference in the same dtype;
    oracle     the reference on float64 casts of the same rounded inputs and cotangents.

Each output and each gradient passes when err(kernel, oracle) ≤ 1.5 · err(reference, oracle) + atol.

Adding an op: write a `run(case, dtype, implementation) -> CaseResult` (usually a few lines around
`check_vjp`), list its cases, and add an `OpSpec` to `OPS`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import platform
import sys
import time
import traceback
import zlib
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import workbench

from . import launch, testing

DTYPES = ("float32", "bfloat16")
IMPLEMENTATIONS = ("triton", "reference")


# ----------------------------------------------------------------------------- data


@dataclasses.dataclass(frozen=True)
class Case:
    """One configuration of an op; `params` are read by the op's runner."""

    name: str
    params: Mapping[str, Any]

    @property
    def seed(self) -> int:
        """Stable per case name, so one case reproduces alone (`--case NAME`)."""
        return zlib.crc32(self.name.encode()) % 2**31


@dataclasses.dataclass
class CaseResult:
    """What one case in one dtype produced: a comparison per output and gradient, and the
    (kernel, oracle) arrays of the gradients named in the op's `error_maps`."""

    comparisons: list[testing.Comparison]
    arrays: dict[str, tuple[np.ndarray, np.ndarray]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """An op as `verify` sees it.

    run: `run(case, dtype, implementation, want_arrays)` → `CaseResult`.
    cases: the fixed matrix; quick: one or two tiny cases for smoke tests (`--quick`).
    map_cases, map_grads: the cases and gradients whose |kernel − oracle| maps go in the report.
    """

    run: Callable[[Case, str, str, Sequence[str]], CaseResult]
    cases: tuple[Case, ...]
    quick: tuple[Case, ...]
    map_cases: tuple[str, ...]
    map_grads: tuple[str, ...] = ("dq", "dk")


@dataclasses.dataclass(frozen=True)
class Row:
    """One line of the table: one output or gradient of one case in one dtype."""

    op: str
    case: str
    dtype: str
    name: str
    kernel_err: float
    reference_err: float
    tolerance: float
    kernel_max_abs: float
    finite: bool
    ok: bool
    error: str = ""

    @classmethod
    def of(cls, op: str, case: str, dtype: str, c: testing.Comparison) -> Row:
        return cls(op, case, dtype, c.name, c.kernel_err, c.reference_err, c.tolerance, c.kernel_max_abs,
                   c.finite, c.ok)

    @classmethod
    def failed(cls, op: str, case: str, dtype: str, error: str) -> Row:
        nan = float("nan")
        return cls(op, case, dtype, "exception", nan, nan, nan, nan, False, False, error)

    @property
    def verdict(self) -> str:
        return "PASS" if self.ok else "FAIL"

    def comparison(self) -> testing.Comparison:
        return testing.Comparison(self.name, self.dtype, self.kernel_err, self.reference_err,
                                  self.kernel_max_abs, self.tolerance, self.finite)


# ----------------------------------------------------------------------------- the generic check


def check_vjp(op: Callable, inputs: Mapping[str, Any], differentiable: Sequence[str],
              output_names: Sequence[str], implementation: str, seed: int,
              want_arrays: Sequence[str] = ()) -> CaseResult:
    """Compare outputs and gradients of `op(**inputs, implementation=...)` with the oracle.

    inputs: keyword arguments, floating arrays already in the dtype under test (states may stay
    float32). differentiable: names of inputs to differentiate (absent or None ones are skipped);
    gradients are named `d<name>`. output_names: names of the op's outputs, in order.
    """
    wrt = [n for n in differentiable if inputs.get(n) is not None]

    def vjp(impl: str, args: Mapping[str, Any], cotangents=None):
        def fn(*primals):
            return op(**{**args, **dict(zip(wrt, primals))}, implementation=impl)

        out, pullback = jax.vjp(fn, *[args[n] for n in wrt])
        if cotangents is None:
            cotangents = testing.random_cotangents(seed, out)
        return out, pullback(cotangents), cotangents

    out_k, grads_k, cts = vjp(implementation, inputs)
    if implementation == "reference":
        out_r, grads_r = out_k, grads_k
    else:
        out_r, grads_r, _ = vjp("reference", inputs, cts)
    arrays64 = testing.to_float64({n: x for n, x in inputs.items() if hasattr(x, "dtype")})
    out_o, grads_o, _ = vjp("reference", {**inputs, **arrays64}, testing.to_float64(cts))

    names = list(output_names) + [f"d{n}" for n in wrt]
    kernel = list(out_k) + list(grads_k)
    reference = list(out_r) + list(grads_r)
    oracle = list(out_o) + list(grads_o)
    comparisons = [testing.compare(n, a, b, c) for n, a, b, c in zip(names, kernel, reference, oracle)]
    arrays = {n: (np.asarray(a, np.float64), np.asarray(c, np.float64))
              for n, a, c in zip(names, kernel, oracle) if n in want_arrays}
    return CaseResult(comparisons, arrays)


# ----------------------------------------------------------------------------- recurrent


def _recurrent_case(name: str, *, B: int = 1, T: int = 32, H: int = 2, K: int = 16, V: int = 16,
                    gates: Sequence[str] = (), strength: float = 1.0, reverse: bool = False,
                    seqlens: Sequence[int] | None = None) -> Case:
    return Case(name, dict(B=B, T=T, H=H, K=K, V=V, gates=tuple(gates), strength=strength,
                           reverse=reverse, seqlens=None if seqlens is None else tuple(seqlens)))


def _run_recurrent(case: Case, dtype: str, implementation: str, want_arrays: Sequence[str]) -> CaseResult:
    p = case.params
    seqlens = p["seqlens"]
    B, T = (1, sum(seqlens)) if seqlens else (p["B"], p["T"])
    inputs = testing.recurrent_inputs(case.seed, B, T, p["H"], p["K"], p["V"], dtype=jnp.dtype(dtype),
                                      gates=p["gates"], strength=p["strength"],
                                      n_seqs=len(seqlens) if seqlens else None)
    if seqlens:
        inputs["cu_seqlens"] = jnp.asarray(np.cumsum([0, *seqlens]), jnp.int32)
    inputs["reverse"] = p["reverse"]
    # Looked up at call time, so a test can swap in a broken op.
    return check_vjp(lambda **kw: workbench.recurrent(**kw), inputs,
                     ("q", "k", "v", "g", "gk", "gv", "initial_state"), ("o", "final_state"),
                     implementation, case.seed, want_arrays)


# Small on purpose: the Triton interpreter costs ~0.1 s per (step × head) of backward on CPU.
RECURRENT_CASES = (
    _recurrent_case("no_gate"),
    _recurrent_case("gk", B=2, T=24, H=1, K=32, V=32, gates=("gk",)),
    _recurrent_case("g+g_gamma", gates=("g", "g_gamma")),
    _recurrent_case("gv", gates=("gv",)),
    _recurrent_case("all_gates_strong", gates=("g", "g_gamma", "gk", "gv"), strength=5.0),
    _recurrent_case("reverse", T=64, H=1, gates=("gk", "gv"), reverse=True),
    _recurrent_case("varlen", H=2, gates=("gk",), seqlens=(13, 0, 1, 18)),
    _recurrent_case("odd_sizes", T=33, H=1, K=12, V=20, gates=("g", "gk")),
)

RECURRENT_QUICK = (
    _recurrent_case("tiny_gk", T=8, H=2, K=8, V=8, gates=("g", "gk")),
    _recurrent_case("tiny_varlen", H=1, K=8, V=8, gates=("gk",), seqlens=(5, 0, 1)),
)


# ----------------------------------------------------------------------------- registry

OPS: dict[str, OpSpec] = {
    "recurrent": OpSpec(run=_run_recurrent, cases=RECURRENT_CASES, quick=RECURRENT_QUICK,
                        map_cases=("all_gates_strong", "tiny_gk")),
}


# ----------------------------------------------------------------------------- running


@dataclasses.dataclass
class Report:
    rows: list[Row]
    arrays: dict[tuple[str, str, str, str], tuple[np.ndarray, np.ndarray]]  # (op, case, dtype, grad)
    implementation: str
    seconds: float
    case_seconds: dict[tuple[str, str, str], float]

    @property
    def ok(self) -> bool:
        return bool(self.rows) and all(r.ok for r in self.rows)


def run(ops: Sequence[str] | None = None, *, implementation: str = "triton", dtypes: Sequence[str] = DTYPES,
        quick: bool = False, cases: Sequence[str] | None = None, progress=sys.stderr) -> Report:
    """Run the case matrix of `ops` (all when None) and collect every comparison.

    Turns on `jax_enable_x64` (the oracle runs in float64). An exception in a case becomes a FAIL
    row carrying its message (the traceback goes to `progress`), and the run goes on.
    """
    jax.config.update("jax_enable_x64", True)
    ops = list(OPS) if ops is None else list(ops)
    for name in ops:
        if name not in OPS:
            raise ValueError(f"op: expected one of {sorted(OPS)}, got {name!r}")
    work = []
    for name in ops:
        spec = OPS[name]
        selected = [c for c in (spec.quick if quick else spec.cases) if cases is None or c.name in cases]
        work += [(name, spec, c, d) for c in selected for d in dtypes]
    if not work:
        raise ValueError(f"case: no case of {ops} matches {list(cases or [])}")

    rows: list[Row] = []
    arrays = {}
    case_seconds = {}
    start = time.perf_counter()
    for i, (name, spec, case, dtype) in enumerate(work, 1):
        label = f"[{i:>{len(str(len(work)))}}/{len(work)}] {name} {case.name} {dtype}"
        _say(progress, f"{label} ...", end="")
        t0 = time.perf_counter()
        try:
            result = spec.run(case, dtype, implementation, spec.map_grads if case.name in spec.map_cases else ())
            new = [Row.of(name, case.name, dtype, c) for c in result.comparisons]
            arrays.update({(name, case.name, dtype, g): a for g, a in result.arrays.items()})
        except Exception as exc:  # noqa: BLE001  (reported as a FAIL row; the run goes on)
            _say(progress, "")
            traceback.print_exc(file=progress)
            new = [Row.failed(name, case.name, dtype, f"{type(exc).__name__}: {exc}")]
        rows += new
        dt = time.perf_counter() - t0
        case_seconds[(name, case.name, dtype)] = dt
        bad = [r.name for r in new if not r.ok]
        verdict = "PASS" if not bad else f"FAIL ({', '.join(bad)})"
        _say(progress, f" {dt:5.1f} s  {verdict}  [total {time.perf_counter() - start:5.1f} s]")
    return Report(rows, arrays, implementation, time.perf_counter() - start, case_seconds)


def _say(stream, text: str, end: str = "\n") -> None:
    if stream is not None:
        stream.write(text + end)
        stream.flush()


# ----------------------------------------------------------------------------- output

COLUMNS = ("op", "case", "dtype", "output", "kernel err", "reference err", "tolerance", "max|Δ|", "")


def _cells(r: Row) -> tuple[str, ...]:
    num = lambda x: f"{x:.2e}"  # noqa: E731
    return (r.op, r.case, r.dtype, r.name, num(r.kernel_err), num(r.reference_err), num(r.tolerance),
            num(r.kernel_max_abs), r.verdict)


def table(rows: Sequence[Row]) -> str:
    """The plain-text table printed by `workbench verify`."""
    cells = [COLUMNS] + [_cells(r) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) if i < 4 else c.rjust(w) for i, (c, w) in enumerate(zip(cell, widths))).rstrip()
             for cell in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    errors = [f"{r.op} {r.case} {r.dtype}: {r.error}" for r in rows if r.error]
    return "\n".join(lines + errors)


def summary_line(report: Report) -> str:
    failed = sum(not r.ok for r in report.rows)
    cases = len(report.case_seconds)
    verdict = "PASS" if report.ok else "FAIL"
    return (f"{verdict}: {len(report.rows) - failed}/{len(report.rows)} checks pass over {cases} case×dtype runs "
            f"({report.implementation}, {'Triton interpreter' if launch.INTERPRET else 'compiled Triton'}) "
            f"in {report.seconds:.1f} s")


def default_out_dir() -> Path:
    return Path("reports") / f"verify-{datetime.now().strftime('%Y-%m-%dT%H%M%S')}"


def _versions() -> dict[str, str]:
    import triton

    return {"python": platform.python_version(), "jax": jax.__version__, "jaxlib": jax.lib.__version__
            if hasattr(jax.lib, "__version__") else "", "triton": triton.__version__, "numpy": np.__version__}


def _finite_or_none(x: float):
    return x if math.isfinite(x) else None


def write(report: Report, out: Path, command: str = "") -> list[Path]:
    """Write `results.json`, `summary.md` and the figures under `out`; return the figure paths."""
    from . import plots

    out.mkdir(parents=True, exist_ok=True)
    figures: list[Path] = []
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in report.rows:
        groups.setdefault((r.op, r.case), []).append(r)
    bars: dict[tuple[str, str], Path] = {}
    for (op, case), rows in groups.items():
        rows = [r for r in rows if not r.error]
        if not rows:
            continue
        fig = plots.error_bars([r.comparison() for r in rows], f"{op} · {case} · {report.implementation} vs float64")
        bars[(op, case)] = out / f"{op}-{case}.png"
        fig.savefig(bars[(op, case)], dpi=110)
        figures.append(bars[(op, case)])
    maps: list[Path] = []
    for (op, case, dtype, grad), (kernel, oracle) in report.arrays.items():
        fig = plots.error_map(kernel, oracle, f"|{grad} − oracle| · {op} {case} {dtype} ({report.implementation})")
        maps.append(out / f"{op}-{case}-{dtype}-{grad}-map.png")
        fig.savefig(maps[-1], dpi=110)
    figures += maps

    meta = {"command": command, "date": datetime.now().isoformat(timespec="seconds"),
            "implementation": report.implementation, "interpreter": launch.INTERPRET,
            "device": str(jax.devices()[0]), "versions": _versions(), "seconds": round(report.seconds, 2),
            "ok": report.ok, "ratio": testing.RATIO, "atol": testing.ATOL}
    results = {**meta,
               "case_seconds": [{"op": o, "case": c, "dtype": d, "seconds": round(s, 2)}
                                for (o, c, d), s in report.case_seconds.items()],
               "rows": [{k: (_finite_or_none(v) if isinstance(v, float) else v)
                         for k, v in dataclasses.asdict(r).items()} for r in report.rows]}
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")

    md = [f"# workbench verify — {meta['date']}", "",
          f"`{command}`" if command else "", "",
          f"**{summary_line(report)}**", "",
          f"Rule: err(kernel, float64 oracle) ≤ {testing.RATIO} × err(reference in the same dtype, oracle) + atol "
          f"(atol {', '.join(f'{k} {v:g}' for k, v in testing.ATOL.items() if k in DTYPES)}); errors are "
          "RMS-relative. Device: " + meta["device"] + ", versions: "
          + ", ".join(f"{k} {v}" for k, v in meta["versions"].items() if v) + ".", ""]
    failed = [r for r in report.rows if not r.ok]
    if failed:
        md += ["## Failures", "", *_markdown_table(failed), ""]
    for (op, case), rows in groups.items():
        seconds = sum(s for (o, c, _), s in report.case_seconds.items() if (o, c) == (op, case))
        md += [f"## {op} · {case}", "", f"{_params(op, case)} — {seconds:.1f} s", "", *_markdown_table(rows), ""]
        if (op, case) in bars:
            md += [f"![{op} {case}]({bars[(op, case)].name})", ""]
        md += [f"![{p.stem}]({p.name})" for p in maps if p.name.startswith(f"{op}-{case}-")]
        md += [""]
    (out / "summary.md").write_text("\n".join(md))
    return figures


def _params(op: str, case: str) -> str:
    for c in OPS[op].cases + OPS[op].quick:
        if c.name == case:
            return ", ".join(f"{k}={v}" for k, v in c.params.items() if v not in (None, (), False))
    return ""


def _markdown_table(rows: Sequence[Row]) -> list[str]:
    escape = lambda cells: [c.replace("|", "\\|") for c in cells]  # noqa: E731
    lines = ["| " + " | ".join(escape(c or "verdict" for c in COLUMNS)) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(escape(_cells(r))) + " |" for r in rows]
    return lines + [f"\n{r.case} {r.dtype}: `{r.error}`" for r in rows if r.error]

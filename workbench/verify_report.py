"""The output of `workbench verify` (`verify.run`'s `Report`): the printed table and summary line, and the
report folder: `results.json`, `summary.md` and the error figures (bars per case, |kernel − oracle| maps)."""

from __future__ import annotations

import dataclasses
import json
import math
import platform
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import jax
import numpy as np

from . import launch, testing
from .verify import DTYPES, Report, Row

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
            f"in {report.seconds:.1f} s" + (f" ({report.jobs} processes)" if report.jobs > 1 else ""))


def default_out_dir() -> Path:
    return Path("reports") / f"verify-{datetime.now().strftime('%Y-%m-%dT%H%M%S')}"


def _versions() -> dict[str, str]:
    import triton

    return {"python": platform.python_version(), "jax": jax.__version__, "jaxlib": jax.lib.__version__
            if hasattr(jax.lib, "__version__") else "", "triton": triton.__version__, "numpy": np.__version__}


def _finite_or_none(x: float):
    return x if math.isfinite(x) else None


def write(report: Report, out: Path, command: str = "") -> list[Path]:
    """Write `results.json`, `summary.md` and the figures under `out`; return the figure paths. The figures
    are drawn in `report.jobs` fresh processes when there are several (a bar chart takes ~0.5 s)."""
    out.mkdir(parents=True, exist_ok=True)
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in report.rows:
        groups.setdefault((r.op, r.case), []).append(r)
    bars: dict[tuple[str, str], Path] = {}
    drawings = []
    for (op, case), rows in groups.items():
        rows = [r for r in rows if not r.error]
        if rows:
            bars[(op, case)] = out / f"{op}-{case}.png"
            drawings.append(("bars", bars[(op, case)], [r.comparison() for r in rows],
                             f"{op} · {case} · {report.implementation} vs float64"))
    maps: list[Path] = []
    for (op, case, dtype, grad), (kernel, oracle) in report.arrays.items():
        maps.append(out / f"{op}-{case}-{dtype}-{grad}-map.png")
        drawings.append(("map", maps[-1], (kernel, oracle),
                         f"|{grad} − oracle| · {op} {case} {dtype} ({report.implementation})"))
    if report.jobs > 1 and len(drawings) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(min(report.jobs, len(drawings)), mp_context=spawn) as pool:
            list(pool.map(_draw, drawings))
    else:
        for drawing in drawings:
            _draw(drawing)
    figures = list(bars.values()) + maps

    meta = {"command": command, "date": datetime.now().isoformat(timespec="seconds"),
            "implementation": report.implementation, "interpreter": launch.INTERPRET,
            "device": str(jax.devices()[0]), "versions": _versions(), "seconds": round(report.seconds, 2),
            "jobs": report.jobs, "ok": report.ok, "ratio": testing.RATIO, "atol": testing.ATOL}
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
    if any(r.op == "flash_attention" for r in report.rows):
        md += ["flash_attention: lse is compared where the oracle's is finite and must be −inf exactly elsewhere; "
               "each gradient's tolerance adds, in quadrature to the reference's error, the error of the exact "
               "gradients given the kernel's o and lse, which its backward works from "
               "(`testing.attention_backward_cotangents`); dsinks' atol is scaled by the condition number of its sum "
               "(`testing.attention_dsinks_atol`).", ""]
    failed = [r for r in report.rows if not r.ok]
    if failed:
        md += ["## Failures", "", *_markdown_table(failed), ""]
    for (op, case), rows in groups.items():
        seconds = sum(s for (o, c, _), s in report.case_seconds.items() if (o, c) == (op, case))
        params = report.described.get((op, case), "")
        md += [f"## {op} · {case}", "", f"{params + ' — ' if params else ''}{seconds:.1f} s", "",
               *_markdown_table(rows), ""]
        if (op, case) in bars:
            md += [f"![{op} {case}]({bars[(op, case)].name})", ""]
        md += [f"![{p.stem}]({p.name})" for p in maps if p.name.startswith(f"{op}-{case}-")]
        md += [""]
    (out / "summary.md").write_text("\n".join(md))
    return figures


def _draw(drawing: tuple[str, Path, Any, str]) -> None:
    """One figure of the report: ("bars", path, comparisons, title) or ("map", path, (kernel, oracle), title)."""
    from . import plots

    kind, path, data, title = drawing
    fig = plots.error_bars(data, title) if kind == "bars" else plots.error_map(*data, title)
    fig.savefig(path, dpi=110)


def _markdown_table(rows: Sequence[Row]) -> list[str]:
    escape = lambda cells: [c.replace("|", "\\|") for c in cells]  # noqa: E731
    lines = ["| " + " | ".join(escape(c or "verdict" for c in COLUMNS)) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(escape(_cells(r))) + " |" for r in rows]
    return lines + [f"\n{r.case} {r.dtype}: `{r.error}`" for r in rows if r.error]

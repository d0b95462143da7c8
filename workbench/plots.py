"""Figures for notebooks and `workbench verify` reports.

Every function builds and returns a fresh `matplotlib.figure.Figure` (no pyplot, no global state),
so it renders in a notebook, saves with `fig.savefig(...)` on a headless machine (Agg), and never
leaks figures between calls. Errors follow `workbench.testing`: kernel and reference (same dtype)
are both measured against the float64 oracle, and the tolerance is the error budget
`RATIO · reference error + atol`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from .testing import Comparison, Report

__all__ = ["device_layout", "report_errors", "error_bars", "error_map", "error_growth", "mask_grid", "block_grid",
           "grouped_bars", "step_lines"]

KERNEL_COLOR = "tab:blue"
REFERENCE_COLOR = "tab:orange"
FAIL_COLOR = "tab:red"
ERROR_FLOOR = 1e-17
"""Errors below this (exact zeros included) are drawn at it: log axes cannot show 0."""


def _floor(x) -> np.ndarray:
    return np.maximum(np.asarray(x, np.float64), ERROR_FLOOR)


def error_bars(comparisons: Sequence[Comparison], title: str = "") -> Figure:
    """Kernel vs reference error (RMS-relative, against the oracle) per output, log scale.

    One pair of bars per comparison, a black tick at its tolerance, the kernel bar red when it is
    over budget, drawn at 1 and marked "non-finite" when it holds NaN or inf. Comparisons of several
    dtypes are labelled `name/dtype`.
    """
    comparisons = list(comparisons)
    mixed = len({c.dtype for c in comparisons}) > 1
    labels = [f"{c.name}/{c.dtype}" if mixed else c.name for c in comparisons]
    x = np.arange(len(comparisons))
    width = 0.38
    fig = Figure(figsize=(max(5.0, 0.6 * len(comparisons) + 3.0), 3.6), layout="constrained")
    ax = fig.add_subplot()
    kernel = _floor([c.kernel_err if np.isfinite(c.kernel_err) else 1.0 for c in comparisons])
    colors = [KERNEL_COLOR if c.ok else FAIL_COLOR for c in comparisons]
    ax.bar(x - width / 2, kernel, width, color=colors, label="kernel")
    for xi, c in zip(x, comparisons):
        if not c.finite or not np.isfinite(c.kernel_err):
            ax.annotate("non-finite", (xi - width / 2, 0.5), ha="center", va="top", fontsize="x-small",
                        color="white", rotation=90)
    ax.bar(x + width / 2, _floor([c.reference_err for c in comparisons]), width,
           color=REFERENCE_COLOR, label="reference (same dtype)")
    ax.hlines(_floor([c.tolerance for c in comparisons]), x - width, x + width, colors="black",
              linewidth=1.5, label="tolerance")
    ax.set_yscale("log")
    shown = np.concatenate([kernel, _floor([c.reference_err for c in comparisons]),
                            _floor([c.tolerance for c in comparisons])])
    ax.set_ylim(bottom=max(ERROR_FLOOR, 0.1 * float(shown.min())) if shown.size else None)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    rotate = mixed or len(x) > 8  # rotated labels end at their tick (anchored right), not centred on it
    ax.set_xticks(x, labels, rotation=45 if rotate else 0, ha="right" if rotate else "center",
                  rotation_mode="anchor" if rotate else "default")
    ax.set_ylabel("‖x − oracle‖ / ‖oracle‖")
    ax.set_title(title)
    ax.grid(axis="y", which="major", alpha=0.3)
    return fig


def report_errors(reports: Report | Sequence[Report], x: Sequence[float] | None = None, *, xlabel: str = "T",
                  names: Sequence[str] | None = None, title: str = "", logx: bool = False) -> Figure:
    """The error figure of `testing.check` results: for one `Report`, kernel and reference error of every
    output and gradient with its tolerance (`error_bars`); for a list of reports made along a sweep (T, a
    gate strength, a head size, …) with their `x` values, each one's error against x, kernel solid,
    reference dashed, tolerance dotted (`error_growth`). `names` picks the outputs and gradients to draw
    (default all); a report over budget anywhere is titled so."""
    if isinstance(reports, Report):
        comparisons = [c for c in reports.comparisons if names is None or c.name in names]
        return error_bars(comparisons, title or reports.title)
    reports = list(reports)
    if x is None or len(x) != len(reports):
        raise ValueError(f"x: expected one value per report ({len(reports)}), got "
                         f"{'None' if x is None else len(x)}")
    names = list(names) if names is not None else list(reports[0].names)
    for r in reports:
        missing = [n for n in names if n not in r.names]
        if missing:
            raise ValueError(f"reports: {r.title or 'a report'} has no {', '.join(missing)} "
                             f"(it has {', '.join(r.names)})")
    series = lambda field: {n: [getattr(r[n], field) for r in reports] for n in names}  # noqa: E731
    failed = [xi for xi, r in zip(x, reports) if not all(r[n].ok for n in names)]
    if failed:
        title = f"{title} — over budget at {xlabel} = {', '.join(map(str, failed))}".lstrip(" —")
    return error_growth(x, series("kernel_err"), series("reference_err"), xlabel=xlabel, title=title,
                        tolerance=series("tolerance"), logx=logx)


def device_layout(arrays: Mapping[str, object], rows: int = 0, cols: int = 2, title: str = "") -> Figure:
    """Which device holds each (row, column) block of sharded arrays: for every array (a name → a
    `jax.Array`), an image over its dimension `rows` (default the batch) and `cols` (default the heads),
    each cell colored by the device that holds it (several devices: the first; replicated cells read as
    every device's, drawn as the first). One panel per array, one color per device across panels."""
    names = list(arrays)
    fig = Figure(figsize=(2.6 * len(names) + 0.8, 2.6), layout="constrained")
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    devices = sorted({d.id for x in arrays.values() for d in x.sharding.device_set})
    for ax, name in zip(axes, names):
        x = arrays[name]
        owner = np.full((x.shape[rows], x.shape[cols]), -1)
        for shard in x.addressable_shards:
            index = shard.index
            r, c = index[rows], index[cols]
            block = owner[r, c]
            owner[r, c] = np.where(block < 0, devices.index(shard.device.id), block)
        image = ax.imshow(owner, cmap="tab10", vmin=-0.5, vmax=9.5, aspect="auto", interpolation="nearest")
        ax.set_title(f"{name} {tuple(x.shape)}", fontsize="small")
        ax.set_xlabel(f"dim {cols}")
        ax.set_ylabel(f"dim {rows}")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    bar = fig.colorbar(image, ax=list(axes), ticks=range(len(devices)), shrink=0.8)
    bar.set_label("device")
    bar.ax.set_ylim(-0.5, len(devices) - 0.5)
    if title:
        fig.suptitle(title)
    return fig


def _position_by_head(x) -> np.ndarray:
    """[B, T, H, D] or [B, T, H] → [T, H] by the max over batch and feature axes."""
    x = np.asarray(x, np.float64)
    if x.ndim == 4:
        return x.max(axis=(0, 3))
    if x.ndim == 3:
        return x.max(axis=0)
    raise ValueError(f"kernel: expected an array [B, T, H, D] or [B, T, H], got shape {x.shape}")


def error_map(kernel, oracle, title: str = "", by: str = "head") -> Figure:
    """Heat map of |kernel − oracle| per position (x) and head (y), log color scale.

    kernel, oracle: arrays `[B, T, H, D]` (or `[B, T, H]`); each cell is the max over batch and
    feature dims, so one bad token or head stands out. Exact zeros are drawn at `ERROR_FLOOR`.
    by="dim" (4-d arrays only): y is the feature dim instead, each cell the max over batch and heads.
    """
    kernel = np.asarray(kernel, np.float64)
    oracle = np.asarray(oracle, np.float64)
    if kernel.shape != oracle.shape:
        raise ValueError(f"kernel, oracle: shapes must match, got {kernel.shape} and {oracle.shape}")
    if by not in ("head", "dim"):
        raise ValueError(f"by: expected 'head' or 'dim', got {by!r}")
    if by == "dim" and kernel.ndim != 4:
        raise ValueError(f"kernel: by='dim' needs an array [B, T, H, D], got shape {kernel.shape}")
    err = (np.abs(kernel - oracle).max(axis=(0, 2)) if by == "dim"
           else _position_by_head(np.abs(kernel - oracle)))  # [T, H] or [T, D]
    err = np.where(np.isfinite(err), err, np.nan)
    finite = err[np.isfinite(err)]
    vmax = max(float(finite.max()) if finite.size else 1.0, ERROR_FLOOR * 10)
    vmin = max(float(finite[finite > 0].min()) if (finite > 0).any() else ERROR_FLOOR, vmax * 1e-8)
    T, H = err.shape
    fig = Figure(figsize=(min(12.0, 3.0 + 0.12 * T), min(6.0, 1.6 + (0.35 if by == "head" else 0.15) * H)),
                 layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(np.maximum(err.T, vmin), aspect="auto", origin="lower", interpolation="nearest",
                      norm=LogNorm(vmin=vmin, vmax=vmax), cmap="magma")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("position t")
    ax.set_ylabel(by)
    if by == "head":
        ax.set_yticks(np.arange(H))
    else:
        ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title(title)
    fig.colorbar(image, ax=ax, label="max |kernel − oracle|")
    return fig


def error_growth(x: Sequence[float], kernel: Mapping[str, Sequence[float]] | Sequence[float],
                 reference: Mapping[str, Sequence[float]] | Sequence[float], *, xlabel: str = "T",
                 title: str = "", tolerance: Mapping[str, Sequence[float]] | Sequence[float] | None = None,
                 logx: bool = False) -> Figure:
    """Error against a swept quantity (sequence length T, decay strength, …), kernel vs reference.

    kernel, reference (and optional tolerance): one sequence of errors per x value, or a mapping
    output name → sequence for several outputs (`{"o": [...], "dq": [...]}`), drawn in one color
    per name: kernel solid with dots, reference dashed, tolerance dotted.
    """
    def series(values):
        return dict(values) if isinstance(values, Mapping) else {"": values}

    kernel, reference = series(kernel), series(reference)
    tolerance = series(tolerance) if tolerance is not None else {}
    if kernel.keys() != reference.keys():
        raise ValueError(f"kernel, reference: need the same names, got {sorted(kernel)} and {sorted(reference)}")
    fig = Figure(figsize=(5.5, 3.6), layout="constrained")
    ax = fig.add_subplot()
    for i, name in enumerate(kernel):
        color = f"C{i}"
        prefix = f"{name} " if name else ""
        ax.plot(x, _floor(kernel[name]), "o-", color=color, label=f"{prefix}kernel")
        ax.plot(x, _floor(reference[name]), "s--", color=color, alpha=0.7, label=f"{prefix}reference")
        if name in tolerance:
            ax.plot(x, _floor(tolerance[name]), ":", color=color, alpha=0.7, label=f"{prefix}tolerance")
    ax.set_yscale("log")
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("‖x − oracle‖ / ‖oracle‖")
    ax.set_title(title)
    ax.legend(fontsize="small", loc="best")
    ax.grid(which="major", alpha=0.3)
    return fig


def mask_grid(masks: Mapping[str, object], ncols: int = 4, title: str = "") -> Figure:
    """Boolean masks as a grid of images, one panel per entry, titled by its key.

    masks: name → array `[Tq, Tk]` (True = allowed / kept, dark; query i on y, key j on x). Rows
    with no True entry are shaded red, so empty rows are visible.
    """
    masks = {name: np.asarray(m, bool) for name, m in masks.items()}
    for name, m in masks.items():
        if m.ndim != 2:
            raise ValueError(f"masks[{name!r}]: expected a 2-d array [Tq, Tk], got shape {m.shape}")
    ncols = max(1, min(ncols, len(masks)))
    nrows = -(-len(masks) // ncols)
    fig = Figure(figsize=(3.0 * ncols, 3.0 * nrows + (0.4 if title else 0.0)), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, (name, m) in zip(axes, masks.items()):
        Tq, Tk = m.shape
        ax.imshow(m, cmap="Greys", vmin=0, vmax=1.4, interpolation="nearest")
        empty = np.flatnonzero(~m.any(axis=1))
        for i in empty:
            ax.axhspan(i - 0.5, i + 0.5, color=FAIL_COLOR, alpha=0.25, lw=0)
        ax.set_title(name, fontsize="small")
        ax.set_xlabel(f"key j (Tk={Tk})", fontsize="small")
        ax.set_ylabel(f"query i (Tq={Tq})", fontsize="small")
        ax.tick_params(labelsize="x-small")
    for ax in axes[len(masks):]:
        ax.set_axis_off()
    if title:
        fig.suptitle(title)
    return fig


def block_grid(cells: Sequence[Sequence[tuple[object, str]]], row_name: str = "device",
               col_name: str = "step", title: str = "") -> Figure:
    """A grid of small boolean masks: cells[r][c] = (mask [h, w], label), e.g. which query-key pairs
    device r computes at ring step c. True (computed) is dark; an all-False mask (nothing computed)
    is hatched, so a skipped block stands out from an empty corner."""
    nrows, ncols = len(cells), max(len(row) for row in cells)
    fig = Figure(figsize=(1.3 * ncols + 0.6, 1.3 * nrows + (0.5 if title else 0.2)), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for r, row in enumerate(cells):
        for c in range(ncols):
            ax = axes[r, c]
            ax.set_xticks([])
            ax.set_yticks([])
            if c >= len(row):
                ax.set_axis_off()
                continue
            mask, label = row[c]
            mask = np.asarray(mask, bool)
            ax.imshow(mask, cmap="Greys", vmin=0, vmax=1.4, interpolation="nearest")
            if not mask.any():
                ax.add_patch(_hatch(mask.shape))
            ax.set_title(label, fontsize="x-small", pad=2)
            if c == 0:
                ax.set_ylabel(f"{row_name} {r}", fontsize="small")
            if r == nrows - 1:
                ax.set_xlabel(f"{col_name} {c}", fontsize="small")
    if title:
        fig.suptitle(title)
    return fig


def _hatch(shape):
    from matplotlib.patches import Rectangle

    h, w = shape
    return Rectangle((-0.5, -0.5), w, h, fill=False, hatch="///", edgecolor=FAIL_COLOR, lw=0)


def grouped_bars(values: Mapping[str, Sequence[float]], labels: Sequence[str], ylabel: str = "",
                 title: str = "", reference: float | None = None, reference_label: str = "") -> Figure:
    """Bars per label (x), one bar per series (values: series name → one value per label), with an
    optional horizontal reference line (e.g. the perfectly balanced share, or a target)."""
    fig = Figure(figsize=(max(4.0, 0.6 * len(labels) * len(values) + 1.5), 3.2), layout="constrained")
    ax = fig.subplots()
    width = 0.8 / max(1, len(values))
    x = np.arange(len(labels))
    for i, (name, ys) in enumerate(values.items()):
        ax.bar(x + (i - (len(values) - 1) / 2) * width, ys, width, label=name)
    if reference is not None:
        ax.axhline(reference, color="k", ls="--", lw=1, label=reference_label or None)
    ax.set_xticks(x, labels, fontsize="small")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize="small", loc="best")
    ax.grid(axis="y", alpha=0.3)
    return fig


def step_lines(steps: Sequence[float], lines: Mapping[str, Sequence[float]], final: Mapping[str, float] | None = None,
               xlabel: str = "step", ylabel: str = "", title: str = "") -> Figure:
    """One line per series over steps (e.g. a row's running lse as partial results merge), with its
    final value as a dotted line of the same colour."""
    fig = Figure(figsize=(5.0, 3.2), layout="constrained")
    ax = fig.subplots()
    for name, ys in lines.items():
        (line,) = ax.plot(steps, ys, marker="o", label=name)
        if final is not None and name in final:
            ax.axhline(final[name], color=line.get_color(), ls=":", lw=1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize="small", loc="best")
    ax.grid(alpha=0.3)
    return fig

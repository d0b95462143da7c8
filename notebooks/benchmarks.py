# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Benchmarks, read from the records in `data/bench/`
#
# This notebook measures nothing: it reads the timing records that were written on a GPU and
# kept in `data/bench/`, so it runs anywhere (no GPU needed). The records come in two layouts:
#
# * **newer** records, written by `workbench bench`, carry a `"results"` list (one row per shape,
#   implementation and pass, with `"ms": {"median", "min", "p90"}`, a `"status"`, and for runs with
#   peers a `"ratio_to_best_peer"`), a `"shape_set"` name (`target`, `sweep`, ...) and a `"device"` dict;
#   since the 1k → 64k sweep they also list what was `"skipped"` (past an implementation's `max_T`, or
#   out of memory) and each row's `"error_source"`;
# * **older** records, written by `scripts/time_recurrent.py`, carry `"timings_ms"`
#   (`{implementation: {"forward_ms", "forward_backward_ms"}}`), one `"shape"` and a `"device"` string.
#
# Both are turned into the same flat rows below. It shows
#
# 1. the latest record per (op, shape set), with device and date;
# 2. median time against sequence length $T$ for every op's `sweep` record(s), on log-log axes with
#    linear and quadratic slopes marked (and which ops have no sweep record yet);
# 3. each kernel's time relative to cuDNN (attention) and to the best peer measured in the same run,
#    per workload: the latest `target` record of every op, and along each sweep;
# 4. the tuning table's price: each row's table / autotuned time from `data/bench/tuning_table/`;
# 5. where the bytes of chunk_gla and chunk_kda go, kernel by kernel (counted, not measured);
#
# and ends with a check that fails if the records are missing or if, in the latest recurrent `target`
# record, the Triton kernel's forward+backward is not faster than the peer's (`fla`).
# `ring_attention` records have their own notebook (`ring_attention.ipynb`).

# %%
import json
import os
import pathlib
import sys

# The package is not installed: put the repository root (the folder holding workbench/) on the path.
ROOT = next(p for p in (pathlib.Path.cwd(), *pathlib.Path.cwd().parents)
            if (p / "workbench" / "__init__.py").exists())
sys.path.insert(0, str(ROOT))

import matplotlib
import matplotlib.pyplot as plt
import numpy as np

from workbench import bench

# WORKBENCH_BENCH_DIR reads another folder of records (e.g. one fetched from the device, not yet committed).
BENCH = pathlib.Path(os.environ.get("WORKBENCH_BENCH_DIR", ROOT / "data" / "bench"))
OPS = list(bench.OPS)  # the ops `workbench bench` times
print("records folder:", BENCH)
print("ops:", ", ".join(OPS))

# %% [markdown]
# ## Reading the records
#
# Every `*.json` in `data/bench/` is read; a file that is not valid JSON, or that has neither layout,
# is skipped and counted. Each record becomes a header (op, shape set, device, date, commit, source
# file) and a list of flat rows `(shape, implementation, kind, pass, median, min, p90, status)`. Older
# records only kept one number per pass, which is used as the median. Records of interpreted runs (CPU
# smoke tests) time nothing and are left out.

# %%
PASSES = ("forward", "forward_backward")


def device_name(dev):
    # Newer records: a dict whose "name" is e.g. "cuda:0" and whose "kind" names the GPU.
    if isinstance(dev, dict):
        kind, name = dev.get("kind"), dev.get("name")
        if kind and name and kind != name:
            return f"{kind} ({name})"
        return str(kind or name or "?")
    return str(dev) if dev is not None else "?"


def shape_label(shape):
    return ",".join(f"{k}={v}" for k, v in shape.items())


def parse(path):
    rec = json.loads(path.read_text())
    header = {
        "file": path.name,
        "op": rec.get("op", "?"),
        "date": rec.get("date", "?"),
        "device": device_name(rec.get("device")),
        "commit": (rec.get("git") or {}).get("commit"),
        "interpreted": bool(rec.get("interpreted", False)),
        "skipped": rec.get("skipped", []),
        "tokens": rec.get("tokens"),
    }
    rows = []
    if rec.get("harness") in ("workbench.bench_ring", "workbench.bench.ring"):
        raise ValueError("a ring_attention record (see ring_attention.ipynb)")
    if isinstance(rec.get("results"), list):            # workbench bench
        header["shape_set"] = rec.get("shape_set", "?")
        header["layout"] = "bench"
        for r in rec["results"]:
            ms = r.get("ms") or {}
            rows.append({
                "shape": dict(r["shape"]), "implementation": r["implementation"],
                "kind": r.get("kind", "kernel"), "pass": r["pass"],
                "median": ms.get("median"), "min": ms.get("min"), "p90": ms.get("p90"),
                "status": r.get("status", "?"), "ratio_to_best_peer": r.get("ratio_to_best_peer"),
                "error_source": r.get("error_source", "reference"),
            })
    elif isinstance(rec.get("timings_ms"), dict):       # scripts/time_recurrent.py
        shape = dict(rec.get("shape", {}))
        header["shape_set"] = "script: " + shape_label(shape)
        header["layout"] = "script"
        for impl, t in rec["timings_ms"].items():
            for p in PASSES:
                if f"{p}_ms" in t:
                    rows.append({
                        "shape": shape, "implementation": impl, "kind": "kernel", "pass": p,
                        "median": t[f"{p}_ms"], "min": None, "p90": None, "status": "ok",
                        "ratio_to_best_peer": None, "error_source": "reference",
                    })
    else:
        raise ValueError("neither a 'results' nor a 'timings_ms' record")
    header["rows"] = rows
    return header


records, skipped = [], []
for path in sorted(BENCH.glob("*.json")):
    try:
        rec = parse(path)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is skipped and reported
        skipped.append((path.name, f"{type(exc).__name__}: {exc}"))
        continue
    if rec["interpreted"]:
        skipped.append((path.name, "an interpreted (CPU smoke) run: timings meaningless"))
        continue
    records.append(rec)

records.sort(key=lambda r: r["date"])
print(f"read {len(records)} record(s), skipped {len(skipped)}")
for name, why in skipped:
    print("  skipped", name, "-", why)
print("layouts:", {l: sum(r["layout"] == l for r in records) for l in ("bench", "script")})

# %% [markdown]
# ## 1. The latest record per (op, shape set)
#
# Older script records have no shape-set name; they are grouped by their one shape instead.

# %%
latest = {}
for r in records:                      # sorted by date, so the last one wins
    latest[(r["op"], r["shape_set"])] = r

cols = ("op", "shape set", "device", "date", "rows", "file")
table = [(op, ss, r["device"], r["date"], str(len(r["rows"])), r["file"])
         for (op, ss), r in sorted(latest.items())]
widths = [max(len(c), *(len(row[i]) for row in table)) if table else len(c)
          for i, c in enumerate(cols)]
print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
print("  ".join("-" * w for w in widths))
for row in table:
    print("  ".join(v.ljust(w) for v, w in zip(row, widths)))

# %% [markdown]
# ## 2. Time against sequence length (`sweep`)
#
# Median time per implementation and peer against $T$ (1k → 64k tokens), one panel per pass and one
# row of panels per workload (for attention: causal and not). The linear-attention ops do a fixed
# amount of work per token and should grow like $T^1$; attention grows like $T^2$ once its matmuls
# dominate. The dashed and dotted lines are $T^1$ and $T^2$ anchored at the smallest $T$.
#
# A long sweep may be recorded in parts (`--T`): records of one op from the same device and commit are
# joined, the latest measurement of each (shape, implementation, pass) kept. WRONG rows are not drawn;
# "unchecked" rows (no reference or error source at that $T$) are drawn hollow. Implementations that
# stop early were skipped past their `max_T` (the dense reference and XLA attention at 64k would need
# hundreds of GiB), as listed under each figure.


# %%
def join_sweeps(recs):
    """(op, device, commit) → the sweep records' rows joined, the latest of each (shape, impl, pass)."""
    groups = {}
    for r in recs:
        groups.setdefault((r["op"], r["device"], r["commit"]), []).append(r)
    joined = []
    for (op, device, commit), parts in groups.items():
        rows, skips = {}, {}
        for part in parts:  # sorted by date: later parts win
            for x in part["rows"]:
                rows[(shape_label(x["shape"]), x["implementation"], x["pass"])] = x
            for s in part["skipped"]:
                skips[(shape_label(s["shape"]), s["implementation"])] = s
        joined.append({"op": op, "device": device, "commit": commit, "rows": list(rows.values()),
                       "skipped": list(skips.values()), "files": [p["file"] for p in parts],
                       "dates": (parts[0]["date"], parts[-1]["date"])})
    return joined


def workloads(rows):
    """The shapes' non-T parts (e.g. causal=1 and causal=0), in order of appearance."""
    out = {}
    for x in rows:
        rest = {k: v for k, v in x["shape"].items() if k != "T"}
        out.setdefault(shape_label(rest), rest)
    return out


def plot_sweep(sweep):
    rows = [x for x in sweep["rows"] if x["median"] and x["status"] != "WRONG"]
    groups = workloads(rows)
    fig, axes = plt.subplots(len(groups), 2, figsize=(12, 4.2 * len(groups)), squeeze=False)
    for (label, rest), axrow in zip(groups.items(), axes):
        for ax, p in zip(axrow, PASSES):
            sel = [x for x in rows if x["pass"] == p and all(x["shape"].get(k) == v for k, v in rest.items())]
            for impl in sorted({x["implementation"] for x in sel}):
                pts = sorted((x["shape"]["T"], x["median"], x["status"]) for x in sel if x["implementation"] == impl)
                kind = next(x["kind"] for x in sel if x["implementation"] == impl)
                T, ms = (np.array([pt[i] for pt in pts], dtype=float) for i in (0, 1))
                (line,) = ax.plot(T, ms, "-", label=f"{impl} ({kind})")
                ok = np.array([pt[2] == "ok" for pt in pts])
                ax.plot(T[ok], ms[ok], "o", color=line.get_color())
                ax.plot(T[~ok], ms[~ok], "o", mfc="none", color=line.get_color())
            if sel:
                T_all = np.array(sorted({x["shape"]["T"] for x in sel}), dtype=float)
                anchor = np.median([x["median"] for x in sel if x["shape"]["T"] == T_all[0]])
                ax.plot(T_all, anchor * T_all / T_all[0], "k--", lw=1, alpha=0.6, label="$\\propto T$")
                ax.plot(T_all, anchor * (T_all / T_all[0]) ** 2, "k:", lw=1.2, alpha=0.6, label="$\\propto T^2$")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("sequence length T")
            ax.set_ylabel("median time (ms)")
            ax.set_title(f"{p.replace('_', ' + ')}  [{label}]", fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
    dates = sweep["dates"][0] if sweep["dates"][0] == sweep["dates"][1] else " … ".join(sweep["dates"])
    fig.suptitle(f"{sweep['op']} sweep on {sweep['device']}, {dates} "
                 f"(commit {str(sweep['commit'])[:8]}, {len(sweep['files'])} record(s))")
    fig.tight_layout()
    plt.show()


sweeps = join_sweeps([r for r in records if r["shape_set"] == "sweep"])
plotted_sweeps = []
for op in OPS:
    mine = [s for s in sweeps if s["op"] == op]
    if not mine:
        print(f"{op}: no sweep record yet (workbench bench --op {op} --shapes sweep --peers on a GPU)")
        continue
    for sweep in mine:
        plot_sweep(sweep)
        plotted_sweeps.append(sweep)
        print(f"{op}: T = {sorted({x['shape']['T'] for x in sweep['rows']})} from {', '.join(sweep['files'])}")
        for s in sorted(sweep["skipped"], key=lambda s: (s["implementation"], s["shape"]["T"])):
            print(f"    skipped {s['implementation']} at {shape_label(s['shape'])}: {s['reason'][:110]}")
        unchecked = {x["shape"]["T"] for x in sweep["rows"] if x["status"] == "unchecked"}
        sources = {x["error_source"] for x in sweep["rows"] if x["error_source"] not in ("reference", None)}
        if sources:
            print(f"    errors against {', '.join(sorted(sources))} where the reference was skipped")
        if unchecked:
            print(f"    unchecked (no reference, no error source) at T = {sorted(unchecked)}")

# %% [markdown]
# ## 3. Time relative to cuDNN and to the best peer, per workload
#
# For each shape and pass, a kernel's median is divided by the peer's median measured **in the same
# run** (so the GPU, clocks and inputs are the same): cuDNN (`jax.nn.dot_product_attention[cudnn]`) for
# attention, and the fastest correct peer for every op. Below 1 means faster. The ratio is recomputed
# from the medians; where the record kept its own `ratio_to_best_peer`, the two must agree (checked at
# the end). First the latest `target` record of each op, then each sweep along $T$.

# %%
CUDNN = "jax.nn.dot_product_attention[cudnn]"


def baselines(rows, shape, p):
    """{name: median} of the run's baselines at (shape, pass): the best correct peer, and cuDNN if measured."""
    same = [x for x in rows if x["pass"] == p and x["shape"] == shape and x["status"] == "ok" and x["median"]]
    peers = [x for x in same if x["kind"] == "peer"]
    out = {}
    if peers:
        best = min(peers, key=lambda x: x["median"])
        out["best peer"] = (best["median"], best["implementation"])
    cudnn = [x for x in peers if x["implementation"] == CUDNN]
    if cudnn:
        out["cuDNN"] = (cudnn[0]["median"], CUDNN)
    return out, [x for x in same if x["kind"] == "kernel" and x["implementation"] != "reference"]


ratio_checks = []  # (recomputed, recorded) pairs
target_ratios = {}
for op in OPS:
    target = latest.get((op, "target"))
    if target is None or target["layout"] != "bench":
        print(f"{op}: no target record yet")
        continue
    labels, values, colors = [], [], []
    for shape in {shape_label(x["shape"]): x["shape"] for x in target["rows"]}.values():
        for p in PASSES:
            base, kernels = baselines(target["rows"], shape, p)
            if not base:
                print(f"{op} {shape_label(shape)} {p}: no correct peer measured in {target['file']}")
                continue
            if base.get("cuDNN") == base["best peer"]:  # one bar when cuDNN is the best peer
                base = {"cuDNN (best peer)": base.pop("cuDNN")}
            for x in kernels:
                for name, (ms, who) in base.items():
                    ratio = x["median"] / ms
                    if name in ("best peer", "cuDNN (best peer)") and x["ratio_to_best_peer"] is not None:
                        ratio_checks.append((ratio, x["ratio_to_best_peer"]))
                    causal = f" causal={shape['causal']}" if "causal" in shape else ""
                    labels.append(f"{x['implementation']}{causal}\n{p.replace('_', '+')} / {name}")
                    values.append(ratio)
                    colors.append("tab:green" if ratio < 1 else "tab:red")
                    print(f"{op:16s} {shape_label(shape):34s} {p:17s} {x['implementation']:24s} "
                          f"{x['median']:9.3f} ms / {name} {who} {ms:8.3f} ms = {ratio:6.3f}")
    target_ratios[op] = dict(zip(labels, values))
    if values:
        fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(values)), 4.5))
        bars = ax.bar(range(len(values)), values, color=colors)
        ax.bar_label(bars, [f"{r:.2f}x" for r in values], fontsize=8)
        ax.axhline(1.0, color="k", ls="--", lw=1)
        ax.set_yscale("log")
        ax.set_xticks(range(len(values)), labels, fontsize=7)
        ax.set_ylabel("median time / baseline's median")
        ax.set_title(f"{op} target on {target['device']}, {target['date']}", fontsize=10)
        fig.tight_layout()
        plt.show()

# %%
for sweep in plotted_sweeps:
    rows = sweep["rows"]
    groups = workloads(rows)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    drawn = 0
    for ax, p in zip(axes, PASSES):
        for label, rest in groups.items():
            series = {}
            for shape in sorted({shape_label(x["shape"]): x["shape"] for x in rows
                                 if all(x["shape"].get(k) == v for k, v in rest.items())}.values(),
                                key=lambda s: s["T"]):
                base, kernels = baselines(rows, shape, p)
                for x in kernels:
                    for name, (ms, _) in base.items():
                        series.setdefault((x["implementation"], name), []).append((shape["T"], x["median"] / ms))
            color = f"C{list(groups).index(label)}"
            for j, ((impl, name), pts) in enumerate(sorted(series.items())):
                T, r = map(np.array, zip(*pts))
                ax.plot(T, r, "o" + ("--" if name == "best peer" and "cuDNN" in {n for _, n in series} else "-"),
                        color=color, alpha=1.0 if impl == "triton" else 0.6,
                        label=f"{impl} / {name}" + (f" [{label}]" if label else ""))
                drawn += 1
        ax.axhline(1.0, color="k", ls="--", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length T")
        ax.set_ylabel("median time / baseline's median")
        ax.set_title(p.replace("_", " + "))
        ax.grid(True, which="both", alpha=0.3)
        if drawn:
            ax.legend(fontsize=7)
    fig.suptitle(f"{sweep['op']} sweep relative to its peers on {sweep['device']}, {sweep['dates'][-1]}")
    fig.tight_layout()
    if drawn:
        plt.show()
    else:
        plt.close(fig)
        print(f"{sweep['op']}: the sweep measured no correct peer, so no ratio to plot")

# %% [markdown]
# ## 4. The tuning table's price: its configs against fully autotuned ones
#
# `data/bench/tuning_table/<run>/table/` and `<run>/on/` hold the same op, shapes and passes timed in two
# fresh processes: with the configs of the shipped tuning table (`WORKBENCH_AUTOTUNE=table`) and with
# every config timed in that process (`on`). Each point is one row's table / tuned ratio of medians
# against the tuned time: runs timed on the device's time (`--timer copies`) are filled, runs timed by
# back-to-back calls hollow (below ~0.4 ms those time the host; these earlier runs priced earlier tables
# too); circles are H100 runs, triangles H200.
# The band is ±3 %. `data/bench/tuning_table/README.md` lists every row and says how each run was made.

# %%
price = {}
for path in sorted((BENCH / "tuning_table").glob("*/*/*.json")):
    run, mode = path.parent.parent.name, path.parent.name
    rec = json.loads(path.read_text())
    for x in rec.get("results", []):
        if x["implementation"] == "triton":
            key = (run, rec["op"], shape_label(x["shape"]), x["pass"])
            price.setdefault(key, {})[mode] = dict(ms=x["ms"]["median"], timer=x.get("timer", "calls"),
                                                    device=device_name(rec.get("device")), date=rec["date"][:10])
pairs = {k: v for k, v in price.items() if {"table", "on"} <= v.keys()}
print(f"{len(pairs)} rows with both modes, from {len({k[0] for k in pairs})} runs")

fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
for ax, p in zip(axes, PASSES):
    for i, op in enumerate(sorted({k[1] for k in pairs})):
        for timer in ("copies", "calls"):
            for device, marker in (("H100", "o"), ("H200", "^")):
                pts = [(v["on"]["ms"], v["table"]["ms"] / v["on"]["ms"]) for k, v in pairs.items()
                       if k[1] == op and k[3] == p and (v["on"]["timer"] == "copies") == (timer == "copies")
                       and device in v["on"]["device"]]
                if pts:
                    x, r = map(np.array, zip(*pts))
                    ax.scatter(x, r, marker=marker, s=28, color=f"C{i}", alpha=0.85,
                               facecolors=f"C{i}" if timer == "copies" else "none",
                               label=f"{op}, {device}, {timer}")
    ax.axhspan(0.97, 1.03, color="0.85", zorder=0)
    ax.axhline(1.0, color="k", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("tuned median ms")
    ax.set_title(p.replace("_", " + "))
    ax.grid(True, which="both", alpha=0.3)
axes[0].set_ylabel("table / tuned (median ms)")
axes[1].legend(fontsize=7, ncol=2)
dates = sorted({v["on"]["date"] for v in pairs.values()})
fig.suptitle(f"tuning table's price, {dates[0]} to {dates[-1]} (filled: --timer copies)" if dates else "no price runs")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Where the bytes go: each kernel's reads and writes
#
# Not a measurement: every kernel launch of chunk_gla and chunk_kda at issue 48's long shapes, with the bytes
# of the arrays it is handed and returns, each counted once (`workbench.bench.traffic`, traced abstractly
# where Triton is interpreted; on a GPU machine `scripts/kernel_traffic.py` runs in a child process with
# `WORKBENCH_INTERPRET=1`). The dashed line is what the bench counts for the op (inputs read once, outputs
# written once), the bytes its `fraction_of_peak` divides by: the distance between the bars' sum and that line
# is traffic the algorithm adds (intermediates written and read back, inputs read again by every kernel).

# %%
import dataclasses
import subprocess

import workbench
from workbench.bench.traffic import PASSES, pass_traffic

TRAFFIC_SHAPES = {"chunk_gla": dict(B=1, T=65536, H=16, K=64, V=64),
                  "chunk_kda": dict(B=1, T=32768, H=16, K=128, V=128)}


def kernel_traffic(op_name, shape):
    """{"least": {pass: bytes}, "launches": {pass: [{kernel, read, written}, ...]}} of the op's Triton path."""
    op = bench.OPS[op_name]
    if workbench.INTERPRET:
        return {"least": dict(zip(PASSES, op.bytes(shape, op.dtype))),
                "launches": {p: [dataclasses.asdict(r) for r in pass_traffic(op, shape, op.dtype, p)]
                             for p in PASSES}}
    text = ",".join(f"{k}={v}" for k, v in shape.items())
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "kernel_traffic.py"), "--op", op_name,
                          "--shape", text, "--json"], env={**os.environ, "WORKBENCH_INTERPRET": "1"},
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


traffic = {name: kernel_traffic(name, shape) for name, shape in TRAFFIC_SHAPES.items()}
MIB = 2**20
fig, axes = plt.subplots(1, 2, figsize=(13, 5.5))
for ax, (name, found) in zip(axes, traffic.items()):
    names = list(dict.fromkeys(r["kernel"] for p in PASSES for r in found["launches"][p]))
    colour = {k: plt.cm.tab20(i % 20) for i, k in enumerate(names)}  # one colour per kernel, in both passes
    for i, pass_ in enumerate(PASSES):
        launches = found["launches"][pass_]
        bottom = 0.0
        for row in launches:
            size = (row["read"] + row["written"]) / MIB
            ax.bar(i, size, bottom=bottom, color=colour[row["kernel"]], edgecolor="white", linewidth=0.5)
            if size > 300:
                ax.text(i, bottom + size / 2, row["kernel"].replace("_kernel", ""), ha="center", va="center",
                        fontsize=6)
            bottom += size
        least = found["least"][pass_] / MIB
        ax.hlines(least, i - 0.4, i + 0.4, colors="black", linestyles="dashed",
                  label="the bench's bytes" if i == 0 else None)
        ax.text(i, bottom, f"{bottom / least:.1f}× the bench's bytes", fontsize=8, ha="center", va="bottom")
        print(f"{name} {pass_}: {bottom:.0f} MiB through {len(launches)} launches, the bench counts {least:.0f}")
    ax.set_xticks(range(len(PASSES)), PASSES)
    ax.set_ylabel("MiB read + written, each array once")
    ax.set_title(f"{name} {TRAFFIC_SHAPES[name]}, bf16", fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Check
#
# Fails if no record could be read, if a ratio recomputed here disagrees with the one the harness
# recorded, if no tuning-table price run on the device's time was read, if there is no recurrent `target` record with both a Triton and an `fla`
# forward+backward measurement, or if, in the latest such record, the Triton kernel's
# forward+backward median is not below the `fla` peer's.

# %%
assert records, f"no benchmark record could be read from {BENCH} ({len(skipped)} skipped)"
for recomputed, recorded in ratio_checks:
    assert abs(recomputed - recorded) <= 1e-9 * max(1.0, recorded), (recomputed, recorded)
print(f"{len(ratio_checks)} recorded ratio(s) agree with the medians")
assert pairs and any(v["on"]["timer"] == "copies" for v in pairs.values()), "no tuning-table price run"

target = latest.get(("recurrent", "target"))
assert target is not None, "no recurrent 'target' record in data/bench/"
fb = [x for x in target["rows"] if x["pass"] == "forward_backward" and x["status"] == "ok"]
triton_fb = [x["median"] for x in fb if x["implementation"] == "triton"]
fla_fb = [x["median"] for x in fb if x["kind"] == "peer" and x["implementation"].startswith("fla")]
assert triton_fb, f"no triton forward+backward timing in {target['file']}"
assert fla_fb, f"no fla peer forward+backward timing in {target['file']}"
print(f"{target['file']}: triton {triton_fb[0]:.2f} ms vs fla {fla_fb[0]:.2f} ms (forward+backward)")
assert triton_fb[0] < fla_fb[0], "triton forward+backward is not faster than the fla peer"
for name, found in traffic.items():  # every pass moves at least what the bench counts, through kernels it names
    for pass_ in PASSES:
        moved = sum(r["read"] + r["written"] for r in found["launches"][pass_])
        assert moved >= found["least"][pass_] and all(r["kernel"] for r in found["launches"][pass_]), (name, pass_)
print("check passed")

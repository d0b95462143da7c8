"""The printed tables of a bench record and of a first-call record."""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any


def first_call_table(record: Mapping[str, Any]) -> str:
    fc = record["first_call"]
    dev = record["device"]
    lines = [f"{record['op']} {record['shape_set']} {record['dtype']} on {dev['kind']} ({dev['platform']}): "
             f"first forward+backward result {fc['cold_s']:.2f} s from a fresh process with empty caches, "
             f"{fc['cached_s']:.2f} s with the caches it left: ratio {fc['ratio']:.3f} "
             f"(goal ≤ {fc['goal_ratio']}: {'met' if fc['met'] else 'NOT met'})"]
    for name, run in fc["runs"].items():
        stats = ", ".join(f"{k} {v}" for k, v in sorted(run["stats"].items())) or "-"
        startup = "-" if run["startup_s"] is None else f"{run['startup_s']:.2f} s"
        lines.append(f"  {name:6s} imports {startup}, results at {', '.join(f'{t:.2f}' for t in run['result_s'])} s; "
                     f"autotune: {stats}")
    lines.append("  left by the first: " + ", ".join(f"{k} {v}" for k, v in fc["cache_left"].items()))
    mode, table = fc["environment"]["WORKBENCH_AUTOTUNE"], fc.get("table")
    if table is not None:
        lines.append(f"  WORKBENCH_AUTOTUNE={mode}; tuning table {table['folder']}: "
                     f"{table['device_entries']} entries for {dev['kind']}")
    if record["interpreted"]:
        lines.append("  INTERPRETED: no cache applies, the figures are meaningless")
    return "\n".join(lines)


COLUMNS = ("shape", "implementation", "pass", "median ms", "min ms", "p90 ms", "GB/s", "% peak", "TFLOP/s",
           "× best peer", "max|Δ| o", "rms-rel", "")


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def table(record: Mapping[str, Any]) -> str:
    rows = []
    for r in record["results"]:
        worst = max((e["rms_rel"] for e in r["errors"].values()), default=0.0)
        first = next(iter(r["errors"]), None)
        rows.append((" ".join(f"{n}={s}" for n, s in r["shape"].items()), r["implementation"],
                     "fwd" if r["pass"] == "forward" else "fwd+bwd",
                     _fmt(r["ms"]["median"], ".3f"), _fmt(r["ms"]["min"], ".3f"), _fmt(r["ms"]["p90"], ".3f"),
                     _fmt(r["gb_per_s"], ".1f"),
                     _fmt(None if r["fraction_of_peak"] is None else 100 * r["fraction_of_peak"], ".1f"),
                     _fmt(r.get("tflops_per_s"), ".0f"),
                     _fmt(r["ratio_to_best_peer"], ".2f"),
                     _fmt(r["errors"][first]["max_abs"] if first else None, ".2e"), _fmt(worst, ".2e"),
                     r["status"] if r["status"] in ("WRONG", "unchecked") else ""))
    widths = [max(len(c), *(len(row[i]) for row in rows)) if rows else len(c) for i, c in enumerate(COLUMNS)]
    line = lambda cells: "  ".join(c.rjust(w) if i >= 3 else c.ljust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    out = [line(COLUMNS), line(["-" * w for w in widths]), *map(line, rows)]
    for r in record["results"]:
        if r.get("paired"):
            pr = r["paired"]
            out.append(f"paired: {' '.join(f'{n}={s}' for n, s in r['shape'].items())} "
                       f"{'fwd' if r['pass'] == 'forward' else 'fwd+bwd'} {r['implementation']} / {pr['peer']} = "
                       f"{pr['ratio']:.3f} (rounds {pr['ratio_min']:.3f}-{pr['ratio_max']:.3f}, {pr['rounds']} rounds; "
                       f"medians {pr['ms']:.3f} / {pr['peer_ms']:.3f} ms)")
    out += _config_sources(record)
    for p in record["peers"]:
        if p["status"] != "measured":
            out.append(f"peer {p['peer']}: {p['status']}" + (f" ({p['reason']})" if p.get("reason") else ""))
    for s in record.get("skipped", ()):
        out.append(f"skipped {s['implementation']} at {' '.join(f'{n}={v}' for n, v in s['shape'].items())}: "
                   f"{s['reason']}")
    sources = {}
    for r in record["results"]:
        if r.get("error_source", "reference") != "reference":
            sources.setdefault(r["error_source"] or "nothing (unchecked)", {})[str(r["shape"])] = r["shape"]
    for source, shapes in sources.items():
        out.append(f"errors against {source} at " + "; ".join(" ".join(f"{n}={v}" for n, v in s.items())
                                                             for s in shapes.values()) + " (no reference there)")
    dev = record["device"]
    out.append(f"{record['op']} {record['shape_set']} {record['dtype']} on {dev['kind']} ({dev['platform']}), "
               f"{record['iters']} samples of {record.get('reps', 1)} back-to-back call(s) after {record['warmup']} warm-up"
               + (f" and {record['settle_s']:g} s of calls" if record.get("settle_s") else "")
               + (", per copy of n in one program (the records' `copies`; torch peers by calls)"
                  if record.get("timer") == "copies" else "")
               + (", per copy of n in one program, by the span of its kernels on the device (the records' "
                  "`copies`; torch peers by calls)" if record.get("timer") == "device" else "")
               + (" — INTERPRETED: timings meaningless" if record["interpreted"] else ""))
    return "\n".join(out)


# config sources that do not depend on this machine's timing: the shipped table, a kernel with one candidate, and
# a choice this process already made (its first source is what the record keeps); "tuned" and "disk" do
TABLE_SOURCES = ("table", "table_nearest", "table_sibling", "table_sibling_nearest", "only", "memory")


def _config_sources(record: Mapping[str, Any]) -> list[str]:
    """With `--against` on a GPU: where each checkout's kernel configs came from, and a note when any did not
    come from the shipped table (timed at the first call, or an earlier run's choice in this machine's cache):
    the paired ratio then compares tuning as well as code."""
    if not record.get("against") or record.get("interpreted"):
        return []

    def counted(autotune):
        sources = collections.Counter(c["source"] for c in (autotune or {}).get("chosen", ()))
        return sources, ", ".join(f"{n} {s}" for s, n in sorted(sources.items())) or "none"

    runs = [("triton", *counted(record.get("autotune")))]
    runs += [(a["name"], *counted(a.get("autotune"))) for a in record["against"]]
    out = ["configs: " + "; ".join(f"{name} {text}" for name, _, text in runs)]
    off = [name for name, sources, _ in runs if set(sources) - set(TABLE_SOURCES)]  # tuned here or from the cache
    if off:
        out.append(f"note: not every config of {', '.join(off)} came from the tuning table: the paired ratios "
                   f"compare tuning as well as code")
    return out

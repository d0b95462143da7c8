"""Write the performance tables of docs/performance.md and the README from the records in data/bench/.

    python scripts/perf_table.py            # rewrite the generated blocks in place
    python scripts/perf_table.py --check    # exit 1 if either file is out of date (the tests run this)
    python scripts/perf_table.py --bench DIR --docs OUT.md --readme README.md

Nothing is measured here: every number comes from a JSON record that `workbench bench` wrote on a
GPU. Each output file keeps its hand-written prose; only the text between the markers
`<!-- perf-table:start -->` and `<!-- perf-table:end -->` is replaced (a missing docs file is created
with a title and the block). Which record speaks for an op:

* target: among the op's complete, compiled (not interpreted) records of the `target` shape set in
  which at least one peer was measured, the latest of those timed for device time: several calls per
  sample (`--reps` above 1: back-to-back calls) or `--timer copies` (copies of the call in one
  program); only where none is, the latest of the others (one call per sample adds launch latency).
  Its Triton row gives the time and `ratio_to_best_peer` (our median ÷ the fastest correct peer's
  in the same run; below 1 is faster);
* sweep: for every sequence length of the op's `sweep` records, the latest record that timed it with
  a peer (a long sweep is recorded in parts, `--T`; a run cut short counts for the shapes it finished);
* ring_attention (weak scaling, no peer): the latest record, at its largest device count, zigzag
  layout; the ratio is the efficiency, one device's share of single-GPU flash attention ÷ ring time.

The first-call records (`data/bench/first_call/`, `workbench bench --first-call`) give a third pair
of blocks, between `<!-- first-call:start -->` and `<!-- first-call:end -->`: the latest record per op
and shape set as a table in docs/autotune.md, and the latest `target` and `off_table` records (the
shape set absent from the tuning table) as one sentence in the README.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- perf-table:start -->", "<!-- perf-table:end -->"
FIRST_START, FIRST_END = "<!-- first-call:start -->", "<!-- first-call:end -->"
FIRST_CALL_OPS = ("recurrent", "chunk_gla", "chunk_kda", "flash_attention")
PASSES = ("forward", "forward_backward")
RING = "ring_attention"
DOCS_TITLE = "# Performance\n\n"


# ----------------------------------------------------------------------------- reading records


@dataclass(frozen=True)
class Record:
    path: Path
    data: dict

    @property
    def op(self) -> str:
        return self.data["op"]

    @property
    def date(self) -> str:
        return self.data["date"]

    @property
    def device(self) -> str:
        device = self.data["device"]
        name = device.get("kind", device.get("name", "?")) if isinstance(device, dict) else str(device)
        return name.removeprefix("NVIDIA ")

    @property
    def reps(self) -> int:
        return self.data.get("reps") or 1

    @property
    def device_timed(self) -> bool:
        """Timed so that launch latency is amortised: back-to-back calls, or copies in one program."""
        return self.reps > 1 or self.data.get("timer") == "copies"

    def rows(self, implementation: str | None = None, kind: str | None = None) -> list[dict]:
        return [r for r in self.data.get("results", []) if r.get("status") == "ok"
                and (implementation is None or r["implementation"] == implementation)
                and (kind is None or r.get("kind") == kind)]


def load(bench_dir: Path) -> list[Record]:
    """Every compiled record in `bench_dir` (`*.json` only: `.json.partial` is a run in progress) but those
    timed `--against` another checkout of workbench (its peer is our own code). A record that was cut short
    (`complete: false`) is kept for the sweep shapes it timed in full, never for a target row."""
    records = []
    for path in sorted(bench_dir.glob("*.json")):
        data = json.loads(path.read_text())
        if data.get("interpreted") or "results" not in data:
            continue  # a CPU smoke run, or the first recurrent records (before the harness)
        if data.get("against"):
            continue  # `--against`: our code against another checkout of it, not against a peer
        records.append(Record(path, data))
    return records


def _shape_key(shape: dict) -> tuple:
    return tuple(sorted(shape.items()))


def _shape_text(shape: dict) -> str:
    dims = {k: v for k, v in shape.items() if k != "causal"}
    if "K" in dims and dims.get("K") == dims.get("V"):
        dims["K=V"] = dims.pop("K")
        dims.pop("V")
    return " ".join(f"{k}={v}" for k, v in dims.items())


def _variant(op: str, shape: dict) -> str:
    if "causal" not in shape:
        return op
    return f"{op} ({'causal' if shape['causal'] else 'non-causal'})"


def _peer_name(name: str) -> str:
    """`fla.ops.gla.chunk_gla` → `fla chunk_gla`; `jax.nn.dot_product_attention[cudnn]` → `cuDNN`."""
    if name.startswith("fla.ops."):
        return "fla " + name.rsplit(".", 1)[1]
    backend = name.removeprefix("jax.nn.dot_product_attention[").removesuffix("]")
    if backend != name:
        return {"cudnn": "cuDNN", "xla": "XLA"}.get(backend, backend) + " (jax.nn.dot_product_attention)"
    return name


def _best_peer(record: Record, shape: dict, pass_: str) -> dict | None:
    peers = [r for r in record.rows(kind="peer") if r["pass"] == pass_ and r["shape"] == shape]
    return min(peers, key=lambda r: r["ms"]["median"], default=None)


def _timing(record: Record, shape: dict) -> dict | None:
    """{pass: (ms, ratio, best peer)} of the Triton row at `shape`, or None if it has no peer there."""
    out = {}
    for pass_ in PASSES:
        ours = [r for r in record.rows("triton") if r["pass"] == pass_ and r["shape"] == shape]
        peer = _best_peer(record, shape, pass_)
        if not ours or peer is None or ours[0].get("ratio_to_best_peer") is None:
            return None
        out[pass_] = (ours[0]["ms"]["median"], ours[0]["ratio_to_best_peer"], _peer_name(peer["implementation"]))
    return out


# ----------------------------------------------------------------------------- choosing rows


@dataclass(frozen=True)
class Row:
    label: str
    record: Record
    shape: str
    forward: tuple[float, float]  # (ms, ratio)
    forward_backward: tuple[float, float]
    peer: str
    ratio_name: str = "ratio"


def target_rows(records: list[Record]) -> list[Row]:
    rows = []
    ops = sorted({r.op for r in records if r.op != RING})
    for op in ops:
        candidates = [r for r in records if r.op == op and r.data.get("shape_set") == "target"
                      and r.data.get("complete") is not False and any(_timing(r, s) for s in r.data["shapes"])]
        if not candidates:
            continue
        record = max(candidates, key=lambda r: (r.device_timed, r.date))
        for shape in record.data["shapes"]:
            timing = _timing(record, shape)
            if timing is None:
                continue
            peers = {timing[p][2] for p in PASSES}
            rows.append(Row(_variant(op, shape), record, _shape_text(shape), timing["forward"][:2],
                            timing["forward_backward"][:2], " / ".join(sorted(peers))))
    ring = ring_row(records)
    return rows + ([ring] if ring else [])


def ring_row(records: list[Record]) -> Row | None:
    rings = [r for r in records if r.op == RING]
    if not rings:
        return None
    record = max(rings, key=lambda r: r.date)
    devices = max(r["devices"] for r in record.data["results"])
    by_pass = {r["pass"]: r for r in record.data["results"] if r["devices"] == devices and r["layout"] == "zigzag"}
    shape = dict(record.data["shape"])
    label = f"ring_attention (zigzag, {devices} GPUs)"
    pick = lambda p: (by_pass[p]["ring_ms"]["median"], by_pass[p]["efficiency"])  # noqa: E731
    return Row(label, record, f"{_shape_text(shape)} per GPU", pick("forward"), pick("forward_backward"),
               "one GPU's share of flash_attention (weak scaling)", ratio_name="efficiency")


def sweep_rows(records: list[Record]) -> dict[str, list[tuple[dict, Record, dict]]]:
    """op → [(shape, record, timing)] in sequence-length order, the latest record per shape."""
    latest: dict[tuple, tuple[dict, Record, dict]] = {}
    for record in sorted(records, key=lambda r: r.date):
        if record.op == RING or record.data.get("shape_set") != "sweep":
            continue
        for shape in record.data["shapes"]:
            timing = _timing(record, shape)
            if timing:
                latest[(record.op, _shape_key(shape))] = (shape, record, timing)
    out: dict[str, list] = {}
    for (op, _), entry in sorted(latest.items(), key=lambda kv: (kv[0][0], -kv[1][0].get("causal", 0),
                                                                  kv[1][0]["T"])):
        out.setdefault(op, []).append(entry)
    return out


# ----------------------------------------------------------------------------- writing


def _ms(value: tuple[float, float], ratio_name: str = "ratio") -> str:
    ms, ratio = value
    digits = 3 if ms < 1 else 2 if ms < 10 else 1 if ms < 100 else 0
    return f"{ms:.{digits}f} ms ({'eff ' if ratio_name == 'efficiency' else ''}{ratio:.2f})"


def _date(record: Record) -> str:
    return record.date[:10]


def _link(record: Record, prefix: str) -> str:
    rel = f"data/bench/{record.path.name}"
    return f"[`{record.path.stem.split('-', 1)[1]}`]({prefix}{rel})"


def readme_block(rows: list[Row]) -> str:
    lines = ["| op | GPU | forward (ratio) | forward+backward (ratio) | compared with |",
             "|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row.label} | {row.record.device} | {_ms(row.forward, row.ratio_name)} | "
                     f"{_ms(row.forward_backward, row.ratio_name)} | {row.peer} |")
    return "\n".join(lines)


def docs_block(rows: list[Row], sweeps: dict, records: list[Record]) -> str:
    out = ["Generated by `python scripts/perf_table.py` from `data/bench/`; do not edit by hand. Ratio: our",
           "median time ÷ the fastest correct peer's in the same run (below 1 is faster). bfloat16 throughout.",
           "",
           "### Target shapes",
           "",
           "| op | shape | device | date | record (`data/bench/<op>-…`) | forward ms (ratio) "
           "| fwd+bwd ms (ratio) | best peer |",
           "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        out.append(f"| {row.label} | {row.shape} | {row.record.device} | {_date(row.record)} | "
                   f"{_link(row.record, '../')} | {_ms(row.forward, row.ratio_name)} | "
                   f"{_ms(row.forward_backward, row.ratio_name)} | {row.peer} |")
    out += ["", "### Sweeps (one batch row, growing T)", "",
            "| op | shape | device | record | forward ms (ratio) | fwd+bwd ms (ratio) | best peer |",
            "|---|---|---|---|---|---|---|"]
    for op, entries in sweeps.items():
        for shape, record, timing in entries:
            peers = " / ".join(sorted({timing[p][2] for p in PASSES}))
            out.append(f"| {_variant(op, shape)} | {_shape_text(shape)} | {record.device} | "
                       f"{_link(record, '../')} | {_ms(timing['forward'][:2])} | "
                       f"{_ms(timing['forward_backward'][:2])} | {peers} |")
    rings = sorted((r for r in records if r.op == RING), key=lambda r: r.date)
    if rings:
        out += ["", "### Ring attention, weak scaling", "",
                "Efficiency = one device's share of single-GPU flash attention (causal work over the gathered",
                "sequence ÷ devices) ÷ ring time; target 0.8.", "",
                "| record | GPUs in the run | devices | layout | forward ms (efficiency) | fwd+bwd ms (efficiency) |",
                "|---|---|---|---|---|---|"]
        for record in rings:
            results = record.data["results"]
            for devices in sorted({r["devices"] for r in results if r["devices"] > 1}):
                for layout in ("contiguous", "zigzag"):
                    by_pass = {r["pass"]: r for r in results if r["devices"] == devices and r["layout"] == layout}
                    if set(PASSES) <= set(by_pass):
                        cells = [_ms((by_pass[p]["ring_ms"]["median"], by_pass[p]["efficiency"]), "efficiency")
                                 for p in PASSES]
                        out.append(f"| {_link(record, '../')} | {record.data.get('device_count', '?')} × "
                                   f"{record.device} | {devices} | {layout} | {cells[0]} | {cells[1]} |")
    return "\n".join(out)


def _shape_set(record: Record) -> str:
    return record.data.get("shape_set", "target")


def latest_first_calls(folder: Path) -> list[Record]:
    """The latest complete compiled first-call record of each GPU kind, op and shape set in `folder`, in
    FIRST_CALL_OPS order (target first), GPU kinds in name order."""
    latest: dict[tuple[str, str, str], Record] = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        data = json.loads(path.read_text())
        if data.get("complete") is False or data.get("interpreted") or "first_call" not in data:
            continue
        record = Record(path, data)
        key = (record.device, record.op, _shape_set(record))
        if key not in latest or record.date >= latest[key].date:
            latest[key] = record
    order = {op: i for i, op in enumerate(FIRST_CALL_OPS)}
    return sorted(latest.values(), key=lambda r: (r.device, order.get(r.op, len(order)), r.op,
                                                  _shape_set(r) != "target", _shape_set(r)))


def _mode(record: Record) -> str:
    """The record's WORKBENCH_AUTOTUNE (records before the tuning table ran with `on`)."""
    return record.data["first_call"].get("environment", {}).get("WORKBENCH_AUTOTUNE", "on")


def first_call_docs_block(records: list[Record]) -> str:
    out = ["Generated by `python scripts/perf_table.py` from `data/bench/first_call/`; do not edit by hand.", "",
           "| op | GPU | shape set | shapes | date | WORKBENCH_AUTOTUNE | cold_s | cached_s | ratio "
           "| configs tuned / from the table (nearest) → read | kernels compiled → loaded | record |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for record in records:
        fc = record.data["first_call"]
        cold, cached = (fc["runs"][run].get("stats", {}) for run in ("cold", "cached"))
        shapes = "; ".join(dict.fromkeys(_shape_text(shape) for shape in record.data.get("shapes", [])))
        rel = f"data/bench/first_call/{record.path.name}"
        table = sum(n for k, n in cold.items() if k.startswith("chosen_table"))  # the sibling kind's too
        read = cached.get("chosen_disk", 0) + sum(n for k, n in cached.items() if k.startswith("chosen_table"))
        out.append(f"| {record.op} | {record.device} | {_shape_set(record)} | {shapes} | {_date(record)} | "
                   f"{_mode(record)} | {fc['cold_s']:.1f} | {fc['cached_s']:.1f} | {fc['ratio']:.2f} | "
                   f"{cold.get('chosen_tuned', 0)} / {table} ({cold.get('chosen_table_nearest', 0)}) → {read} | "
                   f"{cold.get('kernels_compiled', 0)} → {cached.get('kernels_loaded', 0)} | "
                   f"[`{record.path.stem.split('-', 1)[1]}`](../{rel}) |")
    return "\n".join(out)


def first_call_readme_block(records: list[Record]) -> str:
    """One line per GPU kind: each op's cold → cached seconds at the target shape, then at the off-table
    shape (T = 3000, H = 12), under the lead sentence that says what the numbers are."""
    if not records:
        return "No first-call record yet."
    modes = " and ".join(sorted({_mode(r) for r in records}))
    lines = [f"First forward+backward in a fresh process with empty caches → with the caches an earlier "
             f"process left (`workbench bench --first-call`, `WORKBENCH_AUTOTUNE={modes}`), at the target "
             f"shape; at T = 3000, H = 12 (no tuning-table entry: the nearest serves):"]
    for device in dict.fromkeys(r.device for r in records):
        parts = []
        for where, label in (("target", ""), ("off_table", "Off-table: ")):
            chosen = [r for r in records if r.device == device and _shape_set(r) == where]
            if chosen:
                parts.append(label + "; ".join(f"{r.op} {r.data['first_call']['cold_s']:.0f} → "
                                               f"{r.data['first_call']['cached_s']:.1f} s" for r in chosen))
        lines.append(f"- {device}: " + ". ".join(parts) + ".")
    return "\n".join(lines)


def replace_block(text: str, block: str, where: str, markers: tuple[str, str] = (START, END)) -> str:
    start, end = markers
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise SystemExit(f"{where}: expected one {start} … {end} block")
    head, rest = text.split(start)
    _, tail = rest.split(end)
    return f"{head}{start}\n{block}\n{end}{tail}"


def render(bench_dir: Path, docs: Path, readme: Path | None, autotune_doc: Path | None = None) -> dict[Path, str]:
    """{path: new text} for the docs page (created if missing), the README (if given) and the autotuning
    page (if given; its first-call block)."""
    records = load(bench_dir)
    rows = target_rows(records)
    first_calls = latest_first_calls(bench_dir / "first_call")
    docs_text = docs.read_text() if docs.exists() else f"{DOCS_TITLE}{START}\n{END}\n"
    out = {docs: replace_block(docs_text, docs_block(rows, sweep_rows(records), records), str(docs))}
    if readme is not None:
        text = replace_block(readme.read_text(), readme_block(rows), str(readme))
        if FIRST_START in text:
            text = replace_block(text, first_call_readme_block(first_calls), str(readme), (FIRST_START, FIRST_END))
        out[readme] = text
    if autotune_doc is not None:
        out[autotune_doc] = replace_block(autotune_doc.read_text(), first_call_docs_block(first_calls),
                                          str(autotune_doc), (FIRST_START, FIRST_END))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", type=Path, default=ROOT / "data" / "bench", help="records (default data/bench)")
    parser.add_argument("--docs", type=Path, default=ROOT / "docs" / "performance.md",
                        help="page with the full tables (default docs/performance.md)")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md",
                        help="file with the short table (default README.md)")
    parser.add_argument("--autotune-doc", type=Path, default=ROOT / "docs" / "autotune.md",
                        help="page with the first-call table (default docs/autotune.md)")
    parser.add_argument("--no-readme", action="store_true", help="leave the README and the autotuning page alone")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file is out of date")
    args = parser.parse_args(argv)
    texts = render(args.bench, args.docs, None if args.no_readme else args.readme,
                   None if args.no_readme else args.autotune_doc)
    stale = [path for path, text in texts.items() if not path.exists() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"{path}: out of date with {args.bench}; run python scripts/perf_table.py", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(texts[path])
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The tuning table shipped with the package: the configs chosen on GPUs, looked up before anything is timed.

A fresh process on a fresh machine has an empty autotune cache, and timing every config of every kernel is
most of its first call (docs/autotune.md, "First call"). The table holds, per GPU kind, the choices a tuning
run made there (`workbench tune --write-table` on that GPU): one JSON file per device kind under
`workbench/tuning/`, a list of entries, each the tuning key's parts that identify a choice

    {"kernel", "source", "triton", "key", "arrays", "config"}

— the kernel's name and source hash (`autotune.source_hash` of the compiled function), the Triton version,
the kernel's autotune `key=` values, its arrays' dtypes and presence, and the chosen config as
`autotune.config_fields` writes it. `Table.choose` answers a launch's key (`autotune.tuning_key`):

1. the entry with the same kernel, source, key values and arrays, if its config is a candidate;
2. else the nearest entry of that kernel on that device: the same key values except the head counts and
   the launch's size in programs (`NEAREST`), which are nearest on a log scale (the sum of their
   |log ratio|s), and the same arrays;
3. else, on a GPU kind with a sibling (`SIBLINGS`: the same architecture and multiprocessor count), the
   sibling table's answer by 1 and 2, as "table_sibling" or "table_sibling_nearest": a kernel changed since
   its kind was last tuned (its entries there dropped) still launches untimed, with the choice made on
   the sibling, until `workbench tune --write-table` on its own kind replaces it;
4. else nothing: the launcher times the candidates as before.

Among equally near entries, one tuned with the launch's own Triton release wins; an entry tuned with another
release serves until the GPU kind is tuned on this one (the configs are the kernel's own, and the
compiler's release changes which is fastest far less than the shape does: docs/autotune.md, "A new
Triton"). Entries of the device whose kernel matches by name but not by source were made for other code:
they are ignored, with one warning per kernel. A table file that is not valid JSON (or not a list of
entries) is ignored with one warning. The table is read once per process.
"""

from __future__ import annotations

import json
import math
import re
import threading
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

FOLDER = Path(__file__).resolve().parent / "tuning"
NEAREST = ("H", "HKV", "programs")  # key values that may differ between a launch and the entry serving it
FIELDS = ("kernel", "source", "triton", "key", "arrays", "config")
SIBLINGS = {"NVIDIA H100 80GB HBM3": "NVIDIA H200", "NVIDIA H200": "NVIDIA H100 80GB HBM3"}
"""GPU kinds whose tables answer for each other where one has no entry for a kernel: both sm_90 with 132
multiprocessors and the same caches, so a config is valid on both and the compiler makes the same kernel of it;
they differ in memory bandwidth (3.35 against 4.8 TB/s). Tuned apart, their tables chose the same config for
76 % of the keys both hold (docs/autotune.md, "Sibling GPU kinds")."""


class TableWarning(UserWarning):
    """A table file or entries that cannot serve this process; lookups go on without them."""


def device_file(device: str, folder: Path = FOLDER) -> Path:
    """The table file of a device kind: `NVIDIA H100 80GB HBM3` → `tuning/NVIDIA_H100_80GB_HBM3.json`."""
    return Path(folder) / (re.sub(r"[^A-Za-z0-9.]+", "_", device).strip("_") + ".json")


def entry_of(key: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """The table entry of a tuning key (`autotune.tuning_key`) and its chosen config."""
    return {"kernel": key["kernel"], "source": key["source"], "triton": key["versions"].get("triton"),
            "key": dict(key["key"]), "arrays": list(key["arrays"]), "config": dict(config)}


class Table:
    """The entries of one device kind, with the lookups of the module docstring."""

    def __init__(self, device: str, entries: Iterable[Mapping[str, Any]] = (), sibling: Table | None = None):
        self.device = device
        self.entries = [dict(e) for e in entries]
        self.sibling = sibling  # asked where this table has no answer (`SIBLINGS`)
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    @classmethod
    def load(cls, device: str, folder: Path = FOLDER, sibling: Table | None = None) -> Table:
        """The table of `device` (empty without a file; a file that cannot be read: empty, one warning), asking
        `sibling` where it has no answer."""
        path = device_file(device, folder)
        if not path.exists():
            return cls(device, sibling=sibling)
        try:
            entries = json.loads(path.read_text())
            if not isinstance(entries, list) or not all(isinstance(e, dict) and set(FIELDS) <= set(e)
                                                        for e in entries):
                raise ValueError(f"expected a list of entries with fields {', '.join(FIELDS)}")
        except (OSError, ValueError) as exc:
            warnings.warn(f"workbench tuning table: ignoring {path}: {exc}", TableWarning, stacklevel=2)
            return cls(device, sibling=sibling)
        return cls(device, entries, sibling=sibling)

    def choose(self, key: Mapping[str, Any], candidates: Sequence[Mapping[str, Any]]) -> tuple[int, str] | None:
        """(index into `candidates`, "table" or "table_nearest") for the launch `key`; else the sibling's answer
        ("table_sibling" or "table_sibling_nearest"); else None."""
        found = self._own_choice(key, candidates)
        if found is None and self.sibling is not None:
            found = self.sibling._own_choice(key, candidates)
            if found is not None:
                found = (found[0], found[1].replace("table", "table_sibling", 1))
        return found

    def _own_choice(self, key: Mapping[str, Any], candidates: Sequence[Mapping[str, Any]]) -> tuple[int, str] | None:
        same_kernel = [e for e in self.entries if e["kernel"] == key["kernel"]]
        current = [e for e in same_kernel if e["source"] == key["source"]]
        if same_kernel and not current:
            with self._lock:
                first = key["kernel"] not in self._warned
                self._warned.add(key["kernel"])
            if first:
                warnings.warn(f"workbench tuning table: the {self.device} entries of {key['kernel']} were made for "
                              "another kernel source; ignored", TableWarning, stacklevel=4)
            return None
        fields = [dict(c) for c in candidates]
        triton = key["versions"].get("triton")
        usable = [e for e in current if e["arrays"] == list(key["arrays"]) and e["config"] in fields]
        ranked = sorted(((_distance(e["key"], key["key"]), e["triton"] != triton, i) for i, e in enumerate(usable)))
        if not ranked or not math.isfinite(ranked[0][0]):
            return None
        distance, _, i = ranked[0]
        return fields.index(usable[i]["config"]), "table" if distance == 0 else "table_nearest"

    def merged(self, entries: Iterable[Mapping[str, Any]]) -> Table:
        """This table with `entries` added; a new entry replaces one of the same kernel, source, Triton,
        key values and arrays, and the entries of a kernel made for another source than the new ones' go
        (they can serve no launch of the kernel as it is now)."""
        entries = list(entries)
        current = {}
        for e in entries:
            current.setdefault(e["kernel"], set()).add(e["source"])
        out = {_identity(e): e for e in self.entries if e["source"] in current.get(e["kernel"], {e["source"]})}
        out.update({_identity(e): dict(e) for e in entries})
        return Table(self.device, sorted(out.values(), key=lambda e: json.dumps(_identity(e), sort_keys=True)))

    def write(self, folder: Path = FOLDER) -> Path:
        path = device_file(self.device, folder)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.entries, indent=1, sort_keys=True) + "\n")
        return path


def _identity(entry: Mapping[str, Any]) -> tuple:
    return (entry["kernel"], entry["source"], entry["triton"], json.dumps(entry["key"], sort_keys=True),
            json.dumps(entry["arrays"]))


def _distance(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    """Σ |log x − log y| over the `NEAREST` values; inf when any other key value differs."""
    if set(a) != set(b):
        return math.inf
    total = 0.0
    for name in a:
        if a[name] == b[name]:
            continue
        x, y = a[name], b[name]
        if name not in NEAREST or not isinstance(x, int) or not isinstance(y, int) or x <= 0 or y <= 0:
            return math.inf
        total += abs(math.log(x) - math.log(y))
    return total


_TABLES: dict[tuple[str, str], Table] = {}
_TABLES_LOCK = threading.Lock()


def table_for(device: str, folder: Path = FOLDER) -> Table:
    """The process-wide table of a device kind, with its sibling's (`SIBLINGS`) to answer where it has none."""
    with _TABLES_LOCK:
        key = (device, str(folder))
        if key not in _TABLES:
            sibling = Table.load(SIBLINGS[device], folder) if device in SIBLINGS else None
            _TABLES[key] = Table.load(device, folder, sibling=sibling)
        return _TABLES[key]


def entries_from_store(folder: Path) -> list[dict[str, Any]]:
    """Table entries from an autotune store (`<cache>/autotune/*.json`, as `autotune.Choices.tune` writes
    them), for `workbench tune --write-table`: one per tuned key, with the config it chose."""
    out = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            stored = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(stored, dict) and "key" in stored and "config" in stored:
            out.append(entry_of(stored["key"], stored["config"]))
    return out

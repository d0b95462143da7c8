"""Bench records on disk: one new `<out>/<op>-<UTC stamp>.json` per run, never overwritten; the name claimed
when the run starts, and a `.json.partial` kept up to date while it goes (a run cut short leaves what it
measured).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np


DEFAULT_OUT = Path("data/bench")


class Refused(Exception):
    """The run was not started (a shape set too large for the Triton interpreter, a file exists)."""


def stamp_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def claim_stamp(op: str, out: Path) -> str:
    """A stamp for a new run of `op` whose record names in `out` no other run holds: the UTC time, with `-2`, `-3`, …
    after it when a run of the same second already left `<op>-<stamp>.json` or `.json.partial` there. The name is
    claimed by creating its `.json.partial` (exclusively, so two processes cannot take the same one), holding an
    empty incomplete record until the run's first progress replaces it."""
    out.mkdir(parents=True, exist_ok=True)
    base = stamp_now()
    for n in itertools.count(1):
        stamp = base if n == 1 else f"{base}-{n}"
        if (out / f"{op}-{stamp}.json").exists():
            continue
        try:
            with (out / f"{op}-{stamp}.json.partial").open("x") as fh:
                json.dump({"op": op, "complete": False, "results": []}, fh)
                fh.write("\n")
        except FileExistsError:
            continue
        return stamp
    raise AssertionError("unreachable")


def release_stamp(op: str, out: Path, stamp: str) -> None:
    """Remove the `.json.partial` that `claim_stamp` made if the run ended before recording anything in it (a run
    that measured something keeps its partial record)."""
    path = out / f"{op}-{stamp}.json.partial"
    try:
        if not json.loads(path.read_text())["results"]:
            path.unlink()
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        pass


def write_partial(record: Mapping[str, Any], out: Path, stamp: str) -> Path:
    """The record so far of a run still going, as `<out>/<op>-<stamp>.json.partial` (rewritten as the run
    goes, removed by `write` when it ends; a run killed by a time limit leaves it behind)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{record['op']}-{stamp}.json.partial"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2, default=_json_default) + "\n")
    tmp.replace(path)
    return path


def write(record: Mapping[str, Any], out: Path = DEFAULT_OUT, stamp: str | None = None) -> Path:
    """Write `record` to a new `<out>/<op>-<UTC timestamp>.json`; refuse if that file exists."""
    stamp = stamp or stamp_now()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{record['op']}-{stamp}.json"
    try:
        with path.open("x") as fh:  # exclusive: records are append-only
            json.dump(record, fh, indent=2, default=_json_default)
            fh.write("\n")
    except FileExistsError:
        raise Refused(f"{path} exists; bench records are never overwritten") from None
    (out / f"{record['op']}-{stamp}.json.partial").unlink(missing_ok=True)
    return path


def _json_default(x):
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")

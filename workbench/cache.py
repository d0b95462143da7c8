"""The workbench cache folder ($WORKBENCH_CACHE_DIR, default ~/.cache/workbench): one JSON file per key, written
whole, and the WORKBENCH_AUTOTUNE mode that says whether it is read and written.

Two stores live there: `autotune/` (configs the autotuner chose, `workbench.autotune`) and `kernels/` (kernels
compiled to PTX, `workbench.gpu_call`). Standard library only: a process that only reads or writes entries
(tests, tools) need not import JAX or Triton.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MODE_VAR = "WORKBENCH_AUTOTUNE"
REFRESH_VAR = "WORKBENCH_AUTOTUNE_REFRESH"  # with mode refresh: only these kernels (comma list; unset: all)
CACHE_VAR = "WORKBENCH_CACHE_DIR"
MODES = ("table", "on", "off", "refresh")
FORMAT = 1  # of the files; part of every key, so a new layout never reads an old file


class CacheWarning(UserWarning):
    """A cache file or folder that could not be used; the call goes on without it."""


def mode() -> str:
    """WORKBENCH_AUTOTUNE: `table` (default), `on`, `off` or `refresh`."""
    value = os.environ.get(MODE_VAR, "table").strip().lower() or "table"
    if value not in MODES:
        raise ValueError(f"{MODE_VAR}: expected one of {', '.join(MODES)}, got {os.environ[MODE_VAR]!r}")
    return value


def refreshes(kernel: str) -> bool:
    """Whether mode `refresh` re-times `kernel`: WORKBENCH_AUTOTUNE_REFRESH unset or empty means every kernel,
    else a comma list of kernel names (the others choose as in mode `table`)."""
    names = {n.strip() for n in os.environ.get(REFRESH_VAR, "").split(",") if n.strip()}
    return not names or kernel in names


def cache_dir() -> Path:
    """WORKBENCH_CACHE_DIR, default ~/.cache/workbench."""
    return Path(os.environ.get(CACHE_VAR) or Path.home() / ".cache" / "workbench").expanduser()


def canonical(value: Any) -> Any:
    """`value` as JSON gives it back (tuples become lists, unknown objects their repr)."""
    return json.loads(json.dumps(value, default=repr))


def digest(key: Mapping[str, Any]) -> str:
    """sha256 of the key's canonical JSON: the file name of its entry."""
    text = json.dumps(key, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


class Store:
    """One JSON file per key in `folder`: `{"format", "key", ...}`.

    `read` returns the entry or None (no file; or a file that cannot be read, is not JSON, or holds
    another key: then with a `CacheWarning`). `write` writes a temporary file beside the target and
    renames it over the target (atomic on POSIX), so readers and concurrent writers only ever see
    whole files; an error is a `CacheWarning`, never an exception.
    """

    def __init__(self, folder: Path | str):
        self.folder = Path(folder)

    def path(self, key: Mapping[str, Any]) -> Path:
        return self.folder / f"{digest(key)}.json"

    def read(self, key: Mapping[str, Any]) -> dict[str, Any] | None:
        path = self.path(key)
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            warnings.warn(f"workbench cache: ignoring unreadable {path}: {exc}", CacheWarning, stacklevel=2)
            return None
        try:
            entry = json.loads(text)
            if not isinstance(entry, dict) or entry.get("format") != FORMAT:
                raise ValueError(f"not a workbench cache entry of format {FORMAT}")
            if entry.get("key") != canonical(key):
                raise ValueError("it holds another key")
        except ValueError as exc:
            warnings.warn(f"workbench cache: ignoring corrupt {path}: {exc}", CacheWarning, stacklevel=2)
            return None
        return entry

    def write(self, key: Mapping[str, Any], entry: Mapping[str, Any]) -> Path | None:
        path = self.path(key)
        tmp = None
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=f".{path.stem[:16]}-", suffix=".tmp")
            with os.fdopen(fd, "w") as fh:
                json.dump({**entry, "format": FORMAT, "key": canonical(key)}, fh, default=repr)
            os.replace(tmp, path)
            return path
        except OSError as exc:
            warnings.warn(f"workbench cache: could not write {path}: {exc}", CacheWarning, stacklevel=2)
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            return None

"""What a bench record says of the machine and the code: the device, the library versions, the git commit."""

from __future__ import annotations

import importlib
import platform
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax


PEAK_BYTES_PER_S = {"H100": 3.35e12, "H200": 4.8e12}


def device_info() -> dict[str, Any]:
    dev = jax.devices()[0]
    driver = None
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    peak = next((b for name, b in PEAK_BYTES_PER_S.items() if name in dev.device_kind), None)
    return {"name": str(dev), "kind": dev.device_kind, "platform": dev.platform, "driver": driver,
            "peak_bytes_per_s": peak}


def versions(extra: Sequence[str] = ()) -> dict[str, str]:
    """python, jax, jaxlib, triton, numpy and each module in `extra` (when importable)."""
    out = {"python": platform.python_version()}
    for name in ("jax", "jaxlib", "triton", "numpy", *extra):
        try:
            out[name] = getattr(importlib.import_module(name), "__version__", "unknown")
        except ImportError:
            pass
    return out


def git_state(root: Path | None = None) -> dict[str, Any]:
    """{commit, dirty} of the git checkout at `root` (default this package's), {commit: None} outside one."""
    root = Path(__file__).resolve().parents[2] if root is None else root

    def git(*args):
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=20)

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode:
            return {"commit": None}
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
        return {"commit": head.stdout.strip(), "dirty": bool(dirty)}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None}

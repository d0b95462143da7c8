"""Decide, before Triton is imported, whether kernels run compiled (CUDA) or in the interpreter.

`@triton.jit` builds an interpreted function only if TRITON_INTERPRET=1 is set when the function is
*decorated*, and that includes Triton's own standard library (`tl.sum`, `tl.cumsum`, …), decorated
when `triton.language` is first imported. So the choice is made here, first thing on importing
workbench, and imported by nothing that needs Triton itself.

Override with WORKBENCH_INTERPRET=1 (force the interpreter) or WORKBENCH_INTERPRET=0 (force CUDA).
WORKBENCH_MIN_GPUS=n (a program that needs several devices, like the multi-device notebooks): with fewer than
n visible GPUs, run on the host CPU instead, as if there were no GPU: Triton interpreted and JAX's platform set
to `cpu` (unless JAX_PLATFORMS is already set), so the host devices that
`--xla_force_host_platform_device_count` asks for are JAX's devices. Read when workbench is imported, before
JAX starts.
"""

import importlib.util
import os
import re
import sys

MIN_GPUS_VARIABLE = "WORKBENCH_MIN_GPUS"


def _cuda_available() -> bool:
    """A CUDA GPU that JAX can drive: JAX's CUDA plugin installed and a device node present."""
    has_plugin = any(
        importlib.util.find_spec(name) is not None for name in ("jax_cuda13_plugin", "jax_cuda12_plugin")
    )
    return has_plugin and os.path.exists("/dev/nvidiactl")


def visible_gpus(nodes: list[str] | None = None, listed: str | None = None) -> int:
    """The NVIDIA GPUs this process may use, counted without starting JAX: the device nodes `/dev/nvidia0`,
    `/dev/nvidia1`, … (`nodes`: their names, default read from /dev), narrowed by CUDA_VISIBLE_DEVICES
    (`listed`, default read from the environment: as many as it names, none when it is empty or starts
    with -1)."""
    if nodes is None:
        nodes = os.listdir("/dev") if os.path.isdir("/dev") else []
    count = sum(1 for name in nodes if re.fullmatch(r"nvidia\d+", name))
    if listed is None:
        listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return count
    ids = [i.strip() for i in listed.split(",") if i.strip()]
    return 0 if not ids or ids[0].startswith("-") else min(len(ids), count)


def host_instead(min_gpus: str | None, gpus: int) -> bool:
    """Whether WORKBENCH_MIN_GPUS (`min_gpus`, None when unset) sends this process to the host CPU, given
    `gpus` visible GPUs; a value that is not a whole number is a ValueError naming the variable."""
    if min_gpus is None or not min_gpus.strip():
        return False
    if not min_gpus.strip().isdigit():
        raise ValueError(f"{MIN_GPUS_VARIABLE}: expected a whole number of GPUs, got {min_gpus!r}")
    return gpus < int(min_gpus)


def _decide() -> bool:
    forced = os.environ.get("WORKBENCH_INTERPRET")
    if forced is not None:
        return forced.lower() not in ("", "0", "false")
    if host_instead(os.environ.get(MIN_GPUS_VARIABLE), visible_gpus()):
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        return True
    return os.environ.get("TRITON_INTERPRET") == "1" or not _cuda_available()


INTERPRET: bool = _decide()

if INTERPRET:
    if "triton.language" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        raise ImportError(
            "workbench runs Triton kernels in the interpreter on this machine (no CUDA GPU), which "
            "needs TRITON_INTERPRET=1 before Triton is imported; Triton was imported first. Import "
            "workbench before triton, or set TRITON_INTERPRET=1 in the environment."
        )
    os.environ["TRITON_INTERPRET"] = "1"

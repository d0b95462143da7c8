"""Decide, before Triton is imported, whether kernels run compiled (CUDA) or in the interpreter.

`@triton.jit` builds an interpreted function only if TRITON_INTERPRET=1 is set when the function is
*decorated*, and that includes Triton's own standard library (`tl.sum`, `tl.cumsum`, …), decorated
when `triton.language` is first imported. So the choice is made here, first thing on importing
workbench, and imported by nothing that needs Triton itself.

Override with WORKBENCH_INTERPRET=1 (force the interpreter) or WORKBENCH_INTERPRET=0 (force CUDA).
"""

import importlib.util
import os
import sys


def _cuda_available() -> bool:
    """A CUDA GPU that jax-triton can drive: JAX's CUDA plugin installed and a device node present."""
    has_plugin = any(
        importlib.util.find_spec(name) is not None for name in ("jax_cuda13_plugin", "jax_cuda12_plugin")
    )
    return has_plugin and os.path.exists("/dev/nvidiactl")


def _decide() -> bool:
    forced = os.environ.get("WORKBENCH_INTERPRET")
    if forced is not None:
        return forced.lower() not in ("", "0", "false")
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

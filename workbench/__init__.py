"""workbench: attention and linear-attention kernels in Triton, each proven against a JAX reference.

Public ops (see API.md): `recurrent`.
"""

from . import _backend  # noqa: F401  (first: compiled vs interpreted Triton, before triton loads)
from .recurrent import recurrent

__all__ = ["recurrent"]

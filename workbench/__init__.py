"""workbench: attention and linear-attention kernels in Triton, each proven against a JAX reference.

Public ops (see API.md): `recurrent`, `chunk_gla`, `chunk_kda`, `recurrent_kda`, `flash_attention` (with `dropout_keep_mask`), `ring_attention`
(with `sharded_ring_attention`).
"""

from . import _backend  # noqa: F401  (first: compiled vs interpreted Triton, before triton loads)
from .chunk_gla import chunk_gla
from .flash_attention import dropout_keep_mask, flash_attention
from .kda import chunk_kda, recurrent_kda
from .recurrent import recurrent
from .ring_attention import ring_attention, sharded_ring_attention

__all__ = ["recurrent", "chunk_gla", "chunk_kda", "recurrent_kda", "flash_attention", "dropout_keep_mask", "ring_attention", "sharded_ring_attention"]

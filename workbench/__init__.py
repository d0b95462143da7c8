"""workbench: attention and linear-attention kernels in Triton, each proven against a JAX reference.

Public ops (docs/API.md): `recurrent`, `chunk_gla`, `chunk_kda`, `recurrent_kda`, `flash_attention` (with
`dropout_keep_mask`), `ring_attention` (with `sharded_ring_attention`). The toolkit for a kernel of your own
(docs/API.md, "Toolkit"): `triton_call` (the launcher, compiled on a GPU and interpreted on a CPU) and
`TensorDescriptor` (a host-made TMA descriptor argument),
`testing.check` (the float64 oracle rule), `strategies`, `plots`; `INTERPRET` says which path runs.
"""

from . import _backend  # noqa: F401  (first: compiled vs interpreted Triton, before triton loads)
from . import testing  # noqa: F401  (workbench.testing.check without another import)
from .chunk_gla import chunk_gla
from .flash_attention import dropout_keep_mask, flash_attention
from .kda import chunk_kda, recurrent_kda
from .launch import INTERPRET, TensorDescriptor, triton_call  # noqa: F401  (INTERPRET: an attribute, not an op)
from .recurrent import recurrent
from .ring_attention import ring_attention, sharded_ring_attention

__all__ = ["recurrent", "chunk_gla", "chunk_kda", "recurrent_kda", "flash_attention", "dropout_keep_mask", "ring_attention",
           "sharded_ring_attention", "triton_call", "TensorDescriptor"]

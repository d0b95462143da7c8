"""`@triton.jit` steps the KDA kernels of several stages share: tiles of rows, per-chunk matrices, k̂'s decay.

Every chunked kernel sees packed sequences (`[TT, H, ·]` rows) cut into chunks of BT rows, in the
chunk slots of `workbench._bounds.chunk_slots` (`bounds[slot] = (start, end)` rows, start = end for an
unused slot; per-chunk states stored by slot). The per-chunk matrices A, Aqk, dAqk and dL are stored
`[TT, H, BT]` (float32, but Aqk in the inputs' dtype, which its products round it to): row r of its
chunk's matrix at the row of token r, columns by position in the chunk (NOTES.md, "Where A lives").
"""

import triton
import triton.language as tl

from ..tl_helpers import exp_e

# (kda.17) a chunk whose log-decays span at most this forms L and Aqk in two whole-chunk products through
# the midpoint of b: every factor within e^±30 (the target's chunks of 64 span 46–50)
WHOLE_RANGE = 60.0


@triton.jit
def tile_rows(x, rows, m_t, i_h, o_d, m_d, H: tl.constexpr, D: tl.constexpr):
    """Rows `rows` of x[TT, H, D] at head i_h, columns o_d, in x's dtype; zeros outside."""
    return tl.load(x + (rows[:, None] * H + i_h) * D + o_d[None, :], mask=m_t[:, None] & m_d[None, :], other=0.0)


@triton.jit
def load_matrix(M, rows, m_t, i_h, H: tl.constexpr, BT: tl.constexpr):
    """A chunk's [BT, BT] matrix stored [TT, H, BT] (row r at the row of token r), float32."""
    o_t = tl.arange(0, BT)
    return tl.load(M + (rows[:, None] * H + i_h) * BT + o_t[None, :], mask=m_t[:, None] & m_t[None, :], other=0.0)


@triton.jit
def khat_decay(b_b, b_bL, rows, end):
    """(kda.4) exp(b_L − b_s) per row, with the exponent the constant 0 from the last valid row on."""
    from_last = rows >= end - 1
    return exp_e(tl.where(from_last[:, None], 0.0, b_bL[None, :] - b_b))

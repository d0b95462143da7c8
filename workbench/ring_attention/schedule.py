"""The ring schedule: which keys a device attends to at each step, and how much work that is.

Plain Python on integers (no JAX), so the same rules drive the traced ring (`__init__.py`, where the
device index is traced and a `lax.cond` picks the branch), the single-device simulation in
`reference.py`, the notebook's pictures and the benchmark's work accounting.

n devices on a ring; device r holds the queries of its shard for the whole computation, and at step
s = 0 … n−1 the keys and values of shard `source(r, s, n)` = (r − s) mod n, which travelled to it
from r − 1 (ring.4). Shard r is, in the global sequence,

    contiguous: chunk r of n equal chunks;
    zigzag:     chunks r and 2n−1−r of 2n equal chunks, in that order (ring.6).

Each step is one of five block kinds (`Block`): which local query rows meet which local key rows,
and whether the causal mask cuts the block.
"""

from __future__ import annotations

import dataclasses

import numpy as np

LAYOUTS = ("contiguous", "zigzag")


@dataclasses.dataclass(frozen=True)
class Block:
    """One step's work on a device: local query rows × local key rows, causal or full.

    rows, keys: "all", "front" (the first half, zigzag chunk i) or "back" (the second half, zigzag
    chunk 2n−1−i), or None for a skipped block (nothing computed).
    """

    name: str
    rows: str | None
    keys: str | None
    causal: bool = False

    @property
    def skipped(self) -> bool:
        return self.rows is None

    def work(self, T: int) -> int:
        """Query-key pairs that are computed and kept, for a local length T (zigzag: T even)."""
        if self.skipped:
            return 0
        size = {"all": T, "front": T // 2, "back": T - T // 2}
        if self.causal:
            return T * (T + 1) // 2
        return size[self.rows] * size[self.keys]

    def mask(self, T: int) -> np.ndarray:
        """bool [T, T]: the local query-key pairs this block computes (all False when skipped)."""
        m = np.zeros((T, T), bool)
        if not self.skipped:
            m[self.row_slice(T), self.key_slice(T)] = True
        return np.tril(m) if self.causal else m

    def row_slice(self, T: int) -> slice:
        return _half(self.rows, T)

    def key_slice(self, T: int) -> slice:
        return _half(self.keys, T)


def _half(which: str, T: int) -> slice:
    return {"all": slice(0, T), "front": slice(0, T // 2), "back": slice(T // 2, T)}[which]


DIAGONAL = Block("diagonal", "all", "all", causal=True)   # own shard: the causal mask cuts it
FULL = Block("full", "all", "all")                        # keys all earlier (or not causal)
SKIPPED = Block("skipped", None, None)                    # keys all later: nothing to do
FRONT_KEYS = Block("front keys", "all", "front")          # zigzag, source < r: both query chunks × key chunk src
BACK_ROWS = Block("back rows", "back", "all")             # zigzag, source > r: query chunk 2n−1−r × both key chunks
BLOCKS = (DIAGONAL, FULL, SKIPPED, FRONT_KEYS, BACK_ROWS)


def source(r: int, s: int, n: int) -> int:
    """The shard whose keys device r holds at step s (ring.4)."""
    return (r - s) % n


def step_blocks(layout: str, causal: bool, s: int) -> tuple[Block, Block]:
    """(block if s ≤ r, block if s > r) at step s; the same block twice when r does not matter.

    For 1 ≤ s < n, source(r, s, n) < r exactly when s ≤ r: the keys come from earlier in the sequence.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {', '.join(map(repr, LAYOUTS))}, got {layout!r}")
    if not causal:
        return FULL, FULL
    if s == 0:
        return DIAGONAL, DIAGONAL
    if layout == "contiguous":   # (ring.5)
        return FULL, SKIPPED
    return FRONT_KEYS, BACK_ROWS  # (ring.7)


def block(layout: str, causal: bool, n: int, r: int, s: int) -> Block:
    """The block device r computes at step s."""
    earlier, later = step_blocks(layout, causal, s)
    return earlier if s <= r else later


def schedule(layout: str, causal: bool, n: int) -> list[list[Block]]:
    """blocks[r][s] for every device r and step s."""
    return [[block(layout, causal, n, r, s) for s in range(n)] for r in range(n)]


def chunk_order(n: int, layout: str) -> list[int]:
    """The global chunks in device order: device r holds entries [r] (contiguous, n chunks) or
    [2r, 2r + 1] (zigzag, 2n chunks) of this list (ring.6)."""
    if layout == "contiguous":
        return list(range(n))
    return [c for r in range(n) for c in (r, 2 * n - 1 - r)]


def sequence_order(T: int, n: int, layout: str) -> np.ndarray:
    """Global positions in device order: `x[:, sequence_order(...)]` shards the sequence for the ring
    (T divisible by n, or by 2n for zigzag); `np.argsort` of it undoes that."""
    chunks = chunk_order(n, layout)
    size = T // len(chunks)
    return np.concatenate([np.arange(c * size, (c + 1) * size) for c in chunks])


def zigzag_moves(n: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(ring.6) The (source, destination) device pairs that take contiguous shards to zigzag ones:
    the first list moves the even chunks, the second the odd ones.

    Of 2n chunks, device d holds 2d and 2d + 1 contiguously, and d and 2n−1−d in zigzag order. Each
    device holds one even and one odd chunk both ways (d and 2n−1−d differ in parity), so each
    parity moves by one permutation; in zigzag order the even chunk is in front when d is even.
    """
    home = lambda j: j if j < n else 2 * n - 1 - j  # noqa: E731  (zigzag device of chunk j)
    return [(d, home(2 * d)) for d in range(n)], [(d, home(2 * d + 1)) for d in range(n)]


def work(layout: str, causal: bool, n: int, T_local: int) -> np.ndarray:
    """[n, n] query-key pairs computed by device r at step s."""
    return np.array([[b.work(T_local) for b in row] for row in schedule(layout, causal, n)])


def per_device_share(causal: bool, n: int, T_local: int) -> float:
    """The work a perfectly balanced ring gives each device: all query-key pairs of the gathered
    sequence (T = n·T_local; causal: T(T+1)/2) divided by n (ring.8)."""
    T = n * T_local
    return (T * (T + 1) / 2 if causal else T * T) / n

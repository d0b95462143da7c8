"""Sequence bounds in one place: the packing, clamping and chunk-slot rules every op and reference uses.

API.md ("Sequence bounds") states it: concrete bounds are checked when the op is traced
(`_checks.cu_seqlens`, a ValueError); traced ones are made valid, on the Triton and the reference
path alike, by clamping every entry into [0, total] and taking the running maximum. Rows outside
every sequence then get zero output and zero gradient. Under `jax.experimental.checkify` an invalid
traced bound raises instead.

Also here, because every family needs them and none owns them: the chunk-slot table of the chunked
ops (`chunk_slots`, `chunk_bounds`) and the concrete stand-ins the GPU autotuner may time kernels on
while an op's bounds are traced (`stand_ins`, `StandIns`, `equal_split`; docs/autotune.md). This
module imports no family and nothing of the launcher.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify


def bounds_rule(cu, total: int):
    """The sequence-bounds rule: every entry clamped into [0, total], then the running maximum, so any
    int32 array becomes valid bounds. Valid bounds are unchanged."""
    return jax.lax.cummax(jnp.clip(jnp.asarray(cu).astype(jnp.int32), 0, total))


def inside_rows(cu, total: int):
    """bool [total]: the rows that belong to some sequence of valid bounds `cu` (cu[0] ≤ row < cu[N])."""
    rows = jnp.arange(total, dtype=jnp.int32)
    return (rows >= cu[0]) & (rows < cu[-1])


def traced_bounds(name: str, cu, total: int):
    """Bounds the kernels may use: `(cu int32 [N+1], inside bool [total] or None)`.

    A concrete `cu` was checked by `_checks.cu_seqlens` (a ValueError for invalid values), so it passes as it
    is and every row is inside (None). A traced one cannot be checked when the op is traced: it goes
    through `bounds_rule`, and under `jax.experimental.checkify` (errors=checkify.user_checks) an
    invalid one raises, naming `name` and the first offending entry. Without checkify the check is
    dropped: no host synchronisation.
    """
    cu = jnp.asarray(cu)
    if not isinstance(cu, jax.core.Tracer):
        return cu.astype(jnp.int32), None
    raw = cu.astype(jnp.int32)
    valid = bounds_rule(raw, total)
    ok = raw == valid  # in [0, total] and not below an earlier entry
    ok = ok.at[0].set(raw[0] == 0).at[-1].set(ok[-1] & (raw[-1] == total))
    first_bad = jnp.argmin(ok)  # the first False (0 when all are True: unused then)
    checkify.debug_check(
        jnp.all(ok),
        f"{name}: traced bounds must start at 0, be non-decreasing and end at the packed length {total}; "
        "entry {i} is {value} (all entries: {entries})",
        i=first_bad, value=raw[first_bad], entries=raw)
    return valid, inside_rows(valid, total)


def packed_bounds(cu_seqlens, B: int, T: int, name: str = "cu_seqlens"):
    """What the kernels see of a batch `[B, T, ...]`: `(cu, inside)` — fixed-length rows as sequences
    (cu = arange(B+1)·T) when `cu_seqlens` is None, else `traced_bounds` of it."""
    if cu_seqlens is None:
        return jnp.asarray(fixed_bounds(B, T)), None
    return traced_bounds(name, cu_seqlens, T)


def keep_inside(x, inside):
    """x `[1, T, ...]` with the rows outside every sequence set to zero (None passes; so does inside=None).

    Applied to a kernel's inputs, it also zeroes their gradients on those rows: the backward kernels
    never write them, and the `where` drops whatever is there."""
    if x is None or inside is None:
        return x
    return jnp.where(inside.reshape((1, -1) + (1,) * (x.ndim - 2)), x, jnp.zeros((), x.dtype))


def packed_rows(cu, total: int):
    """For each of `total` packed rows under bounds `cu` (any int32; the rule is applied here):
    `(seq, first, last, inside)` — its sequence index (clipped into [0, N−1] for rows outside every
    sequence), whether it is its sequence's first or last row (False outside), and whether it is
    inside some sequence. Empty sequences own no row."""
    cu = bounds_rule(cu, total)
    N = cu.shape[0] - 1
    rows = jnp.arange(total, dtype=jnp.int32)
    inside = inside_rows(cu, total)
    seq = jnp.clip(jnp.searchsorted(cu, rows, side="right").astype(jnp.int32) - 1, 0, N - 1)
    first = inside & (rows == cu[seq])
    last = inside & (rows == cu[seq + 1] - 1)
    return seq, first, last, inside


def chunk_slots(cu_seqlens, total: int, chunk_size: int):
    """Where every chunk of every packed sequence lives: `(start, end, seq, first, last)`, each [NS].

    Sequence n's chunk c gets slot `cu[n] // chunk_size + n + c`. Slots never collide (the next
    sequence's first slot is at least one past this one's last), there are at most
    NS = total // chunk_size + N + 1 of them, and unused slots have start = end (no rows). The
    kernels use the same slots, for their grids and for the per-chunk states. `cu_seqlens` may be
    traced; `total` (the packed length) and `chunk_size` are static. A NumPy `cu_seqlens` (bounds known
    when the op is traced: a fixed-length batch's) gives NumPy arrays, by the same expressions.
    """
    xp = np if isinstance(cu_seqlens, np.ndarray) else jnp
    cu = cu_seqlens.astype(np.int32)
    N = cu.shape[0] - 1
    NS = total // chunk_size + N + 1
    lengths = cu[1:] - cu[:-1]
    first_slot = first_slots(cu, chunk_size)
    n_chunks = (lengths + chunk_size - 1) // chunk_size
    slots = xp.arange(NS, dtype=np.int32)
    seq = xp.clip(xp.searchsorted(first_slot, slots, side="right").astype(np.int32) - 1, 0, N - 1)
    c = slots - first_slot[seq]
    used = (c >= 0) & (c < n_chunks[seq])
    start = xp.where(used, cu[seq] + c * chunk_size, 0).astype(np.int32)
    end = xp.where(used, xp.minimum(start + chunk_size, cu[seq + 1]), 0).astype(np.int32)
    return start, end, seq, used & (c == 0), used & (c == n_chunks[seq] - 1)


def first_slots(cu, chunk_size: int):
    """Each sequence's first chunk slot under the int32 bounds `cu` [N + 1]: cu[n] // chunk_size + n, strictly
    increasing (`chunk_slots`; NumPy for NumPy bounds)."""
    xp = np if isinstance(cu, np.ndarray) else jnp
    return cu[:-1] // chunk_size + xp.arange(cu.shape[0] - 1, dtype=np.int32)


def segment_rows(cu_seqlens, total: int, chunk_size: int, n_seg: int):
    """Each chunk slot's segment row `n · n_seg + j` in the two-level pass's [N · n_seg] buffers: sequence n's
    chunks cut into n_seg runs of ⌈chunks / n_seg⌉ (`tl_chunked.segment_chunks`), 0 for unused slots. What the
    segment sweeps store by slot, computed for the autotuner's stand-in bounds (NumPy for NumPy bounds)."""
    xp = np if isinstance(cu_seqlens, np.ndarray) else jnp
    start, end, seq, _, _ = chunk_slots(cu_seqlens, total, chunk_size)
    cu = cu_seqlens.astype(np.int32)
    n_chunks = (cu[1:] - cu[:-1] + chunk_size - 1) // chunk_size
    c = xp.arange(start.shape[0], dtype=np.int32) - first_slots(cu, chunk_size)[seq]
    per = xp.maximum((n_chunks[seq] + n_seg - 1) // n_seg, 1)
    return xp.where(end > start, seq * n_seg + c // per, 0).astype(np.int32)


def first_chunk_rows(cu, chunk_size: int):
    """(rows, valid), int32 and bool [N, chunk_size]: the packed rows of each sequence's first chunk under the
    bounds `cu` [N + 1] (valid False past the sequence's end; an empty sequence has none)."""
    start = cu[:-1]
    rows = start[:, None] + jnp.arange(chunk_size, dtype=jnp.int32)[None, :]
    return rows, rows < jnp.minimum(start + chunk_size, cu[1:])[:, None]


def entering_state_term(dg, h0, hs, dhs, b_first, cu, chunk_size: int):
    """dg [TT, H, K] float32 with what the log-decay gradient's state term exp(b_L) ⊙ rowsum(h ⊙ dH) lost at each
    sequence's first chunk, where the kernels read the chunk-start state h from `hs` in the inputs' 16-bit dtype:
    there h is the entering state h0, given in float32 and exact (every later h is itself a computed value, as
    the reference's), so its rounding is the term's only error where a sequence is short. Added back in float32:
    exp(b_L) ⊙ rowsum((h0 − hs[first slot]) ⊙ dH) on every row of the first chunk, as the kernels add the term
    to every row of a chunk. b_first [N, H, K]: b_L of each sequence's first chunk (the sum of its log decays);
    hs, dhs [NS, H, K, V] by chunk slot (`_bounds.first_slots`). A float32 hs loses nothing: dg is returned as it is."""
    if hs.dtype == jnp.float32 or dg.shape[0] == 0:
        return dg
    N = cu.shape[0] - 1
    slot = first_slots(cu, chunk_size)
    lost = jnp.sum((h0.astype(jnp.float32) - hs[slot].astype(jnp.float32)) * dhs[slot], axis=-1)  # [N, H, K]
    rows, valid = first_chunk_rows(cu, chunk_size)
    term = jnp.broadcast_to((jnp.exp(b_first) * lost)[:, None], (N, chunk_size, *lost.shape[1:]))
    return dg.at[jnp.where(valid, rows, dg.shape[0])].add(term, mode="drop")

def chunk_bounds(cu_seqlens, total: int, chunk_size: int):
    """The kernels' slot table: int32 `[NS, 2]`, row `slot` = (start, end) of `chunk_slots`; a NumPy array
    for NumPy bounds, which a jitted program then holds as a constant (no search of the bounds at each call)."""
    start, end, *_ = chunk_slots(cu_seqlens, total, chunk_size)
    return (np if isinstance(start, np.ndarray) else jnp).stack([start, end], axis=-1)


def fixed_bounds(B: int, T: int):
    """`cu_seqlens` of a fixed-length batch `[B, T, ...]` as the kernels see it: arange(B+1)·T, int32, NumPy."""
    return np.arange(B + 1, dtype=np.int32) * np.int32(T)


def slot_table(cu, total: int, chunk_size: int, batch: tuple[int, int] | None):
    """`chunk_bounds` of a chunked op: for a fixed-length batch (`batch` = (B, T), its bounds known when the op
    is traced) a NumPy table, which the program holds as a constant; else from the traced `cu`, which XLA would
    search at every call (a loop of small kernels)."""
    return chunk_bounds(fixed_bounds(*batch) if batch is not None else cu, total, chunk_size)


def to_chunks(x, rows, valid):
    """x [total, ...] gathered into chunk slots, [NS, BT, ...]: row `rows[s, r]` where `valid[s, r]`, else 0
    (rows and valid [NS, BT] from `chunk_slots`' start and end). With no rows at all (every sequence
    empty) every entry is 0: XLA gathers nothing from an empty operand."""
    if x.shape[0] == 0:
        x = jnp.zeros((1, *x.shape[1:]), x.dtype)
    x = x[jnp.where(valid, rows, 0)]
    return jnp.where(valid.reshape(valid.shape + (1,) * (x.ndim - 2)), x, 0)


def from_chunks(x, rows, valid, total: int):
    """`to_chunks` undone: x [NS, BT, ...] placed back at its rows, [total, ...]; rows no chunk covers are 0."""
    if total == 0:  # XLA scatters into no empty operand
        return jnp.zeros((0, *x.shape[2:]), x.dtype)
    return jnp.zeros((total, *x.shape[2:]), x.dtype).at[jnp.where(valid, rows, total)].set(x, mode="drop")


class StandIns(dict):
    """Stand-ins offered to every launch of an op (e.g. its `cu_seqlens` and chunk-slot `bounds`):
    each launch uses those its kernel takes and skips the rest, where a plain dict given as
    `tune_inputs` must name arguments of the kernel (a `ValueError` otherwise)."""


def equal_split(n_sequences: int, total: int):
    """The usual stand-in for traced `cu_seqlens` (int32 [N+1]): `total` packed rows split into N
    sequences as equal as integers allow. For a fixed-length batch it is the exact `arange(B+1)·T`."""
    return (np.arange(n_sequences + 1, dtype=np.int64) * total // max(n_sequences, 1)).astype(np.int32)


def stand_ins(N: int, total: int, chunk_size: int | None = None, segments: int = 1) -> StandIns:
    """Concrete bounds the GPU autotuner may time an op's kernels on while the real ones are traced
    (docs/autotune.md): `cu_seqlens` = `total` packed rows in N equal sequences — exactly
    `arange(B+1)·T` for a fixed-length batch, an equal split for traced `cu_seqlens` — and, for a
    chunked op, its chunk-slot table `bounds` and, with `segments` > 1, each slot's segment row `seg`
    (`segment_rows`). Functions: computed only when a config is timed."""
    def cu():
        return equal_split(N, total)

    offered = StandIns(cu_seqlens=cu)
    if chunk_size is not None:
        def bounds():
            with jax.ensure_compile_time_eval():
                return np.asarray(chunk_bounds(jnp.asarray(cu()), total, chunk_size))

        offered["bounds"] = bounds
        if segments > 1:
            offered["seg"] = lambda: segment_rows(np.asarray(cu()), total, chunk_size, segments)
    return offered

"""Checks of the derivation in workbench/ring_attention/NOTES.md, one test per tagged equation.

Float64 on one device, tiny sizes: the ring is run by `simulate_ring` (simulated devices, the same
step functions and schedule the traced ring uses) or formula by formula, against the definition
`ring_attention_ref` and its `jax.vjp` with random cotangents. Where a formula has a tempting wrong
variant (a plain average of partial outputs, the block's own lse in the backward, a causal mask on
every step) the test shows that the variant is far off, so the check can fail.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from workbench.flash_attention.reference import allowed_mask
from workbench.ring_attention import reference, schedule
from workbench.ring_attention.reference import merge, ring_attention_ref, simulate_ring

SCALE = 0.7


def make(seed, B=2, T=12, H=4, Hkv=2, D=3):
    rng = np.random.default_rng(seed)
    x = [jnp.asarray(rng.standard_normal(shape)) for shape in ((B, T, H, D), (B, T, Hkv, D), (B, T, Hkv, D))]
    return x, jnp.asarray(rng.standard_normal((B, T, H, D)))


@functools.partial(jax.jit, static_argnames="causal")
def definition_vjp(q, k, v, do, causal):
    (o, lse), pullback = jax.vjp(lambda *p: ring_attention_ref(*p, causal=causal, scale=SCALE), q, k, v)
    return o, lse, pullback((do, jnp.zeros_like(lse)))


def assert_close(actual, expected, rtol=1e-10):
    actual, expected = np.asarray(actual), np.asarray(expected)
    np.testing.assert_array_equal(np.isneginf(actual), np.isneginf(expected))
    fin = np.isfinite(expected)
    np.testing.assert_allclose(actual[fin], expected[fin], rtol=rtol,
                               atol=rtol * max(1.0, float(np.abs(expected[fin]).max(initial=0.0))))


def partial_result(q, k, v, keys, causal):
    """(o, lse) over the keys at positions `keys` only (empty rows: 0, −∞)."""
    return _partial_result(q, k, v, jnp.asarray(np.isin(np.arange(q.shape[1]), keys)), causal)


@functools.partial(jax.jit, static_argnames="causal")
def _partial_result(q, k, v, in_keys, causal):
    B, T = q.shape[:2]
    allowed = allowed_mask(B, T, T, causal=causal)[:, None] & in_keys
    G = q.shape[2] // k.shape[2]
    s = SCALE * jnp.einsum("bihd,bjhd->bhij", q, jnp.repeat(k, G, axis=2))
    s = jnp.where(allowed, s, -jnp.inf)
    lse = jax.scipy.special.logsumexp(s, axis=-1)
    p = jnp.where(allowed, jnp.exp(s - jnp.where(jnp.isfinite(lse), lse, 0.0)[..., None]), 0.0)
    return jnp.einsum("bhij,bjhd->bihd", p, jnp.repeat(v, G, axis=2)), lse


def test_ring_1():
    """Partial results over any split of the keys, merged in any order, are the full result."""
    (q, k, v), _ = make(1)
    o, lse, _ = definition_vjp(q, k, v, jnp.zeros_like(q), causal=False)
    rng = np.random.default_rng(0)
    parts = np.array_split(rng.permutation(12), 4)
    for order in ([0, 1, 2, 3], [3, 1, 0, 2]):
        acc = partial_result(q, k, v, parts[order[0]], False)
        for i in order[1:]:
            acc = merge(*acc, *partial_result(q, k, v, parts[i], False))
        assert_close(acc[0], o)
        assert_close(acc[1], lse)
    # the tempting wrong merge, a plain average of the partial outputs, is far off
    halves = [partial_result(q, k, v, p, False) for p in np.array_split(np.arange(12), 2)]
    assert np.abs((halves[0][0] + halves[1][0]) / 2 - o).max() > 1e-2


def test_ring_2():
    """Empty parts: the identity of the merge, and two empty parts stay (0, −∞), never NaN."""
    (q, k, v), _ = make(2)
    causal_first = partial_result(q, k, v, np.arange(0, 6), True)   # rows 0–5 see keys 0–5
    late_keys = partial_result(q, k, v, np.arange(6, 12), True)     # rows 0–5 see nothing here
    assert np.isneginf(np.asarray(late_keys[1][..., :6])).all()
    o, lse = merge(*causal_first, *late_keys)
    assert np.all(np.isfinite(np.asarray(o))) and not np.isnan(np.asarray(lse)).any()
    assert_close(o[:, :6], causal_first[0][:, :6])
    assert_close(lse[..., :6], causal_first[1][..., :6])
    empty = (jnp.zeros_like(o), jnp.full_like(lse, -jnp.inf))
    o2, lse2 = merge(*empty, *empty)
    assert np.all(np.asarray(o2) == 0) and np.isneginf(np.asarray(lse2)).all()
    assert_close(merge(*empty, o, lse)[0], o)
    # the merge's gradient-free guard also keeps autodiff of the merge finite at empty rows
    grad = jax.grad(lambda a: merge(a, lse2, *empty)[0].sum())(jnp.zeros_like(o))
    assert np.all(np.isfinite(np.asarray(grad)))


def formula_gradients(q, k, v, o, lse, do, allowed):
    """(ring.3) written out for one block of keys: allowed [Tq, Tk] the pairs it holds."""
    G = q.shape[2] // k.shape[2]
    kr, vr = jnp.repeat(k, G, axis=2), jnp.repeat(v, G, axis=2)
    p = jnp.where(allowed, jnp.exp(SCALE * jnp.einsum("bihd,bjhd->bhij", q, kr) - lse[..., None]), 0.0)
    delta = jnp.einsum("bihd,bihd->bhi", do, o)
    ds = p * (jnp.einsum("bihd,bjhd->bhij", do, vr) - delta[..., None])
    B, Tk, Hkv, D = k.shape
    dq = SCALE * jnp.einsum("bhij,bjhd->bihd", ds, kr)
    dk = (SCALE * jnp.einsum("bhij,bihd->bjhd", ds, q)).reshape(B, Tk, Hkv, G, D).sum(3)
    dv = jnp.einsum("bhij,bihd->bjhd", p, do).reshape(B, Tk, Hkv, G, D).sum(3)
    return dq, dk, dv


@pytest.mark.parametrize("causal", [False, True])
def test_ring_3(causal):
    """Block gradients from the merged lse and Delta sum to the full VJP (dq) and are each block's
    dk, dv; `reference_gradients` is the formula; with each block's own lse the result is wrong."""
    (q, k, v), do = make(3)
    o, lse, (dq, dk, dv) = definition_vjp(q, k, v, do, causal)
    mask = _global_mask(12) if causal else np.ones((12, 12), bool)
    dq_sum = 0.0
    for keys in np.array_split(np.arange(12), 3):
        g_q, g_k, g_v = formula_gradients(q, k[:, keys], v[:, keys], o, lse, do, mask[:, keys])
        dq_sum = dq_sum + g_q
        assert_close(g_k, dk[:, keys], rtol=1e-9)
        assert_close(g_v, dv[:, keys], rtol=1e-9)
    assert_close(dq_sum, dq, rtol=1e-9)
    # the pure-JAX block entry point is the formula, on a diagonal block and on a full one
    rows, keys = slice(4, 8), slice(0, 4)
    for sub_rows, sub_keys, sub_causal in ((rows, rows, True), (rows, keys, False)):
        args = (q[:, sub_rows], k[:, sub_keys], v[:, sub_keys], o[:, sub_rows], lse[..., sub_rows], do[:, sub_rows])
        allowed = np.tril(np.ones((4, 4), bool)) if sub_causal else np.ones((4, 4), bool)
        for got, want in zip(reference.reference_gradients(*args, causal=sub_causal, scale=SCALE),
                             formula_gradients(*args, allowed)):
            assert_close(got, want)
    # wrong: the last block's own lse and o (the block normalised on its own)
    keys = np.arange(8, 12)
    o_b, lse_b = partial_result(q, k, v, keys, causal)
    lse_b = jnp.where(jnp.isfinite(lse_b), lse_b, jnp.inf)  # rows that see none of it: P = 0 (fa.10)
    wrong = formula_gradients(q, k[:, keys], v[:, keys], o_b, lse_b, do, mask[:, keys])
    assert np.abs(np.asarray(wrong[1]) - np.asarray(dk[:, keys])).max() > 1e-2


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_ring_4(n):
    """Hop bookkeeping: step s holds shard (r − s) mod n, every shard once; an accumulator is with its
    shard at every step; the whole simulated ring (forward and backward) equals the definition."""
    for r in range(n):
        held = [schedule.source(r, s, n) for s in range(n)]
        assert sorted(held) == list(range(n)) and held[0] == r
        for owner in range(n):  # the accumulator of `owner` is on device owner + s at step s
            assert all(schedule.source((owner + s) % n, s, n) == owner for s in range(n))
    if n != 3:  # the whole ring, simulated: an odd zigzag ring (the traced one runs on 2, 4, 8 devices)
        return
    (q, k, v), do = make(4, T=6 * n)
    o, lse, grads = definition_vjp(q, k, v, do, causal=True)
    ring = jax.jit(functools.partial(simulate_ring, n=n, layout="zigzag", causal=True, scale=SCALE))
    o_r, lse_r, *grads_r = ring(q, k, v, do)
    assert_close(o_r, o)
    assert_close(lse_r, lse)
    for got, want in zip(grads_r, grads):
        assert_close(got, want, rtol=1e-9)


def _global_mask(T):
    return np.tril(np.ones((T, T), bool))


def _blocks_as_scheduled(layout, n, L):
    """Yield (r, s, the causal mask of device r's rows × the keys it holds at step s, the scheduled
    block), the mask cut from the gathered sequence's causal mask in the layout's device order."""
    order = schedule.sequence_order(n * L, n, layout)
    mask = _global_mask(n * L)[np.ix_(order, order)]
    for r in range(n):
        for s in range(n):
            src = schedule.source(r, s, n)
            yield r, s, mask[r * L:(r + 1) * L, src * L:(src + 1) * L], schedule.block(layout, True, n, r, s)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_ring_5(n):
    """Contiguous: the causal mask restricted to device r's rows and shard src's keys is the L × L
    causal mask, all ones, or all zeros, as the schedule says; a causal mask on every step is wrong."""
    L = 3
    for r, s, block, kind in _blocks_as_scheduled("contiguous", n, L):
        assert np.array_equal(block, kind.mask(L)), (r, s, kind)
        if schedule.source(r, s, n) < r:
            assert not np.array_equal(block, np.tril(np.ones((L, L), bool)))
    for s in range(1, n):
        assert schedule.step_blocks("contiguous", False, s) == (schedule.FULL, schedule.FULL)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_ring_6(n):
    """Zigzag: device r holds chunks (r, 2n−1−r); the two parity permutations take contiguous
    shards there, even chunk in front on even devices."""
    chunks = schedule.chunk_order(n, "zigzag")
    assert [chunks[2 * r: 2 * r + 2] for r in range(n)] == [[r, 2 * n - 1 - r] for r in range(n)]
    even_moves, odd_moves = schedule.zigzag_moves(n)
    for moves in (even_moves, odd_moves):  # permutations of the devices
        assert sorted(d for _, d in moves) == list(range(n)) and sorted(s for s, _ in moves) == list(range(n))
    arrived = {d: {} for d in range(n)}
    for parity, moves in ((0, even_moves), (1, odd_moves)):
        for src, dst in moves:
            arrived[dst][parity] = 2 * src + parity  # contiguous device src holds chunks 2src, 2src+1
    for d in range(n):
        front, back = (arrived[d][0], arrived[d][1]) if d % 2 == 0 else (arrived[d][1], arrived[d][0])
        assert (front, back) == (d, 2 * n - 1 - d)
    T = 2 * n * 2
    order = schedule.sequence_order(T, n, "zigzag")
    assert sorted(order) == list(range(T))
    assert list(order[:4]) == [0, 1, T - 2, T - 1]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_ring_7(n):
    """Zigzag: the causal mask restricted to device r's chunks × shard src's chunks is what the
    block kind computes, at every step, and no step is skipped."""
    L = 4
    for r, s, block, kind in _blocks_as_scheduled("zigzag", n, L):
        assert np.array_equal(block, kind.mask(L)), (r, s, kind)
        assert not kind.skipped


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_ring_8(n):
    """Work per device: zigzag equal to the total over n, per step too; contiguous r·L² + L(L+1)/2."""
    L = 6
    T = n * L
    total = T * (T + 1) // 2
    zig = schedule.work("zigzag", True, n, L)
    assert zig.sum() == total
    assert np.all(zig.sum(1) == total // n) and total % n == 0
    assert schedule.per_device_share(True, n, L) == total / n
    assert np.all(zig[:, 1:] == L * L // 2)
    con = schedule.work("contiguous", True, n, L)
    assert con.sum() == total
    assert list(con.sum(1)) == [L * (L + 1) // 2 + r * L * L for r in range(n)]
    assert schedule.work("zigzag", False, n, L).sum() == T * T
    assert all(b.work(L) == b.mask(L).sum() for b in schedule.BLOCKS)
    # the pairs each block computes are the ones the mask allows (no more, no less)
    order = schedule.sequence_order(T, n, "zigzag")
    assert _global_mask(T)[np.ix_(order, order)].sum() == total

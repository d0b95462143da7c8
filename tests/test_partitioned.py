"""The pieces of `workbench._partitioned` (an op on an automatic mesh) that decide shapes, on one device: which
residual dimensions split with the batch or heads, how a part every device holds is padded, and which splits a
mesh allows. tests/test_sharding.py runs every op through it on 4 host devices (and tests/sharding_worker.py on
GPUs)."""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np

from workbench import _partitioned
from workbench._partitioned import BATCH, HEAD

B, T, H = 4, 6, 2


def _op_with_table(x):
    """A custom VJP whose residual is a table of B + 1 row offsets (as packed sequences keep) and x itself."""

    @jax.custom_vjp
    def f(x):
        return x * 2.0

    def fwd(x):
        table = jnp.arange(x.shape[0] + 1, dtype=jnp.int32) * x.shape[1]
        return f(x), (x, table)

    def bwd(res, g):
        x, table = res
        return (g * 2.0 + 0.0 * table[-1],)

    f.defvjp(fwd, bwd)
    return f(x)


def _op_with_odd_residual(x):
    """A residual of B + B // 4 + 1 rows (checkpoints every 4 rows and one more)."""

    @jax.custom_vjp
    def f(x):
        return x + 1.0

    def fwd(x):
        return f(x), jnp.zeros((x.shape[0] + x.shape[0] // 4 + 1,))

    def bwd(res, g):
        return (g,)

    f.defvjp(fwd, bwd)
    return f(x)


MESH = types.SimpleNamespace(axis_sizes=(2, 2))


def test_a_residual_that_grows_with_the_batch_is_declared_large_enough_for_every_split():
    x = jnp.ones((B, T, H))
    roles = ((BATCH, "", HEAD),)
    dims, splittable = _partitioned._residual_dims(_op_with_table, (x,), roles, MESH)
    assert splittable == {BATCH: True, HEAD: True}
    by_shape = {tuple(d.size for d in r): r for r in dims}
    (table,) = by_shape[(B + 1,)]
    assert table.role == BATCH
    # each device's part: B / 2 + 1 rows under a split in two, B / 4 + 1 in four; declared a multiple of B
    assert table.local({BATCH: 2, HEAD: 1}) == B // 2 + 1 and table.local({BATCH: 4, HEAD: 1}) == B // 4 + 1
    assert table.declared % B == 0 and table.declared // 4 >= B // 4 + 1 and table.declared // 2 >= B // 2 + 1
    x_dims = by_shape[(B, T, H)]
    assert [d.role for d in x_dims] == [BATCH, "", HEAD] and [d.declared for d in x_dims] == [B, 0, H]
    assert [d.local({BATCH: 2, HEAD: 2}) for d in x_dims] == [B // 2, T, H // 2]
    split = {BATCH: 2, HEAD: 1}
    local = jnp.arange(B // 2 + 1)
    held = _partitioned._held(local, (table,), split, "op")
    assert held.shape == (table.declared // 2,)
    np.testing.assert_array_equal(_partitioned._unheld(held, (table,), split), local)


def test_checkpoint_like_residuals_split_too():
    x = jnp.ones((B, T, H))
    dims, splittable = _partitioned._residual_dims(_op_with_odd_residual, (x,), ((BATCH, "", HEAD),), MESH)
    assert splittable == {BATCH: True, HEAD: True}
    (odd,) = next(r for r in dims if len(r) == 1)
    assert odd.size == B + B // 4 + 1 and odd.local({BATCH: 2, HEAD: 1}) == B // 2 + B // 8 + 1
    assert odd.declared // 4 >= odd.local({BATCH: 4, HEAD: 1})


def test_a_residual_of_the_wrong_shape_is_a_value_error_naming_the_op():
    dim = _partitioned._Dim(BATCH, 5, 8, (((1, 1), 5), ((2, 1), 3)))
    try:
        _partitioned._held(jnp.zeros((4,)), (dim,), {BATCH: 2, HEAD: 1}, "my_op")
    except ValueError as exc:
        assert "my_op" in str(exc) and "(3,)" in str(exc) and "(4,)" in str(exc)
    else:
        raise AssertionError("no ValueError")


def test_the_splits_a_mesh_allows_divide_every_count():
    mesh = MESH
    values = (jnp.ones((B, T, H)), jnp.ones((B, T, 1)))
    roles = ((BATCH, "", HEAD), (BATCH, "", ""))
    assert _partitioned._splits(mesh, values, roles) == {(1, 1), (2, 1), (4, 1), (1, 2), (2, 2)}


def test_the_rule_names_the_batch_and_each_head_count_and_compounds_packed_dimensions():
    factors = _partitioned._Factors(((B, T, 4), (B, T, 2)), ((BATCH, "", HEAD), (BATCH, "", HEAD)))
    q, k = factors.rule([(B, T, 4), (B, T, 2)], [(BATCH, "", HEAD), (BATCH, "", HEAD)])
    assert q.split()[0] == "b" and q.split()[2] == "h0" and k.split()[2] == "h1"
    (packed,) = factors.rule([(B * 4 * 3,)], [(BATCH + HEAD,)])
    assert packed.startswith("(b h0 f") and packed.endswith(")")
    text, sizes = factors.text([q, k], [packed])
    assert text.count("->") == 1 and list(sizes.values()) == [3]

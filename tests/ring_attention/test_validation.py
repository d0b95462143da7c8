"""Bad input to `workbench.ring_attention` / `sharded_ring_attention` raises ValueError naming the
argument and showing what it got (API.md, Conventions).

Each case starts from a valid call and breaks one thing; the message must start with the intended
argument's name and show the offending shapes or value. Validation runs before anything is traced,
so these run on this process's single device (a one-device mesh); a sequence length that does not
divide over 2 devices is checked in the 2-device subprocess of `test_ring.py`.
"""

import workbench  # noqa: F401  (first: configures Triton's interpreter before triton loads)

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec as P

from tests.helpers import raises

B, T, H, HKV, D = 1, 6, 4, 2, 8


def valid(dtype=jnp.float32, T=T, H=H, Hkv=HKV, D=D):
    rng = np.random.default_rng(0)  # NumPy: no compilation per shape while the cases are built
    return {name: jnp.asarray(rng.standard_normal(shape), dtype)
            for name, shape in (("q", (B, T, H, D)), ("k", (B, T, Hkv, D)), ("v", (B, T, Hkv, D)))}


@functools.cache
def mesh(axis_type=AxisType.Explicit):
    return jax.make_mesh((1,), ("sp",), axis_types=(axis_type,))


def inside_shard_map(**options):
    """ring_attention called as a user calls it: inside shard_map over the mesh's axis "sp"."""
    def call(q, k, v):
        ring = functools.partial(workbench.ring_attention, **options)
        spec = P(None, "sp")
        return jax.shard_map(ring, mesh=mesh(AxisType.Auto), in_specs=(spec,) * 3, out_specs=spec)(q, k, v)
    return call


BROKEN = [  # (what is broken, argument named, shown text, arrays, options)
    ("layout", "layout", "'diagonal'", valid(), dict(layout="diagonal")),
    ("heads", "k", "q's heads H=4 must be a multiple of k's heads Hkv=3", valid(Hkv=3), {}),
    ("q/k lengths", "k", "(1, 8, 2, 8)", dict(valid(), k=valid(T=8)["k"], v=valid(T=8)["v"]), {}),
    ("v shape", "v", "(1, 6, 2, 4)", dict(valid(), v=valid(D=4)["v"]), {}),
    ("rank", "q", "(6, 4, 8)", dict(valid(), q=valid()["q"][0]), {}),
    ("dtypes", "k", "bfloat16", dict(valid(), k=valid(jnp.bfloat16)["k"]), {}),
    ("scale", "scale", "-1.0", valid(), dict(scale=-1.0)),
    ("causal", "causal", "'yes'", valid(), dict(causal="yes")),
    ("zigzag odd length", "q", "(1, 5, 4, 8)", valid(T=5), dict(layout="zigzag")),
    ("implementation", "implementation", "'cuda'", valid(), dict(implementation="cuda")),
]


@pytest.mark.parametrize("what, argument, shown, arrays, options", BROKEN, ids=[b[0] for b in BROKEN])
def test_ring_attention_rejects(what, argument, shown, arrays, options):
    with raises(argument, shown):
        inside_shard_map(axis_name="sp", **options)(**arrays)


@pytest.mark.parametrize("what, argument, shown, arrays, options", BROKEN, ids=[b[0] for b in BROKEN])
def test_sharded_ring_attention_rejects(what, argument, shown, arrays, options):
    with raises(argument, shown):
        workbench.sharded_ring_attention(**arrays, mesh=mesh(), axis_name="sp", **options)


def test_head_dim_over_the_kernels_limit():
    with raises("q", "D ≤ 256", "D=264"):
        workbench.sharded_ring_attention(**valid(D=264), mesh=mesh(), axis_name="sp")


def test_float64_only_in_the_reference():
    with raises("q", "float64"):
        workbench.sharded_ring_attention(**valid(jnp.float64), mesh=mesh(), axis_name="sp")


def test_axis_name_unbound():
    """Outside shard_map (or over another axis) there is no ring to run on."""
    with raises("axis_name", "'sp'", "shard_map"):
        workbench.ring_attention(**valid(), axis_name="sp")
    with raises("axis_name", "'other'"):
        inside_shard_map(axis_name="other")(**valid())


def test_mesh_and_its_axis():
    with raises("mesh", "list"):
        workbench.sharded_ring_attention(**valid(), mesh=[0], axis_name="sp")
    with raises("axis_name", "'seq'", "('sp',)"):
        workbench.sharded_ring_attention(**valid(), mesh=mesh(), axis_name="seq")


def test_zigzag_global_length_must_split_in_two_chunks_per_device():
    with raises("q", "T=7", "divisible by 2 (zigzag layout over 1 devices"):
        workbench.sharded_ring_attention(**valid(T=7), mesh=mesh(), axis_name="sp", layout="zigzag")


@pytest.mark.parametrize("implementation, dtype", [("triton", jnp.float32), ("reference", jnp.float64)])
def test_one_device_ring_is_flash_attention(implementation, dtype):
    """The valid call the cases start from runs, and a ring of one is plain causal attention
    (float64 through the reference blocks)."""
    x = valid(dtype)
    o = workbench.sharded_ring_attention(**x, mesh=mesh(), axis_name="sp", causal=True, layout="zigzag",
                                         implementation=implementation)
    want = workbench.flash_attention(**x, causal=True, implementation="reference")
    assert o.dtype == dtype
    tol = 1e-12 if dtype == jnp.float64 else 2e-6
    np.testing.assert_allclose(np.asarray(o), np.asarray(want), rtol=tol, atol=tol)

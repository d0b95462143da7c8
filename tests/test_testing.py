"""`workbench.testing`'s input factories draw exactly what `jax.random` draws for the same key and
shape (they cut a flat draw of a power-of-two length, so that a few compilations serve every shape):
pinned seeds keep meaning the same inputs."""

import jax
import jax.numpy as jnp
import numpy as np

from workbench import testing


def bits(x):
    x = np.asarray(x)
    return x.dtype, x.shape, x.view(np.uint8).tobytes()


def test_factories_draw_what_jax_random_draws():
    key, shape = jax.random.key(11), (2, 17, 3, 5)  # 510 elements, cut from a draw of 512
    x = jax.random.normal(key, shape, jnp.float32)
    assert bits(testing.normal(key, shape)) == bits(x)
    assert bits(testing.normal(key, shape, jnp.bfloat16)) == bits(x.astype(jnp.bfloat16))
    assert bits(testing.normal(key, shape, scale=0.5)) == bits(0.5 * x)
    for dtype in (jnp.float32, jnp.bfloat16):
        gate = (-5.0 * jax.nn.sigmoid(x + 1.0) * 2.0).astype(dtype)
        assert bits(testing.log_gate(key, shape, 5.0, dtype)) == bits(gate)
    assert bits(testing.randint(key, shape, 3)) == bits(jax.random.randint(key, shape, 0, 3, jnp.int32))
    assert testing.normal(key, shape).shape == shape


def test_factories_without_partitionable_threefry_draw_the_shape():
    """Without partitionable threefry a cut draw differs: the factories draw the shape itself."""
    key, shape = jax.random.key(12), (5, 7)
    with jax.threefry_partitionable(False):
        assert bits(testing.normal(key, shape)) == bits(jax.random.normal(key, shape, jnp.float32))

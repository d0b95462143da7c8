"""Does synccheck flag a named barrier that two warp-specialized partitions both `bar.sync` (256 threads), as the
Gluon backward's dS barrier does? argv[1]: sync (bar.sync 13,256 by both groups), nonaligned (barrier.sync 13,256),
turns (bar.sync by one group, bar.arrive by the other: the forward's pattern), both (sync + turns)."""
import sys
import jax, jax.numpy as jnp
import workbench
import os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from barsk import bars_kernel

MODE = sys.argv[1]
o = workbench.triton_call(jnp.zeros(1), kernel=bars_kernel, out_shape=jax.ShapeDtypeStruct((256,), jnp.float32),
                          grid=(2,), num_warps=4, MODE=MODE, N=8)
print(MODE, float(jax.block_until_ready(o).sum()), flush=True)

"""The Hopper backward in Gluon (`Tuning(backward="gluon")`, `gluon_backward.py`) where no GPU is: which calls
it refuses and what the ValueError says, the interpreter's refusal, and its launches, as the op makes them
under `jax.vjp`, compiled for sm_90 (Triton 3.9 or later). Its gradients against the float64 oracle are checked
on a GPU (test_gpu.py)."""

import workbench  # noqa: F401  (first: decides compiled vs interpreted Triton)

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import assert_fits_hopper, raises
from workbench import compile_check, compiler, launch, testing
from workbench.flash_attention import Tuning, gluon_backward, gluon_kernels

NEW_TRITON = compiler.compiles_gluon()
GLUON_BWD = Tuning(backward="gluon")


def _grad(x, **options):
    """dq of the op's sum under the Gluon backward (traced: the refusals come while its VJP is formed)."""
    def f(q):
        return workbench.flash_attention(q, x["k"], x["v"], **options, tuning=GLUON_BWD).astype(jnp.float32).sum()

    return jax.grad(f)(x["q"])


def test_tuning_backward_names_a_kernel_and_leaves_dq_to_it():
    with raises("Tuning.backward", "'cuda'"):
        Tuning(backward="cuda")
    with raises("Tuning.backward='gluon'", "dq ('atomic')", "leave it None"):
        Tuning(backward="gluon", dq="atomic")


# what the call has that the kernel does not compute: (Tq, Tk, D, dtype, options, words the message must show)
MISFITS = {
    "Tq < Tk": (40, 64, 64, jnp.bfloat16, dict(causal=True), "Tq = 40 and Tk = 64"),
    "float32": (40, 40, 64, jnp.float32, {}, "float32"),
    "D 96": (40, 40, 96, jnp.bfloat16, {}, "D = 96"),
    "window": (40, 40, 64, jnp.bfloat16, dict(causal=True, sliding_window=8), "sliding_window"),
    "softcap": (40, 40, 64, jnp.bfloat16, dict(softcap=20.0), "softcap"),
}


@pytest.mark.parametrize("case", MISFITS.values(), ids=MISFITS.keys())
def test_a_call_it_does_not_compute_is_a_value_error_naming_what(case):
    Tq, Tk, D, dtype, options, words = case
    x = testing.attention_inputs(0, 1, Tq, Tk, 2, 1, D, dtype=dtype)
    expected = words if NEW_TRITON else "Gluon kernels need 3.9 or later"
    with raises("Tuning.backward='gluon'", expected, "q shape (1,"):
        _grad(x, **options)


def test_the_interpreter_refuses_it_by_name():
    """A call it computes, on a machine without a GPU: the launcher's ValueError (or, before Triton 3.9, the
    glue's, naming the version)."""
    x = testing.attention_inputs(0, 1, 40, 40, 2, 1, 64, dtype=jnp.bfloat16)
    if NEW_TRITON:
        with raises("kernel", "flash_bwd_pingpong_kernel is a Gluon kernel, which runs only compiled"):
            _grad(x, causal=True)
    else:
        with raises("Tuning.backward='gluon'", "Gluon kernels need 3.9 or later"):
            _grad(x, causal=True)


@pytest.mark.skipif(not NEW_TRITON, reason="gluon_backward imports Triton 3.9's Gluon")
@pytest.mark.parametrize("T", [5, 64, 777, 768, 1000])
def test_the_stats_rows_are_padded_so_every_tile_starts_16_bytes_aligned(T):
    """The kernel reads a query tile's lse2 and δ as one TMA box at (b·H + h)·TP + m0 floats, which must be 16
    bytes aligned (at T = 777 an unpadded row made the GPU raise an illegal instruction); the padding is what a
    row that saw no key has, and the values before it are unchanged."""
    B, H, block = 2, 3, gluon_backward.CONFIG["BM"]
    lse2 = jax.random.normal(jax.random.key(0), (B, H, T), jnp.float32)
    delta = jax.random.normal(jax.random.key(1), (B, H, T), jnp.float32)
    lse_p, delta_p = gluon_backward.padded_stats(lse2, delta)
    TP = lse_p.shape[-1]
    assert lse_p.shape == delta_p.shape == (B, H, TP) and T <= TP < T + block and TP % block == 0
    starts = [((b * H + h) * TP + m0) * 4 for b in range(B) for h in range(H) for m0 in range(0, T, block)]
    assert all(s % 16 == 0 for s in starts)
    assert (lse_p[..., :T] == lse2).all() and (delta_p[..., :T] == delta).all()
    assert (lse_p[..., T:] == jnp.inf).all() and (delta_p[..., T:] == 0).all()


def _recorded(x, **options):
    """The compile specs of the op's Gluon backward launch, traced abstractly (the interpreter's refusal comes
    after the launch is recorded)."""
    with compile_check.record() as specs:
        with pytest.raises(ValueError, match="is a Gluon kernel"):
            jax.eval_shape(lambda q: _grad(dict(x, q=q), **options), x["q"])
    return [s for s in specs if s["kernel"] == "flash_bwd_pingpong_kernel"]


@pytest.mark.skipif(not launch.INTERPRET, reason="on a GPU the kernel compiles as it runs (test_gpu.py)")
@pytest.mark.skipif(not NEW_TRITON, reason="Gluon kernels compile with Triton 3.9 or later (the refusal is tested "
                                           "above)")
@pytest.mark.parametrize("D,dtype,causal,H,Hkv,T", [(128, jnp.bfloat16, True, 16, 16, 1000),
                                                    (128, jnp.float16, False, 8, 2, 1000),
                                                    (64, jnp.bfloat16, True, 4, 1, 777),
                                                    (64, jnp.float16, False, 4, 4, 1300)])
def test_its_launch_compiles_for_hopper_within_registers_and_shared_memory(D, dtype, causal, H, Hkv, T):
    """The launch compiles for sm_90: Hopper's wgmma, under the register cap the launch asks, within a block's
    shared memory, spilling at most 8 bytes (lse and δ come through shared memory: NOTES.md, "The Hopper
    backward"); its named barriers are dS's (10-13, one per group and parity) and the turns'
    (`gluon_kernels.TURNS`), every other BAR of the cubin (Triton's partitions) uses a lower id; causal launches
    issue each tile's dQ a step later (`DEFER_DQ`, measured per mask)."""
    x = testing.attention_inputs(0, 2, T, T, H, Hkv, D, dtype=dtype)
    specs = _recorded(x, causal=causal)
    assert len(specs) == 1, specs
    assert specs[0]["constexprs"]["CAUSAL"] == causal and specs[0]["constexprs"]["HKV"] == Hkv, specs
    assert specs[0]["constexprs"]["DEFER"] == causal, specs
    result = compile_check.compile_all(specs, last="resources")
    assert not result["failed"], "\n".join(compile_check.describe(f) for f in result["failed"])
    (row,) = result["resources"]
    assert_fits_hopper(row, gluon_backward.CONFIG, stack=8,
                       barriers={*gluon_backward.DS_BARRIERS, *gluon_kernels.TURNS})


def _offsets(layout, shape):
    """Element offset of every (row, column) of a `SharedLinearLayout` (the XOR of the bases of the offset's set
    bits: the layout maps offset bit i to the coordinate `offset_bases[i]`)."""
    where = np.full(shape, -1)
    for offset in range(shape[0] * shape[1]):
        r = c = 0
        for bit, (br, bc) in enumerate(layout.offset_bases):
            if offset >> bit & 1:
                r, c = r ^ br, c ^ bc
        where[r, c] = offset
    return where


@pytest.mark.skipif(not NEW_TRITON, reason="gluon_backward imports Triton 3.9's Gluon")
@pytest.mark.parametrize("D", [64, 128])
def test_the_dq_staging_is_the_tma_box_and_free_of_bank_conflicts(D):
    """`dq_staging_layouts`: a group's [64, D/2] float32 dQ share sits in shared memory as D/16 boxes of [64, 8] one
    after another, the order of the [blocks, rows, 8] TMA box (so the reduction adds each value to its own (row,
    column)); and each 8-byte store of a wgmma register pair (a warp's 32 lanes: rows r0 + lane/4, columns
    8j + 2·(lane mod 4)) covers all 32 banks exactly twice: the two wavefronts 256 bytes need, where the plain
    row-major tile of main took 8 (NOTES.md, "The Hopper backward")."""
    BM, cols = gluon_backward.CONFIG["BM"], D // 2
    staging, box = gluon_backward.dq_staging_layouts(BM, cols)
    where = _offsets(staging, (BM, cols))
    assert sorted(where.ravel()) == list(range(BM * cols))  # one place per value
    r, c = np.meshgrid(np.arange(BM), np.arange(cols), indexing="ij")
    assert (where == (c // 8) * BM * 8 + r * 8 + c % 8).all()  # box c/8, row r, column c mod 8
    assert box.rank == 3 and box.swizzle_byte_width == 0
    lanes = np.arange(32)

    def wavefronts(offsets):  # 4-byte words at the 32 lanes' 8-byte stores: the most any bank serves
        words = np.concatenate([offsets, offsets + 1])
        return max(np.bincount(words % 32, minlength=32).max(), 2)

    plain = lambda rows, columns: rows * cols + columns  # noqa: E731  (main's tile)
    for r0 in range(0, BM, 8):
        for j in range(cols // 8):
            rows, columns = r0 + lanes // 4, 8 * j + 2 * (lanes % 4)
            assert wavefronts(where[rows, columns]) == 2, (r0, j)
            assert wavefronts(plain(rows, columns)) == 8

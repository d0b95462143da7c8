"""The Hopper forward in Gluon (`Tuning(forward="gluon")`, `gluon_kernels.py`) where no GPU is: which calls it
refuses and what the ValueError says, the interpreter's refusal, the default staying on the Triton forward, and
its launches, as the op makes them, compiled for sm_90 (Triton 3.9 or later). Its results against the float64
oracle are checked on a GPU (test_gpu.py)."""

import workbench  # noqa: F401  (first: decides compiled vs interpreted Triton)

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton

from tests.helpers import assert_fits_hopper, raises
from workbench import compile_check, compiler, launch, testing
from workbench.flash_attention import Tuning, gluon_kernels, gluon_unavailable

NEW_TRITON = compiler.compiles_gluon()
GLUON = Tuning(forward="gluon")


def _inputs(Tq=40, Tk=40, D=64, dtype=jnp.bfloat16, **made):
    return testing.attention_inputs(0, 1, Tq, Tk, 2, 1, D, dtype=dtype, **made)


def test_tuning_forward_names_a_kernel():
    with raises("Tuning.forward", "'cuda'"):
        Tuning(forward="cuda")


def test_the_triton_forwards_variants_do_not_go_with_it():
    with raises("Tuning.forward='gluon'", "split_rows (True)", "leave them None"):
        workbench.flash_attention(**_inputs(), tuning=Tuning(forward="gluon", split_rows=True))
    with raises("Tuning.forward='gluon'", "forward_loads ('pointers')"):
        workbench.flash_attention(**_inputs(), tuning=Tuning(forward="gluon", forward_loads="pointers"))


# what the call has that the kernel does not compute: (inputs, options, words the message must show)
MISFITS = {
    "window": ({}, dict(causal=True, sliding_window=8), "sliding_window"),
    "softcap": ({}, dict(softcap=20.0), "softcap"),
    "sinks": (dict(sinks=True), {}, "sinks"),
    "bias": (dict(bias="1H"), {}, "bias"),
    "segments": (dict(segments=2), {}, "segment_ids"),
    "dropout": ({}, dict(dropout_rate=0.1, dropout_key=jax.random.key(1)), "dropout_rate"),
    "packed": ({}, dict(cu_seqlens_q=jnp.asarray([0, 10, 40], jnp.int32),
                        cu_seqlens_k=jnp.asarray([0, 20, 40], jnp.int32)), "cu_seqlens"),
    "float32": (dict(dtype=jnp.float32), {}, "float32"),
    "D 32": (dict(D=32), {}, "D = 32"),
}


@pytest.mark.parametrize("case", MISFITS.values(), ids=MISFITS.keys())
def test_a_call_it_does_not_compute_is_a_value_error_naming_what(case):
    made, options, words = case
    expected = words if NEW_TRITON else "Gluon kernels need 3.9 or later"
    with raises("Tuning.forward='gluon'", expected, "q shape (1,"):
        workbench.flash_attention(**_inputs(**made), **options, tuning=GLUON)


def test_the_interpreter_refuses_it_by_name():
    """A call it computes, on a machine without a GPU: the launcher's ValueError (or, before Triton 3.9, the
    glue's, naming the version)."""
    if NEW_TRITON:
        with raises("kernel", "flash_fwd_pingpong_kernel is a Gluon kernel, which runs only compiled"):
            workbench.flash_attention(**_inputs(), causal=True, tuning=GLUON)
    else:
        with raises("Tuning.forward='gluon'", "Gluon kernels need 3.9 or later"):
            workbench.flash_attention(**_inputs(), causal=True, tuning=GLUON)


def test_this_machine_says_why_it_cannot_run_the_gluon_kernels():
    """`gluon_unavailable()` without a GPU: the interpreter (or, before Triton 3.9, the version)."""
    reason = gluon_unavailable()
    assert reason == ("Triton's interpreter (Gluon kernels run only compiled, on a GPU)" if NEW_TRITON
                      else f"Triton {triton.__version__} (Gluon kernels need 3.9 or later)"), reason


def test_the_default_is_the_triton_forward_here():
    """Without a GPU the default runs (it would raise if it chose the Gluon kernel) and is the Triton forward."""
    x = _inputs(Tq=70, Tk=70, D=64)
    o, lse = workbench.flash_attention(**x, causal=True, return_lse=True)
    o_t, lse_t = workbench.flash_attention(**x, causal=True, return_lse=True, tuning=Tuning(forward="triton"))
    np.testing.assert_array_equal(np.asarray(o, np.float32), np.asarray(o_t, np.float32))
    np.testing.assert_array_equal(np.asarray(lse), np.asarray(lse_t))


def _recorded(x, **options):
    """The compile specs of the op's Gluon launches, forward alone and under `jax.vjp` (its float32 copy of o),
    traced abstractly; the interpreter's refusal comes after the launch is recorded."""
    with compile_check.record() as specs:
        for with_backward in (False, True):
            def run(q, k, v):
                f = lambda q: workbench.flash_attention(q, k, v, **options, tuning=GLUON)  # noqa: E731
                return jax.vjp(f, q)[0] if with_backward else f(q)

            with pytest.raises(ValueError, match="is a Gluon kernel"):
                jax.eval_shape(run, x["q"], x["k"], x["v"])
    return specs


@pytest.mark.skipif(not launch.INTERPRET, reason="on a GPU the kernel compiles as it runs (test_gpu.py)")
@pytest.mark.skipif(not NEW_TRITON, reason="Gluon kernels compile with Triton 3.9 or later (the refusal is tested "
                                           "above)")
@pytest.mark.parametrize("D,dtype,causal,Tk", [(128, jnp.bfloat16, True, 1000), (128, jnp.float16, False, 1000),
                                               (64, jnp.bfloat16, True, 1000), (64, jnp.float16, False, 1000),
                                               (128, jnp.bfloat16, True, 700), (64, jnp.bfloat16, False, 1300)])
def test_its_launches_compile_for_hopper_within_registers_and_shared_memory(D, dtype, causal, Tk):
    """Both launches (with and without the float32 copy of o) compile for sm_90: Hopper's wgmma, under the
    register cap the launch asks, within a block's shared memory, spilling at most 48 bytes (causal) or 120 (plain,
    with the float32 copy), stored once a block and loaded after its last P V: not in the key-tile loop (NOTES.md,
    "The Hopper forward"); the turns' named barriers are the kernel's own: every other BAR of the cubin (Triton's
    partitions) uses a lower id."""
    x = testing.attention_inputs(0, 2, 1000, Tk, 8, 2, D, dtype=dtype)
    specs = _recorded(x, causal=causal)
    assert len(specs) == 2 and {s["constexprs"]["KEEP_F32"] for s in specs} == {False, True}, specs
    result = compile_check.compile_all(specs, last="resources")
    assert not result["failed"], "\n".join(compile_check.describe(f) for f in result["failed"])
    for row in result["resources"]:
        assert_fits_hopper(row, gluon_kernels.CONFIG, stack=48 if causal else 120, barriers=gluon_kernels.TURNS)


@pytest.mark.skipif(not NEW_TRITON, reason="gluon_kernels imports Triton 3.9's Gluon")
def test_the_forward_runs_a_program_per_multiprocessor_and_causal_sections_fit_in_l2():
    """`gluon_kernels.grid`: one program per multiprocessor walks the blocks, or one per block where there are fewer
    blocks; `heads_per_section`: the query heads whose K and V (2·T·D elements each) fill at most L2_KV_BYTES, at
    least one, GQA's groups whole (NOTES.md, "The Hopper forward")."""
    sms = launch.sm_count()
    blocks = lambda B, T, H: triton.cdiv(T, gluon_kernels.BLOCK_M) * B * H  # noqa: E731
    assert gluon_kernels.grid(4, 4096, 16) == (sms,) and blocks(4, 4096, 16) > sms
    assert gluon_kernels.grid(1, 300, 2) == (blocks(1, 300, 2),) and blocks(1, 300, 2) < sms
    budget = gluon_kernels.L2_KV_BYTES
    for T, D, H, HKV, size in ((4096, 128, 16, 16, 2), (16384, 128, 16, 16, 2), (4096, 64, 32, 8, 2),
                               (1 << 20, 128, 8, 1, 2), (3000, 128, 4, 4, 4)):
        heads = gluon_kernels.heads_per_section(T, D, H, HKV, size)
        kv_heads, group = heads // (H // HKV), H // HKV
        assert heads % group == 0 and kv_heads >= 1, (T, D, H, HKV, heads)
        one = 2 * T * D * size
        assert kv_heads * one <= budget or kv_heads == 1, (T, D, heads)
        assert (kv_heads + 1) * one > budget, (T, D, heads)  # no room for another

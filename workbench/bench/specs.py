"""One `OpBench` per op: its shape sets, inputs, call, byte and FLOP estimates, peers, variants and limits.

Adding an op: write its input factory, its call, its byte estimate and its peers (`peers.py`), and add an
`OpBench` to `OPS`.

Shape sets: `target` (the op's speed target), `sweep` (1k … 64k tokens), `off_table` (the target's head
dims at T = 3000 and H = 12, which no tuning-table entry has: `workbench bench --first-call --shapes
off_table` measures a first call served by the table's nearest entries), `tiny` (the interpreter's) and
chunk_kda's `wide` (K = V = 256).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

import workbench

from .. import testing
from ..chunk_gla import Tuning as _GlaTuning
from ..flash_attention import Tuning as _FlashTuning
from ..flash_attention import gluon_unavailable as _flash_gluon_unavailable
from .peers import (dot_product_attention, ejkernel_flash_attention, ejkernel_recurrent, fla_chunk_kda, fla_gla)
from .spec import OpBench, Peer


def _recurrent_inputs(shape, dtype, seed):
    B, T, H, K, V = (shape[n] for n in "BTHKV")
    return testing.recurrent_inputs(seed, B, T, H, K, V, dtype=dtype, gates=("gk",), strength=0.1,
                                    initial_state=False)


def _recurrent_call(implementation, q, k, v, gk, library=None, **options):
    # workbench looked up per call; `library`: another checkout's package (bench/against.py)
    return (library or workbench).recurrent(q, k, v, gk=gk, implementation=implementation, **options)


def _recurrent_bytes(shape, dtype):
    """q, k, gk [B,T,H,K] and v [B,T,H,V] read; o written, final_state (float32) written.
    Backward: inputs, do and dht read again, one gradient per input written."""
    B, T, H, K, V = (shape[n] for n in "BTHKV")
    size = jnp.dtype(dtype).itemsize
    inputs = (3 * B * T * H * K + B * T * H * V) * size
    o = B * T * H * V * size
    state = B * H * K * V * 4
    forward = inputs + o + state
    return forward, forward + (inputs + o + state) + inputs


RECURRENT = OpBench(
    shape_sets={
        "target": (dict(B=8, T=4096, H=16, K=64, V=64),),  # the foundation issue's target
        # 1k … 64k tokens; at 64k the errors are measured against the peers (max_T, error_sources)
        "sweep": tuple(dict(B=1, T=2 ** e, H=16, K=64, V=64) for e in range(10, 17)),
        "off_table": (dict(B=8, T=3000, H=12, K=64, V=64),),  # no table entry: served by the nearest (H 16)
        "tiny": (dict(B=1, T=16, H=2, K=8, V=8),),
    },
    cpu_shape_sets=("tiny",),
    dtype="bfloat16",
    inputs=_recurrent_inputs,
    differentiable=("q", "k", "v", "gk"),
    outputs=("o", "final_state"),
    call=_recurrent_call,
    bytes=_recurrent_bytes,
    peers=(Peer("fla.ops.gla.fused_recurrent_gla", "fla", fla_gla("fused_recurrent_gla", "gk")),
           Peer("ejkernel.recurrent[triton]", "ejkernel", ejkernel_recurrent, runtime="jax", interpretable=True)),
    max_T={"reference": (32768, "the reference's autodiff stores every state (XLA's memory analysis: 25 GiB "
                                "at 32k, 50 GiB at 64k)")},
    error_sources=("fla.ops.gla.fused_recurrent_gla", "ejkernel.recurrent[triton]"),
    notes={"gates": ["gk"], "gate_strength": 0.1, "targets_ms": {"target": {"forward": 3.6,
                                                                             "forward_backward": 8.0}}},
)


def _chunk_gla_call(implementation, q, k, v, gk, library=None, **options):
    # workbench looked up per call; `library`: another checkout's package (bench/against.py)
    return (library or workbench).chunk_gla(q, k, v, gk=gk, implementation=implementation, **options)


CHUNK_GLA = OpBench(
    shape_sets={
        "target": (dict(B=8, T=4096, H=16, K=64, V=64),),  # the chunk_gla issue's target
        # 1k … 64k tokens; past 16k the errors are measured against fla's chunk_gla (max_T)
        "sweep": tuple(dict(B=1, T=2 ** e, H=16, K=64, V=64) for e in range(10, 17)),
        "off_table": (dict(B=8, T=3000, H=12, K=64, V=64),),  # no table entry: served by the nearest (H 16)
        "tiny": (dict(B=1, T=40, H=2, K=16, V=16),),
    },
    cpu_shape_sets=("tiny",),
    dtype="bfloat16",
    inputs=_recurrent_inputs,
    differentiable=("q", "k", "v", "gk"),
    outputs=("o", "final_state"),
    call=_chunk_gla_call,
    bytes=_recurrent_bytes,
    peers=(Peer("fla.ops.gla.chunk_gla", "fla", fla_gla("chunk_gla", "g")),),
    max_T={"reference": (16384, "the reference's autodiff holds [chunks, 64, 64, H, K] ratio tensors "
                                "(25.6 GiB at 16k by XLA's memory analysis, 51 GiB at 32k, 102 GiB at 64k)")},
    error_sources=("fla.ops.gla.chunk_gla",),
    variants={"one sweep": {"tuning": _GlaTuning(segments=1)},
              "recomputed residuals": {"tuning": _GlaTuning(residuals="recompute")}},
    notes={"gates": ["gk"], "gate_strength": 0.1, "chunk_size": 64,
           "one_sweep": "triton vs triton[one sweep]: the two-level state pass (NOTES gla.13, segments chosen by "
                        "state_segments) against one sweep per sequence; the same where the heuristic picks 1",
           "targets_ms": {"target": {"forward": 0.72, "forward_backward": 3.0}}},
)


def chunk_kda_inputs(shape, dtype, seed):
    from ..kda.inputs import kda_inputs

    B, T, H, K, V = (shape[n] for n in "BTHKV")
    return kda_inputs(seed, B, T, H, K, V, dtype=dtype, strength=0.5, initial_state=False)


def _chunk_kda_call(implementation, q, k, v, g, beta, library=None, **options):
    # workbench looked up per call; `library`: another checkout's package (bench/against.py)
    return (library or workbench).chunk_kda(q, k, v, g, beta, implementation=implementation, **options)


def _kda_bytes(shape, dtype):
    """`_recurrent_bytes` (q, k, g, v read; o and the state written; the backward reads them again and
    writes one gradient per input) plus β [B,T,H] read, and its gradient written."""
    B, T, H = (shape[n] for n in "BTH")
    forward, forward_backward = _recurrent_bytes(shape, dtype)
    beta = B * T * H * jnp.dtype(dtype).itemsize
    return forward + beta, forward_backward + 3 * beta


def _chunk_kda_bench() -> OpBench:
    from ..kda import Tuning

    return OpBench(
        shape_sets={
            "target": (dict(B=8, T=4096, H=16, K=128, V=128),),  # the KDA issue's target
            "sweep": tuple(dict(B=1, T=2 ** e, H=16, K=128, V=128) for e in range(10, 17)),  # 1k … 64k
            "off_table": (dict(B=8, T=3000, H=12, K=128, V=128),),  # no table entry: served by the nearest (H 16)
            # the widest heads: one state sweep per sequence, its backward in one pipeline stage (kda/NOTES.md)
            "wide": (dict(B=2, T=4096, H=16, K=256, V=256), dict(B=1, T=16384, H=16, K=256, V=256)),
            "tiny": (dict(B=1, T=40, H=2, K=16, V=16),),
        },
        cpu_shape_sets=("tiny",),
        dtype="bfloat16",
        inputs=chunk_kda_inputs,
        differentiable=("q", "k", "v", "g", "beta"),
        outputs=("o", "final_state"),
        call=_chunk_kda_call,
        bytes=_kda_bytes,
        peers=(Peer("fla.ops.kda.chunk_kda", "fla", fla_chunk_kda),),
        max_T={"reference": (32768, "the reference's autodiff (13 GiB at 32k by XLA's memory analysis, 26 GiB "
                                    "at 64k) on top of every other contender's buffers")},
        error_sources=("fla.ops.kda.chunk_kda",),
        variants={"recomputed residuals": {"tuning": Tuning(residuals="recompute")},
                  "kept residuals": {"tuning": Tuning(residuals="keep")},
                  "unfused backward": {"tuning": Tuning(fused_backward=False)},
                  "unfused forward": {"tuning": Tuning(fused_forward=False)},
                  "unfused output": {"tuning": Tuning(fused_output=False)},
                  "sub-chunk products": {"tuning": Tuning(whole_chunk=False)},
                  "one sweep": {"tuning": Tuning(segments=1)}},
        notes={"gate_strength": 0.5, "keys": "L2-normalised", "chunk_size": 64,
               "targets_ms": {"target": {"forward": 1.75, "forward_backward": 10.0}},
               "one_sweep": "triton vs triton[one sweep]: the two-level state pass (NOTES kda.18, segments chosen "
                            "by kda.state_segments) against one sweep per sequence; the same where it picks 1",
               "fused_vs_unfused": "forward_backward of triton vs triton[unfused backward]: same forward, the "
                                   "difference is the fused WY + dq/dk/dg kernel against its two halves",
               "whole_chunk": "triton vs triton[sub-chunk products]: L, Aqk and their backward from whole-chunk "
                              "products (kda.17) against sub-chunk products"},
    )


def _attention_inputs(shape, dtype, seed):
    B, T, H, D = (shape[n] for n in "BTHD")
    ks = jax.random.split(jax.random.key(seed), 3)
    q, k, v = (jax.random.normal(kk, (B, T, H, D), jnp.float32).astype(dtype) for kk in ks)
    return dict(q=q, k=k, v=v, causal=bool(shape["causal"]))


def _attention_call(implementation, q, k, v, causal, library=None, **options):
    lib = library or workbench
    return (lib.flash_attention(q, k, v, causal=causal, implementation=implementation, **options),)


def _attention_bytes(shape, dtype):
    """q, k, v read and o written once; backward: q, k, v, o, do read, dq, dk, dv written."""
    B, T, H, D = (shape[n] for n in "BTHD")
    x = B * T * H * D * jnp.dtype(dtype).itemsize
    return 4 * x, 4 * x + 8 * x


def _attention_flops(shape):
    """4·B·H·T²·D for the two forward matmuls (half when causal); the backward is 2.5× that."""
    B, T, H, D = (shape[n] for n in "BTHD")
    forward = 4 * B * H * T * T * D * (0.5 if shape["causal"] else 1.0)
    return forward, 3.5 * forward


def _default_backward_is_triton() -> str | None:
    """Why "triton backward" would time the default again here: the Gluon backward, the default on Hopper
    (`flash_attention.Tuning`), does not run on this machine."""
    why = _flash_gluon_unavailable()
    return None if why is None else f"the default backward is the Triton one here (the Gluon kernels: {why})"


FLASH_ATTENTION = OpBench(
    shape_sets={
        # the flash-attention issue's targets, causal and not
        "target": (dict(B=4, T=4096, H=16, D=128, causal=1), dict(B=4, T=4096, H=16, D=128, causal=0)),
        # 1k … 64k tokens; past 8k the dense reference and XLA are skipped (max_T) and the errors are
        # measured against cuDNN
        "sweep": tuple(dict(B=1, T=2 ** e, H=16, D=128, causal=c) for c in (1, 0) for e in range(10, 17)),
        # no table entry: served by the nearest (H 16)
        "off_table": (dict(B=4, T=3000, H=12, D=128, causal=1), dict(B=4, T=3000, H=12, D=128, causal=0)),
        "tiny": (dict(B=1, T=32, H=2, D=16, causal=1),),
    },
    cpu_shape_sets=("tiny",),
    dtype="bfloat16",
    inputs=_attention_inputs,
    differentiable=("q", "k", "v"),
    outputs=("o",),
    call=_attention_call,
    bytes=_attention_bytes,
    flops=_attention_flops,
    peers=(Peer("jax.nn.dot_product_attention[cudnn]", "jax", dot_product_attention("cudnn"), runtime="jax"),
           Peer("jax.nn.dot_product_attention[xla]", "jax", dot_product_attention("xla"), needs_cuda=False,
                runtime="jax"),
           Peer("ejkernel.flash_attention[triton]", "ejkernel", ejkernel_flash_attention(False), runtime="jax",
                interpretable=True),
           Peer("ejkernel.flash_attention[triton,heuristic_cfg_gpu]", "ejkernel", ejkernel_flash_attention(True),
                runtime="jax", interpretable=True)),
    variants={"triton forward": {"tuning": _FlashTuning(forward="triton")}, "dq pass": {"tuning": _FlashTuning(dq="pass")},
              "triton backward": {"tuning": _FlashTuning(backward="triton")},
              "pointer loads": {"tuning": _FlashTuning(forward_loads="pointers")}},
    variant_needs={"triton backward": _default_backward_is_triton},
    max_T={name: (8192, "dense attention: its forward+backward holds several B·H·T² float32 arrays (XLA's memory "
                        "analysis at B=1 H=16: 16-20 GiB at 8k, 64-80 GiB at 16k)")
           for name in ("reference", "jax.nn.dot_product_attention[xla]")},
    error_sources=("jax.nn.dot_product_attention[cudnn]", "ejkernel.flash_attention[triton]",
                   "jax.nn.dot_product_attention[xla]"),
    notes={"targets_ms": {"causal": {"forward": 1.5, "forward_backward": 4.6},
                          "non_causal": {"forward": 1.9, "forward_backward": 6.3}}},
)


OPS: dict[str, OpBench] = {"recurrent": RECURRENT, "chunk_gla": CHUNK_GLA, "chunk_kda": _chunk_kda_bench(),
                            "flash_attention": FLASH_ATTENTION}

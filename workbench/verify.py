"""`workbench verify`: every op against its float64 oracle over a fixed matrix of cases.

For each case and dtype the op runs on inputs rounded to that dtype, with random cotangents for
every output (final states included), and three results are compared (`workbench.testing`):

    kernel     the implementation under test (`implementation="triton"`, or the reference itself
               with `implementation="reference"`) in the dtype;
    reference  the pure-JAX reference in the same dtype;
    oracle     the reference on float64 casts of the same rounded inputs and cotangents.

Each output and each gradient passes when err(kernel, oracle) ≤ 1.5 · err(reference, oracle) + atol.

Adding an op: write a `run(case, dtype, implementation) -> CaseResult` (usually a few lines around
`check_vjp`), list its cases, and add an `OpSpec` to `OPS`.

A kernel of your own: a module that defines `VERIFY_CASES`, a list of `CheckCase`, runs in the same
table and report with `workbench verify --module my_pkg.my_op` (docs/API.md, "Toolkit").
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import sys
import time
import traceback
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import workbench

from . import launch, testing

DTYPES = ("float32", "bfloat16")
IMPLEMENTATIONS = ("triton", "reference")


# ----------------------------------------------------------------------------- data


@dataclasses.dataclass(frozen=True)
class Case:
    """One configuration of an op; `params` are read by the op's runner."""

    name: str
    params: Mapping[str, Any]

    @property
    def seed(self) -> int:
        """Stable per case name, so one case reproduces alone (`--case NAME`)."""
        return zlib.crc32(self.name.encode()) % 2**31


@dataclasses.dataclass
class CaseResult:
    """What one case in one dtype produced: a comparison per output and gradient, and the
    (kernel, oracle) arrays of the gradients named in the op's `error_maps`."""

    comparisons: list[testing.Comparison]
    arrays: dict[str, tuple[np.ndarray, np.ndarray]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """An op as `verify` sees it.

    run: `run(case, dtype, implementation, want_arrays)` → `CaseResult`.
    cases: the fixed matrix; quick: one or two tiny cases for smoke tests (`--quick`).
    map_cases, map_grads: the cases and gradients whose |kernel − oracle| maps go in the report.
    """

    run: Callable[[Case, str, str, Sequence[str]], CaseResult]
    cases: tuple[Case, ...]
    quick: tuple[Case, ...]
    map_cases: tuple[str, ...]
    map_grads: tuple[str, ...] = ("dq", "dk")


@dataclasses.dataclass(frozen=True)
class Row:
    """One line of the table: one output or gradient of one case in one dtype."""

    op: str
    case: str
    dtype: str
    name: str
    kernel_err: float
    reference_err: float
    tolerance: float
    kernel_max_abs: float
    finite: bool
    ok: bool
    error: str = ""

    @classmethod
    def of(cls, op: str, case: str, dtype: str, c: testing.Comparison) -> Row:
        return cls(op, case, dtype, c.name, c.kernel_err, c.reference_err, c.tolerance, c.kernel_max_abs,
                   c.finite, c.ok)

    @classmethod
    def failed(cls, op: str, case: str, dtype: str, error: str) -> Row:
        nan = float("nan")
        return cls(op, case, dtype, "exception", nan, nan, nan, nan, False, False, error)

    @property
    def verdict(self) -> str:
        return "PASS" if self.ok else "FAIL"

    def comparison(self) -> testing.Comparison:
        return testing.Comparison(self.name, self.dtype, self.kernel_err, self.reference_err,
                                  self.kernel_max_abs, self.tolerance, self.finite)


# ----------------------------------------------------------------------------- the generic check


def check_vjp(op: Callable, inputs: Mapping[str, Any], differentiable: Sequence[str],
              output_names: Sequence[str], implementation: str, seed: int,
              want_arrays: Sequence[str] = ()) -> CaseResult:
    """`testing.check` of `op(**inputs, implementation=...)` against `op(**inputs, implementation="reference")`.

    inputs: keyword arguments, floating arrays already in the dtype under test (states may stay
    float32); every array among them is cast to float64 for the oracle. differentiable: names of inputs to
    differentiate (absent or None ones are skipped); gradients are named `d<name>`. output_names: names
    of the op's outputs, in order.
    """
    names = [n for n, x in inputs.items() if hasattr(x, "dtype")]
    static = {n: x for n, x in inputs.items() if n not in names}
    wrt = [n for n in differentiable if inputs.get(n) is not None]

    def call(impl: str):
        return lambda *arrays: op(**static, **dict(zip(names, arrays)), implementation=impl)

    report = testing.check(call(implementation), call("reference"), [inputs[n] for n in names],
                           argnums=[names.index(n) for n in wrt], seed=seed, output_names=output_names,
                           arg_names=names, keep_arrays=want_arrays)
    return CaseResult(list(report.comparisons), dict(report.arrays))


# ----------------------------------------------------------------------------- recurrent


def _recurrent_case(name: str, *, B: int = 1, T: int = 32, H: int = 2, K: int = 16, V: int = 16,
                    gates: Sequence[str] = (), strength: float = 1.0, reverse: bool = False,
                    seqlens: Sequence[int] | None = None) -> Case:
    return Case(name, dict(B=B, T=T, H=H, K=K, V=V, gates=tuple(gates), strength=strength,
                           reverse=reverse, seqlens=None if seqlens is None else tuple(seqlens)))


def gated_case_inputs(case: Case, dtype) -> dict[str, Any]:
    """The arrays of a recurrent or chunk_gla case (q, k, v, its gates, initial_state, cu_seqlens)."""
    p = case.params
    seqlens = p["seqlens"]
    B, T = (1, sum(seqlens)) if seqlens else (p["B"], p["T"])
    inputs = testing.recurrent_inputs(case.seed, B, T, p["H"], p["K"], p["V"], dtype=jnp.dtype(dtype),
                                      gates=p["gates"], strength=p["strength"],
                                      n_seqs=len(seqlens) if seqlens else None)
    if seqlens:
        inputs["cu_seqlens"] = jnp.asarray(np.cumsum([0, *seqlens]), jnp.int32)
    return inputs


def _run_recurrent(case: Case, dtype: str, implementation: str, want_arrays: Sequence[str]) -> CaseResult:
    inputs = gated_case_inputs(case, dtype)
    inputs["reverse"] = case.params["reverse"]
    # One XLA program per direction instead of op-by-op dispatch; traced anew for every case, so the op
    # is looked up at call time (a test can swap in a broken one).
    op = jax.jit(lambda **kw: workbench.recurrent(**kw), static_argnames=("reverse", "implementation"))
    return check_vjp(op, inputs,
                     ("q", "k", "v", "g", "gk", "gv", "initial_state"), ("o", "final_state"),
                     implementation, case.seed, want_arrays)


# Small on purpose: the Triton interpreter costs ~0.1 s per (step × head) of backward on CPU.
RECURRENT_CASES = (
    _recurrent_case("no_gate"),
    _recurrent_case("gk", B=2, T=24, H=1, K=32, V=32, gates=("gk",)),
    _recurrent_case("g+g_gamma", gates=("g", "g_gamma")),
    _recurrent_case("gv", gates=("gv",)),
    _recurrent_case("all_gates_strong", gates=("g", "g_gamma", "gk", "gv"), strength=5.0),
    _recurrent_case("reverse", T=64, H=1, gates=("gk", "gv"), reverse=True),
    _recurrent_case("varlen", H=2, gates=("gk",), seqlens=(13, 0, 1, 18)),
    _recurrent_case("odd_sizes", T=33, H=1, K=12, V=20, gates=("g", "gk")),
)

RECURRENT_QUICK = (
    _recurrent_case("tiny_gk", T=8, H=2, K=8, V=8, gates=("g", "gk")),
    _recurrent_case("tiny_varlen", H=1, K=8, V=8, gates=("gk",), seqlens=(5, 0, 1)),
)


# ----------------------------------------------------------------------------- chunk_gla


def _chunk_gla_case(name: str, *, B: int = 1, T: int = 40, H: int = 2, K: int = 16, V: int = 16,
                    gates: Sequence[str] = ("gk",), strength: float = 1.0, chunk_size: int = 16,
                    seqlens: Sequence[int] | None = None) -> Case:
    return Case(name, dict(B=B, T=T, H=H, K=K, V=V, gates=tuple(gates), strength=strength, chunk_size=chunk_size,
                           seqlens=None if seqlens is None else tuple(seqlens)))


def _run_chunk_gla(case: Case, dtype: str, implementation: str, want_arrays: Sequence[str]) -> CaseResult:
    inputs = gated_case_inputs(case, dtype)
    inputs["chunk_size"] = case.params["chunk_size"]
    # One XLA program per direction instead of op-by-op dispatch; traced anew for every case, so the op
    # is looked up at call time (a test can swap in a broken one).
    op = jax.jit(lambda **kw: workbench.chunk_gla(**kw), static_argnames=("chunk_size", "implementation"))
    return check_vjp(op, inputs, ("q", "k", "v", "g", "gk", "initial_state"), ("o", "final_state"),
                     implementation, case.seed, want_arrays)


# Small on purpose: each case compiles the chunkwise reference twice and interprets six kernels
# (~4-8 s per case and dtype on a 2-core CPU).
CHUNK_GLA_CASES = (
    _chunk_gla_case("gk_chunk64_two_chunks", T=70, H=1, chunk_size=64),
    _chunk_gla_case("g_odd_dims_chunk32", T=33, H=1, K=12, V=20, gates=("g",), chunk_size=32),
    _chunk_gla_case("strong_decay_varlen", H=1, gates=("g", "gk"), strength=5.0, seqlens=(13, 0, 1, 20)),
)

CHUNK_GLA_QUICK = (
    _chunk_gla_case("tiny_g+gk", T=20, H=1, K=8, V=8, gates=("g", "gk")),
)


# ----------------------------------------------------------------------------- chunk_kda, recurrent_kda


def _kda_case(name: str, *, B: int = 1, T: int = 40, H: int = 2, K: int = 16, V: int = 16, strength: float = 1.0,
              key_scale: float | None = None, chunk_size: int = 16, seqlens: Sequence[int] | None = None) -> Case:
    return Case(name, dict(B=B, T=T, H=H, K=K, V=V, strength=strength, key_scale=key_scale, chunk_size=chunk_size,
                           seqlens=None if seqlens is None else tuple(seqlens)))


def kda_case_inputs(case: Case, dtype) -> dict[str, Any]:
    """The arrays of a chunk_kda or recurrent_kda case, as users feed them (`kda.inputs.kda_inputs`: unit-norm
    keys unless the case sets key_scale, β in (0, 1)), and cu_seqlens."""
    from .kda.inputs import kda_inputs

    p = case.params
    seqlens = p["seqlens"]
    B, T = (1, sum(seqlens)) if seqlens else (p["B"], p["T"])
    inputs = kda_inputs(case.seed, B, T, p["H"], p["K"], p["V"], dtype=jnp.dtype(dtype), strength=p["strength"],
                        key_scale=p["key_scale"], n_seqs=len(seqlens) if seqlens else None)
    if seqlens:
        inputs["cu_seqlens"] = jnp.asarray(np.cumsum([0, *seqlens]), jnp.int32)
    return inputs


def _run_kda(op_name: str):
    """A runner for `workbench.<op_name>` (chunk_kda or recurrent_kda): inputs as users feed them
    (`kda.inputs.kda_inputs`: unit-norm keys unless the case sets key_scale, β in (0, 1))."""

    def run(case: Case, dtype: str, implementation: str, want_arrays: Sequence[str]) -> CaseResult:
        inputs = kda_case_inputs(case, dtype)
        static = ("implementation",)
        if op_name == "chunk_kda":
            inputs["chunk_size"] = case.params["chunk_size"]
            static += ("chunk_size",)
        # looked up at call time, so a test can swap in a broken op
        op = jax.jit(lambda **kw: getattr(workbench, op_name)(**kw), static_argnames=static)
        return check_vjp(op, inputs, ("q", "k", "v", "g", "beta", "initial_state"), ("o", "final_state"),
                         implementation, case.seed, want_arrays)

    return run


# Small on purpose: each case compiles the chunkwise reference twice and interprets seven kernels.
KDA_CASES = (
    _kda_case("chunk64_two_chunks", T=70, H=1, chunk_size=64),
    _kda_case("odd_dims_chunk32_small_keys", T=33, H=1, K=12, V=20, chunk_size=32, key_scale=0.5),
    _kda_case("strong_decay_varlen", H=1, strength=3.0, seqlens=(13, 0, 1, 20)),
)

KDA_QUICK = (
    _kda_case("tiny_kda", T=20, H=1, K=8, V=8),
)


# ----------------------------------------------------------------------------- flash_attention


def _flash_case(name: str, *, B: int = 1, Tq: int = 48, Tk: int | None = None, H: int = 2, Hkv: int | None = None,
                D: int = 32, sinks: bool = False, bias: str | None = None, segments: int = 0,
                seqlens: Sequence[tuple[int, int]] | None = None, **options) -> Case:
    """A flash_attention case: sizes, inputs (`testing.attention_inputs`), packed (Lq, Lk) pairs and the
    op's options (causal, sliding_window, softcap, scale, dropout_rate)."""
    return Case(name, dict(B=B, Tq=Tq, Tk=Tq if Tk is None else Tk, H=H, Hkv=H if Hkv is None else Hkv, D=D,
                           sinks=sinks, bias=bias, segments=segments,
                           seqlens=None if seqlens is None else tuple(map(tuple, seqlens)), options=dict(options)))


def flash_case_inputs(case: Case, dtype) -> tuple[dict[str, Any], dict[str, Any]]:
    """(arrays, options) of a flash_attention case: q, k, v, sinks, bias, segment ids, packed bounds, the
    dropout key; the case's options with return_lse."""
    p = case.params
    B, Tq, Tk = p["B"], p["Tq"], p["Tk"]
    if p["seqlens"]:
        B, (Tq, Tk) = 1, np.sum(p["seqlens"], axis=0).tolist()
    inputs = testing.attention_inputs(case.seed, B, Tq, Tk, p["H"], p["Hkv"], p["D"], dtype=jnp.dtype(dtype),
                                      sinks=p["sinks"], bias=p["bias"], segments=p["segments"])
    if p["seqlens"]:
        cu = np.cumsum([(0, 0), *p["seqlens"]], axis=0).astype(np.int32)
        inputs["cu_seqlens_q"], inputs["cu_seqlens_k"] = jnp.asarray(cu[:, 0]), jnp.asarray(cu[:, 1])
    options = dict(p["options"], return_lse=True)
    if options.get("dropout_rate"):
        inputs["dropout_key"] = jax.random.key(case.seed)
    return inputs, options


def _run_flash(case: Case, dtype: str, implementation: str, want_arrays: Sequence[str]) -> CaseResult:
    """Like `check_vjp`, with what attention needs beyond it: lse compared on the rows the oracle
    sees something (−inf must match exactly, else a FAIL row), and each gradient's yardstick the
    reference's error and, in quadrature, that of the exact gradients given the kernel's o and lse,
    which a FlashAttention backward works from (`testing.compare_with_floor`,
    `testing.attention_backward_cotangents`)."""
    p = case.params
    inputs, options = flash_case_inputs(case, dtype)
    B, Tq = inputs["q"].shape[:2]
    wrt = [n for n in ("q", "k", "v", "sinks", "bias") if n in inputs]

    def vjp(impl, args):
        def fn(*primals):
            # Looked up at call time (each run traces anew), so a test can swap in a broken op.
            return workbench.flash_attention(**{**args, **dict(zip(wrt, primals))}, **options, implementation=impl)

        return jax.vjp(fn, *[args[n] for n in wrt])

    @functools.partial(jax.jit, static_argnums=0)  # one XLA program per run, not op-by-op dispatch
    def same_dtype(impl, args, cts):
        out, pullback = vjp(impl, args)
        return out, pullback(cts)

    @jax.jit
    def oracle(args, cts, o_kernel, lse_kernel):
        """The float64 oracle, its gradients given the kernel's o and lse (the floor), and dsinks' atol."""
        q_dtype = args["q"].dtype
        args, (do, dlse) = {**args, **testing.to_float64({n: args[n] for n in wrt})}, testing.to_float64(cts)
        (o, lse), pullback = vjp("reference", args)
        floor = pullback(testing.attention_backward_cotangents(do, dlse, o_kernel, lse_kernel, o, lse))
        atols = {}
        if "sinks" in args:
            atols["dsinks"] = testing.attention_dsinks_atol(q_dtype, args["sinks"], do, dlse, o, lse)
        return (o, lse), pullback((do, dlse)), floor, atols

    q = inputs["q"]
    cts = testing.random_cotangents(case.seed, (jax.ShapeDtypeStruct(q.shape, q.dtype),
                                                jax.ShapeDtypeStruct((B, p["H"], Tq), jnp.float32)))
    (o_k, lse_k), grads_k = same_dtype(implementation, inputs, cts)
    (o_r, lse_r), grads_r = same_dtype("reference", inputs, cts)
    (o_o, lse_o), grads_o, grads_b, atols = oracle(inputs, cts, o_k, lse_k)

    seen = np.isfinite(np.asarray(lse_o))
    lse_k, lse_r, lse_o = (np.asarray(x) for x in (lse_k, lse_r, lse_o))
    comparisons = [testing.compare("o", o_k, o_r, o_o),
                   testing.compare("lse", lse_k[seen], lse_r[seen], lse_o[seen])]
    if not np.array_equal(np.isneginf(lse_k), ~seen):  # a row that sees nothing must give −inf, and only it
        comparisons[-1] = dataclasses.replace(comparisons[-1], finite=False)
    names = [f"d{n}" for n in wrt]
    comparisons += [testing.compare_with_floor(n, a, b, c, d, atol=float(atols[n]) if n in atols else None)
                    for n, a, b, c, d in zip(names, grads_k, grads_r, grads_b, grads_o)]
    arrays = {n: (np.asarray(a, np.float64), np.asarray(d, np.float64))
              for n, a, d in zip(names, grads_k, grads_o) if n in want_arrays}
    return CaseResult(comparisons, arrays)


# Small on purpose: every case compiles the reference twice (its dtype and float64) and interprets
# three kernels; ~1.5–3 s per case and dtype on a CPU.
FLASH_CASES = (
    _flash_case("plain", B=2, Tq=40),
    _flash_case("causal", Tq=64, causal=True),
    _flash_case("causal_Tq>Tk_empty_rows", Tq=48, Tk=24, causal=True),
    _flash_case("causal_Tq<Tk", Tq=24, Tk=64, causal=True),
    _flash_case("block_edges_T65", Tq=65, H=1, D=16, causal=True),
    _flash_case("head_dim_40", Tq=33, D=40),
    _flash_case("head_dim_80", Tq=20, Tk=28, H=1, D=80, causal=True),
    _flash_case("GQA", Tq=40, H=4, Hkv=2, D=16, causal=True),
    _flash_case("MQA", Tq=33, Tk=40, H=4, Hkv=1, D=16),
    _flash_case("window_int_causal", Tq=48, causal=True, sliding_window=8),
    _flash_case("window_pair", Tq=40, Tk=48, sliding_window=(5, 3)),
    _flash_case("window_(0,0)", Tq=32, sliding_window=(0, 0)),
    _flash_case("segments", B=2, Tq=40, segments=3),
    _flash_case("window+segments+causal", Tq=48, segments=2, causal=True, sliding_window=(12, 0)),
    _flash_case("softcap", Tq=40, softcap=5.0),
    _flash_case("sinks_causal", Tq=40, sinks=True, causal=True),
    _flash_case("bias_BH", B=2, Tq=24, Tk=32, bias="BH"),
    _flash_case("bias_11_causal", B=2, Tq=24, bias="11", causal=True),
    _flash_case("bias+softcap+sinks", Tq=40, Tk=33, bias="1H", sinks=True, softcap=3.0),
    _flash_case("varlen", H=2, Hkv=1, sinks=True, seqlens=((13, 10), (0, 4), (1, 1), (18, 20), (3, 0)), causal=True),
    _flash_case("varlen_window_bias", bias="1H", seqlens=((9, 16), (24, 24), (1, 0)), sliding_window=(4, 2)),
    _flash_case("dropout", Tq=40, dropout_rate=0.2),
    _flash_case("dropout_causal_bias_sinks", Tq=33, Tk=40, bias="1H", sinks=True, causal=True, dropout_rate=0.5),
    _flash_case("everything", Tq=40, Tk=48, H=4, Hkv=2, D=24, sinks=True, bias="B1", segments=2, causal=True,
                sliding_window=12, softcap=5.0, scale=0.3),
)

FLASH_QUICK = (
    _flash_case("tiny_causal_sinks", Tq=12, H=2, Hkv=1, D=16, sinks=True, causal=True),
    _flash_case("tiny_varlen", H=1, D=16, seqlens=((5, 7), (0, 3), (1, 1), (2, 0)), causal=True),
)


# ----------------------------------------------------------------------------- a kernel of your own


@dataclasses.dataclass(frozen=True)
class CheckCase:
    """One case of a kernel that is not in this package, for `workbench verify --module MODULE` (the module
    lists them in `VERIFY_CASES`): `testing.check(fn, reference, args(dtype), ...)` in each dtype verify runs.

    name: the case's name in the table (and its seed: `Case.seed`). fn, reference: as `testing.check` takes
    them (with `--implementation reference`, `reference` is checked in fn's place). args: dtype name
    ("float32", "bfloat16") → the positional arguments in that dtype. argnums, output_names, ratio: as
    `testing.check`'s. maps: gradients whose |kernel − oracle| map goes in the report (arrays [B, T, H, D]
    or [B, T, H]).
    """

    name: str
    fn: Callable
    reference: Callable
    args: Callable[[str], Sequence[Any]]
    argnums: Sequence[int] | None = None
    output_names: Sequence[str] | None = None
    ratio: float = testing.RATIO
    maps: Sequence[str] = ()


def module_spec(module_name: str) -> OpSpec:
    """The `OpSpec` of a module's `VERIFY_CASES` (a ValueError naming what is missing or wrong)."""
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"--module: cannot import {module_name!r}: {exc}") from exc
    cases = getattr(module, "VERIFY_CASES", None)
    if not cases or not all(isinstance(c, CheckCase) for c in cases):
        raise ValueError(f"--module: {module_name} must define VERIFY_CASES, a non-empty list of "
                         f"workbench.verify.CheckCase, got {type(cases).__name__}")
    by_name = {c.name: c for c in cases}
    if len(by_name) != len(cases):
        raise ValueError(f"--module: {module_name}'s VERIFY_CASES repeat a name: {[c.name for c in cases]}")

    def run(case: Case, dtype: str, implementation: str, want_arrays: Sequence[str]) -> CaseResult:
        c = by_name[case.name]
        report = testing.check(c.fn if implementation == "triton" else c.reference, c.reference, c.args(dtype),
                               argnums=c.argnums, ratio=c.ratio, seed=case.seed, output_names=c.output_names,
                               keep_arrays=want_arrays)
        return CaseResult(list(report.comparisons), dict(report.arrays))

    maps = tuple(dict.fromkeys(g for c in cases for g in c.maps))
    return OpSpec(run=run, cases=tuple(Case(c.name, {}) for c in cases), quick=(Case(cases[0].name, {}),),
                  map_cases=tuple(c.name for c in cases if c.maps), map_grads=maps)


# ----------------------------------------------------------------------------- registry

OPS: dict[str, OpSpec] = {
    "recurrent": OpSpec(run=_run_recurrent, cases=RECURRENT_CASES, quick=RECURRENT_QUICK,
                        map_cases=("all_gates_strong", "tiny_gk")),
    "chunk_gla": OpSpec(run=_run_chunk_gla, cases=CHUNK_GLA_CASES, quick=CHUNK_GLA_QUICK,
                        map_cases=("strong_decay", "tiny_g+gk")),
    "chunk_kda": OpSpec(run=_run_kda("chunk_kda"), cases=KDA_CASES, quick=KDA_QUICK,
                        map_cases=("strong_decay_varlen", "tiny_kda"), map_grads=("dk", "dg")),
    "recurrent_kda": OpSpec(run=_run_kda("recurrent_kda"), cases=KDA_CASES, quick=KDA_QUICK,
                            map_cases=("strong_decay_varlen", "tiny_kda"), map_grads=("dk", "dg")),
    "flash_attention": OpSpec(run=_run_flash, cases=FLASH_CASES, quick=FLASH_QUICK,
                              map_cases=("everything", "tiny_causal_sinks")),
}


# ----------------------------------------------------------------------------- running


@dataclasses.dataclass
class Report:
    rows: list[Row]
    arrays: dict[tuple[str, str, str, str], tuple[np.ndarray, np.ndarray]]  # (op, case, dtype, grad)
    implementation: str
    seconds: float
    case_seconds: dict[tuple[str, str, str], float]
    described: dict[tuple[str, str], str] = dataclasses.field(default_factory=dict)  # (op, case) → its parameters
    jobs: int = 1  # processes the cases ran in

    @property
    def ok(self) -> bool:
        return bool(self.rows) and all(r.ok for r in self.rows)


def default_jobs() -> int:
    """Processes `run` uses when not told: one in the interpreter (the CPU is the bottleneck there), else one
    per CPU core up to 16 (compiled, a small case's time is mostly compiling its kernels on the CPU)."""
    return 1 if launch.INTERPRET else max(1, min(16, os.cpu_count() or 1))


def run(ops: Sequence[str] | None = None, *, implementation: str = "triton", dtypes: Sequence[str] = DTYPES,
        quick: bool = False, cases: Sequence[str] | None = None, modules: Sequence[str] = (),
        jobs: int | None = None, progress=sys.stderr) -> Report:
    """Run the case matrix of `ops` (all when None, none when only `modules` are given) and of each module's
    `VERIFY_CASES` (`CheckCase`), and collect every comparison.

    Turns on `jax_enable_x64` (the oracle runs in float64). An exception in a case becomes a FAIL
    row carrying its message (the traceback goes to `progress`), and the run goes on.

    jobs: processes to share the cases among (default `default_jobs()`); with more than one, each case runs
    in a fresh worker process (`_Workers`) and the rows come back in the same order as one process gives.
    """
    jax.config.update("jax_enable_x64", True)
    ops = (list(OPS) if not modules else []) if ops is None else list(ops)
    for name in ops:
        if name not in OPS:
            raise ValueError(f"op: expected one of {sorted(OPS)}, got {name!r}")
    jobs = default_jobs() if jobs is None else jobs
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs: expected a positive integer, got {jobs!r}")
    specs = {name: OPS[name] for name in ops}
    specs.update({name: module_spec(name) for name in modules})
    work = []
    for name, spec in specs.items():
        selected = [c for c in (spec.quick if quick else spec.cases) if cases is None or c.name in cases]
        work += [_Item(name, name in modules, c.name, quick, d, implementation) for c in selected for d in dtypes]
    if not work:
        raise ValueError(f"case: no case of {list(specs)} matches {list(cases or [])}")

    start = time.perf_counter()
    done: dict[int, _Done] = {}
    width = len(str(len(work)))

    def report(i: int, result: _Done) -> None:
        done[i] = result
        item = work[i]
        bad = [r.name for r in result.rows if not r.ok]
        verdict = "PASS" if not bad else f"FAIL ({', '.join(bad)})"
        if result.traceback:
            _say(progress, result.traceback.rstrip())
        _say(progress, f"[{len(done):>{width}}/{len(work)}] {item.op} {item.case} {item.dtype}  {result.seconds:5.1f} s"
                       f"  {verdict}  [total {time.perf_counter() - start:5.1f} s]")

    jobs = min(jobs, len(work))
    if jobs == 1:
        for i, item in enumerate(work):
            report(i, _run_item(item, specs[item.op]))
    else:
        # the long runs first: float32 (IEEE products compile slowest), then the ops with the most cases
        order = sorted(range(len(work)), key=lambda i: (work[i].dtype != "float32", -len(specs[work[i].op].cases)))
        with _Workers(jobs) as workers:
            _say(progress, f"{len(work)} case×dtype runs in {workers.count} worker processes")
            workers.map([work[i] for i in order], lambda j, result: report(order[j], result))

    rows = [r for i in range(len(work)) for r in done[i].rows]
    arrays = {(w.op, w.case, w.dtype, g): a for i, w in enumerate(work) for g, a in done[i].arrays.items()}
    case_seconds = {(w.op, w.case, w.dtype): done[i].seconds for i, w in enumerate(work)}
    described = {(name, c.name): ", ".join(f"{k}={v}" for k, v in c.params.items() if v not in (None, (), False))
                 for name, spec in specs.items() for c in spec.cases + spec.quick}
    return Report(rows, arrays, implementation, time.perf_counter() - start, case_seconds, described, jobs)


@dataclasses.dataclass(frozen=True)
class _Item:
    """One case in one dtype, by name: what a worker process needs to find and run it."""

    op: str
    is_module: bool
    case: str
    quick: bool
    dtype: str
    implementation: str


@dataclasses.dataclass
class _Done:
    rows: list[Row]
    arrays: dict[str, tuple[np.ndarray, np.ndarray]]
    seconds: float
    traceback: str = ""


def _run_item(item: _Item, spec: OpSpec) -> _Done:
    """Run one item; an exception becomes a FAIL row carrying its message, with the traceback kept."""
    case = next(c for c in (spec.quick if item.quick else spec.cases) if c.name == item.case)
    t0 = time.perf_counter()
    try:
        result = spec.run(case, item.dtype, item.implementation,
                          spec.map_grads if case.name in spec.map_cases else ())
        rows = [Row.of(item.op, case.name, item.dtype, c) for c in result.comparisons]
        return _Done(rows, dict(result.arrays), time.perf_counter() - t0)
    except Exception as exc:  # noqa: BLE001  (reported as a FAIL row; the run goes on)
        return _Done([Row.failed(item.op, case.name, item.dtype, f"{type(exc).__name__}: {exc}")], {},
                     time.perf_counter() - t0, traceback.format_exc())


class _Workers:
    """Worker processes for `run(jobs > 1)`: started fresh (`spawn`: no JAX backend or GPU context inherited),
    each with x64 on and JAX's allocator growing on demand (XLA_PYTHON_CLIENT_PREALLOCATE=false: several
    share one GPU). With compiled Triton the workers keep their autotune choices and kernels in
    `<cache>/verify-jobs` (`autotune.cache_dir()`): configs timed while other processes use the same GPU are
    good enough to check correctness, not to be reused by your programs."""

    def __init__(self, count: int):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        from . import autotune

        self.env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
        if not launch.INTERPRET:
            self.env[autotune.CACHE_VAR] = str(autotune.cache_dir() / "verify-jobs")
        self.count = count
        self._pool = ProcessPoolExecutor(count, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_start_worker, initargs=(self.env,))

    def __enter__(self) -> _Workers:
        return self

    def __exit__(self, *exc) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def map(self, items: Sequence[_Item], report: Callable[[int, _Done], None]) -> None:
        """Run every item, calling `report(index, result)` as each finishes; a worker that dies turns the items
        it leaves into FAIL rows."""
        from concurrent.futures import as_completed

        futures = {self._pool.submit(_work, item): i for i, item in enumerate(items)}
        for future in as_completed(futures):
            i = futures[future]
            try:
                result = future.result()
            except Exception as exc:  # noqa: BLE001  (a worker process that died: BrokenProcessPool)
                item = items[i]
                result = _Done([Row.failed(item.op, item.case, item.dtype,
                                           f"worker process failed: {type(exc).__name__}: {exc}")], {}, 0.0)
            report(i, result)


def _start_worker(env: Mapping[str, str]) -> None:
    os.environ.update(env)
    jax.config.update("jax_enable_x64", True)


@functools.cache
def _spec(op: str, is_module: bool) -> OpSpec:
    return module_spec(op) if is_module else OPS[op]


def _work(item: _Item) -> _Done:
    """A worker process's task: one item, found by name."""
    return _run_item(item, _spec(item.op, item.is_module))


def _say(stream, text: str, end: str = "\n") -> None:
    if stream is not None:
        stream.write(text + end)
        stream.flush()

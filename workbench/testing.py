"""Error metrics against a float64 oracle, input factories, and the error-budget rule.

The rule every kernel is held to (STYLE.md): with `oracle` the float64 reference on the same
(rounded) inputs,

    err(kernel, oracle) ≤ RATIO · err(reference in the kernel's dtype, oracle) + atol

where err is the RMS-relative error ‖x − oracle‖ / ‖oracle‖. Both errors are reported, never
only asserted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

RATIO = 1.5
# atol is about two units in the last place of an RMS-relative error: small enough that the 1.5× factor,
# not the floor, decides float32 comparisons (a float32 reference errs by ~1e-7).
ATOL = {"float32": 2.5e-7, "bfloat16": 1e-3, "float16": 5e-4, "float64": 1e-14}


def rms_rel(x, ref) -> float:
    """‖x − ref‖₂ / ‖ref‖₂ in float64 (absolute RMS when ref is all zero)."""
    x = np.asarray(x, np.float64)
    ref = np.asarray(ref, np.float64)
    num = np.sqrt(np.mean((x - ref) ** 2)) if x.size else 0.0
    den = np.sqrt(np.mean(ref ** 2)) if ref.size else 0.0
    return float(num / den) if den > 0 else float(num)


def max_abs(x, ref) -> float:
    x = np.asarray(x, np.float64)
    ref = np.asarray(ref, np.float64)
    return float(np.max(np.abs(x - ref))) if x.size else 0.0


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One output compared three ways: kernel vs oracle, reference (same dtype) vs oracle."""

    name: str
    dtype: str
    kernel_err: float
    reference_err: float
    kernel_max_abs: float
    tolerance: float
    finite: bool

    @property
    def ratio(self) -> float:
        return self.kernel_err / self.reference_err if self.reference_err > 0 else float("inf")

    @property
    def ok(self) -> bool:
        return self.finite and self.kernel_err <= self.tolerance

    def __str__(self) -> str:
        verdict = "PASS" if self.ok else "FAIL"
        return (f"{self.name:>14s} {self.dtype:>8s}  kernel {self.kernel_err:.2e}  "
                f"reference {self.reference_err:.2e}  tol {self.tolerance:.2e}  "
                f"max|Δ| {self.kernel_max_abs:.2e}  {verdict}")


def compare(name: str, kernel, reference, oracle, ratio: float = RATIO, atol: float | None = None) -> Comparison:
    """Hold `kernel` to `ratio` × the error of `reference` (same dtype) against `oracle` (float64)."""
    dtype = jnp.dtype(kernel.dtype).name
    atol = ATOL.get(dtype, 1e-6) if atol is None else atol
    ref_err = rms_rel(reference, oracle)
    return Comparison(
        name=name, dtype=dtype,
        kernel_err=rms_rel(kernel, oracle), reference_err=ref_err,
        kernel_max_abs=max_abs(kernel, oracle), tolerance=ratio * ref_err + atol,
        finite=bool(np.all(np.isfinite(np.asarray(kernel, np.float64)))),
    )


def compare_with_floor(name: str, kernel, reference, floor, oracle, ratio: float = RATIO,
                       atol: float | None = None) -> Comparison:
    """`compare` with the yardstick the worse of `reference` and `floor`.

    floor: another result the kernel's *algorithm* cannot beat, computed exactly (float64) from
    what the algorithm must round — e.g. `attention_delta_error`. The reported reference error stays
    the reference's; only the tolerance grows, to ratio · err(floor, oracle) + atol.
    """
    comparison = compare(name, kernel, reference, oracle, ratio, atol)
    floor_err = rms_rel(floor, oracle)
    if floor_err <= comparison.reference_err:
        return comparison
    extra = ratio * (floor_err - comparison.reference_err)
    return dataclasses.replace(comparison, tolerance=comparison.tolerance + extra)


def attention_delta_error(do, o_exact):
    """Error of FlashAttention's Delta_i = rowsum(dO_i ∘ O_i) (NOTES.md fa.5), float64 [B, H, Tq].

    A FlashAttention backward forms Delta in float32 from the float32 O of its forward; this is the
    error of that sum with O exact (`o_exact`, the float64 oracle's output) rounded once to float32
    and dO as given ([B, Tq, H, D]). Delta enters the backward only through Delta − dlse, so the
    exact gradients *given such a Delta* are the oracle's VJP with the lse cotangent shifted by −δ:
    a floor (`compare_with_floor`) that the reference, whose autodiff sums P ∘ dP instead, does not
    feel. It matters where the reference cancels exactly and the algorithm cannot: rows that see a
    single key (the reference's dS = P (dP − P·dP) is 0 there, the kernel's dP − Delta two float32
    sums in different orders), and dsinks (a sum of (Delta − dlse) over rows, only H numbers).
    Rows whose exact output is not finite get 0.
    """
    f32, f64 = jnp.float32, jnp.float64
    o_exact, do = jnp.asarray(o_exact, f64), jnp.asarray(do)
    delta = jnp.einsum("bthd,bthd->bht", o_exact.astype(f32), do.astype(f32),
                       precision=jax.lax.Precision.HIGHEST).astype(f64)
    exact = jnp.einsum("bthd,bthd->bht", o_exact, do.astype(f64), precision=jax.lax.Precision.HIGHEST)
    return jnp.where(jnp.isfinite(exact), delta - exact, 0.0)


def assert_within_budget(comparisons: Sequence[Comparison]) -> None:
    """Fail with the whole table when any comparison is over budget or not finite."""
    bad = [c for c in comparisons if not c.ok]
    if bad:
        table = "\n".join(str(c) for c in comparisons)
        raise AssertionError(f"{len(bad)} output(s) over the error budget:\n{table}")


def to_float64(tree):
    """Cast every floating leaf to float64 (needs `jax_enable_x64`)."""
    if not jax.config.jax_enable_x64:
        raise RuntimeError("to_float64 needs jax.config.update('jax_enable_x64', True)")
    return jax.tree.map(lambda x: x.astype(jnp.float64) if x is not None and jnp.issubdtype(x.dtype, jnp.floating)
                        else x, tree)


def random_cotangents(seed: int, outputs):
    """Random normal cotangents shaped like `outputs` (never all-ones: `.sum()` hides bugs)."""
    leaves, treedef = jax.tree.flatten(outputs)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    cts = [jax.random.normal(kk, x.shape, jnp.float32).astype(x.dtype) for kk, x in zip(keys, leaves)]
    return jax.tree.unflatten(treedef, cts)


def vjp_all(fn: Callable, primals: Sequence, cotangents):
    """(outputs, gradients of every primal) for `fn(*primals)` with the given cotangents."""
    out, pullback = jax.vjp(fn, *primals)
    return out, pullback(cotangents)


# ----------------------------------------------------------------------------- input factories


def log_gate(key, shape, strength: float, dtype=jnp.float32):
    """Natural-log decays ≤ 0 with typical magnitude `strength` (0: none; 5+: strong decay)."""
    if strength == 0:
        return jnp.zeros(shape, dtype)
    x = jax.random.normal(key, shape, jnp.float32)
    return (-strength * jax.nn.sigmoid(x + 1.0) * 2.0).astype(dtype)


def recurrent_inputs(seed: int, B: int, T: int, H: int, K: int, V: int, *, dtype=jnp.float32,
                     gates: Sequence[str] = ("gk",), strength: float = 1.0, n_seqs: int | None = None,
                     initial_state: bool = True):
    """Random inputs for `workbench.recurrent` as a dict of keyword arguments.

    gates: any of "g", "g_gamma", "gk", "gv". n_seqs: number of sequences when the inputs are
    packed (then B is forced to 1 and cu_seqlens is left for the caller to add).
    """
    ks = jax.random.split(jax.random.key(seed), 9)
    normal = lambda kk, shape: jax.random.normal(kk, shape, jnp.float32).astype(dtype)  # noqa: E731
    args = dict(q=normal(ks[0], (B, T, H, K)), k=normal(ks[1], (B, T, H, K)), v=normal(ks[2], (B, T, H, V)))
    if "g" in gates:
        args["g"] = log_gate(ks[3], (B, T, H), strength, dtype)
    if "gk" in gates:
        args["gk"] = log_gate(ks[4], (B, T, H, K), strength, dtype)
    if "gv" in gates:
        args["gv"] = log_gate(ks[5], (B, T, H, V), strength, dtype)
    if "g_gamma" in gates:
        args["g_gamma"] = -jnp.linspace(0.05, 0.5, H, dtype=jnp.float32) * max(strength, 0.1)
    if initial_state:
        N = B if n_seqs is None else n_seqs
        args["initial_state"] = 0.5 * jax.random.normal(ks[6], (N, H, K, V), jnp.float32)
    return args


def attention_inputs(seed: int, B: int, Tq: int, Tk: int, H: int, Hkv: int, D: int, *, dtype=jnp.float32,
                     sinks: bool = False, bias: str | None = None, segments: int = 0, aux_dtype=None):
    """Random inputs for `workbench.flash_attention` as a dict of keyword arguments.

    q `[B, Tq, H, D]`, k and v `[B, Tk, Hkv, D]` standard normal in `dtype` (logits ~ N(0, 1) at the
    default scale). sinks: `[H]` normal logits. bias: which leading axes it has, "BH", "1H", "B1" or
    "11" (`[B|1, H|1, Tq, Tk]`). segments: number of distinct segment ids (0: no segment_ids); the
    ids of q and of k/v are sorted runs cut at independent random points, so some queries may find
    no key with their id. sinks and bias are in `aux_dtype` (default `dtype`). With packed
    sequences, pass B=1 and add cu_seqlens_q/k yourself.
    """
    ks = jax.random.split(jax.random.key(seed), 7)
    aux_dtype = dtype if aux_dtype is None else aux_dtype
    normal = lambda kk, shape, dt=dtype: jax.random.normal(kk, shape, jnp.float32).astype(dt)  # noqa: E731
    args = dict(q=normal(ks[0], (B, Tq, H, D)), k=normal(ks[1], (B, Tk, Hkv, D)), v=normal(ks[2], (B, Tk, Hkv, D)))
    if sinks:
        args["sinks"] = normal(ks[3], (H,), aux_dtype)
    if bias is not None:
        if bias not in ("BH", "1H", "B1", "11"):
            raise ValueError(f"bias: expected one of 'BH', '1H', 'B1', '11' or None, got {bias!r}")
        shape = (B if bias[0] == "B" else 1, H if bias[1] == "H" else 1, Tq, Tk)
        args["bias"] = normal(ks[4], shape, aux_dtype)
    if segments:
        ids = lambda kk, T: jnp.sort(jax.random.randint(kk, (B, T), 0, segments, jnp.int32), axis=1)  # noqa: E731
        args["segment_ids"] = (ids(ks[5], Tq), ids(ks[6], Tk))
    return args

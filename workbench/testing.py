"""Error metrics against a float64 oracle, input factories, and the error-budget rule.

The rule every kernel is held to (STYLE.md): with `oracle` the float64 reference on the same
(rounded) inputs,

    err(kernel, oracle) ≤ RATIO · err(reference in the kernel's dtype, oracle) + atol

where err is the RMS-relative error ‖x − oracle‖ / ‖oracle‖. Both errors are reported, never
only asserted.
"""

from __future__ import annotations

import dataclasses
import functools
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
    """`compare`, with a second, independent source of error added to the reference's in quadrature.

    floor: a float64 result that carries an error the kernel's algorithm inherits and the reference
    does not (e.g. the exact gradients given the kernel's own forward outputs,
    `attention_backward_cotangents`). The yardstick becomes √(err(reference)² + err(floor)²), and
    never less than the RMS of rounding the output to its dtype over its n elements: eps / (2√3)
    relative per element, and since the mean square of n uniform roundings σ² varies by 0.894 σ² / √n
    (one standard deviation), its value three deviations up, σ √(1 + 2.68 / √n) (over a few elements
    the reference can land closer than that by luck; an extra rounding, as a kernel's 16-bit
    intermediate takes, then doubles its error; without the √n term a dev-profile draw, T = 1 and
    D = 8 in bfloat16, had its 8 dq values at 4.8e-3 against a bound of 4.4e-3): tolerance = ratio · yardstick + atol. The reported reference error
    stays the reference's.
    """
    comparison = compare(name, kernel, reference, oracle, ratio, atol)
    n = max(1, int(np.size(kernel)))
    rounding = float(jnp.finfo(kernel.dtype).eps) / (2 * 3 ** 0.5) * (1 + 2.68 / n ** 0.5) ** 0.5
    yardstick = max(float(np.hypot(comparison.reference_err, rms_rel(floor, oracle))), rounding)
    extra = ratio * max(0.0, yardstick - comparison.reference_err)
    return dataclasses.replace(comparison, tolerance=float(comparison.tolerance + extra))


def attention_backward_cotangents(do, dlse, o, lse, o_exact, lse_exact):
    """Cotangents whose exact VJP is what a FlashAttention backward computes from its forward's outputs.

    The backward (NOTES.md fa.5, fa.7) takes P_ij = exp(s_ij − lse_i) from the forward's lse and
    Delta_i = rowsum(dO_i ∘ O_i), summed in float32, from the forward's float32 O. With
    1 + ε_i = exp(lse_exact_i − lse_i) and δ_i the error of that Delta, every gradient it forms
    (dS_ij = P_ij (dP_ij − Delta_i + dlse_i), dV, dsinks) equals the exact one at the cotangents
    ((1 + ε_i) dO_i, (1 + ε_i)(dlse_i − δ_i)). Their float64 VJP — the exact gradients given the
    kernel's o and lse, themselves held to budget — is the floor for `compare_with_floor`: the
    reference's autodiff never forms Delta (it sums P ∘ dP) nor reads its lse back, so it is
    spared the error the floor carries. That error matters where the reference's cancels exactly:
    rows that see a single key (the reference's dS = P (dP − P·dP) is 0 there, the kernel's the
    difference of two float32 sums of about the same products, dP_ij and Delta_i, each rounded on
    its own: δ_i gets one more rounding, u · Σ_d |dO_id O_id|, for the dP side), and dsinks (a sum
    of (Delta − dlse) over rows, only H numbers).

    do [B, Tq, H, D], dlse [B, H, Tq]: the cotangents. o, lse: the kernel's outputs. For float32
    inputs o is the O its backward used; for 16-bit inputs that float32 O stays inside the kernel
    and the returned o, rounded to q's dtype, stands in (a floor a little looser than the truth:
    its rounding error is added to O's, whose bfloat16 P·V product already errs about as much).
    o_exact, lse_exact: the float64 oracle's. Returns float64 (do', dlse'); rows whose lse is −inf
    keep their cotangents.
    """
    f32, f64 = jnp.float32, jnp.float64
    o_exact, lse_exact = jnp.asarray(o_exact, f64), jnp.asarray(lse_exact, f64)
    do, dlse, lse = jnp.asarray(do).astype(f64), jnp.asarray(dlse).astype(f64), jnp.asarray(lse).astype(f64)
    highest = jax.lax.Precision.HIGHEST
    delta = jnp.einsum("bthd,bthd->bht", jnp.asarray(o).astype(f32), do.astype(f32), precision=highest)
    exact = jnp.einsum("bthd,bthd->bht", o_exact, do, precision=highest)
    seen = jnp.isfinite(lse_exact) & jnp.isfinite(lse)  # a wrong −inf is the lse comparison's to catch
    scale = jnp.where(seen, jnp.exp(jnp.where(seen, lse_exact - lse, 0.0)), 1.0)  # 1 + ε
    error = delta.astype(f64) - exact
    dp_rounding = 2.0 ** -24 * jnp.einsum("bthd,bthd->bht", jnp.abs(o_exact), jnp.abs(do), precision=highest)
    error = jnp.where(seen, error + jnp.where(error >= 0, dp_rounding, -dp_rounding), 0.0)  # δ
    return do * jnp.swapaxes(scale, 1, 2)[..., None], scale * (dlse - error)


def attention_dsinks_atol(dtype, sinks, do, dlse, o_exact, lse_exact):
    """atol for dsinks: `ATOL[dtype]` times the condition number of the sum that forms it.

    dsinks_h = −Σ_{b,i} t_bhi with t_bhi = exp(sink_h − lse_bi) (Delta_bi − dlse_bi) (NOTES.md fa.7):
    B·Tq terms of both signs, only H results. Rounding errors of about u per term add up to about
    u · ‖t‖₂, which relative to |Σ t| is u · cond with cond = ‖t‖₂ / ‖Σ_{b,i} t‖ (norms over all
    terms and over heads; about 1 unless the terms cancel). The reference's own error can fall far
    below that by luck, so the floor is ATOL · max(1, cond), computed in float64 from the oracle.
    dtype: the precision the terms are computed in — q's (float32 sinks with bfloat16 inputs still
    sum bfloat16-precision terms).
    """
    f64 = jnp.float64
    lse_exact = jnp.asarray(lse_exact, f64)
    delta = jnp.einsum("bthd,bthd->bht", jnp.asarray(o_exact, f64), jnp.asarray(do).astype(f64),
                       precision=jax.lax.Precision.HIGHEST)
    seen = jnp.isfinite(lse_exact)
    p_sink = jnp.where(seen, jnp.exp(jnp.asarray(sinks).astype(f64)[None, :, None] - jnp.where(seen, lse_exact, 0.0)),
                       0.0)
    t = p_sink * (delta - jnp.asarray(dlse).astype(f64))
    magnitude = jnp.sqrt(jnp.sum(t ** 2))
    total = jnp.sqrt(jnp.sum(t.sum((0, 2)) ** 2))
    cond = jnp.where(total > 0, magnitude / jnp.where(total > 0, total, 1.0), 1.0)
    return ATOL.get(jnp.dtype(dtype).name, 1e-6) * jnp.maximum(1.0, cond)


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
    cts = [normal(kk, x.shape, x.dtype) for kk, x in zip(keys, leaves)]
    return jax.tree.unflatten(treedef, cts)


def vjp_all(fn: Callable, primals: Sequence, cotangents):
    """(outputs, gradients of every primal) for `fn(*primals)` with the given cotangents."""
    out, pullback = jax.vjp(fn, *primals)
    return out, pullback(cotangents)


# ----------------------------------------------------------------------------- input factories

# XLA compiles `jax.random.normal` anew for every shape, and on a CPU that takes about a second (the
# threefry hash and the inverse error function), far more than the small kernels under test. The
# factories below draw a flat array whose length is rounded up to a power of two and cut it to the
# shape asked for: a few compilations serve every shape. With partitionable threefry (JAX's default)
# element i of a draw depends only on the key and i, so the values are exactly those of
# `jax.random.normal(key, shape, float32)` (tests/test_testing.py checks it); without it the factories
# draw the shape directly.


def _bucket(size: int) -> int:
    return max(256, 1 << max(size - 1, 0).bit_length())


@functools.partial(jax.jit, static_argnames="size")
def _flat_normal(key, size):
    return jax.random.normal(key, (size,), jnp.float32)


@functools.partial(jax.jit, static_argnames=("size", "high"))
def _flat_randint(key, size, high):
    return jax.random.randint(key, (size,), 0, high, jnp.int32)


def _cut(flat, shape) -> jax.Array:
    """The first prod(shape) elements of `flat`, reshaped (in NumPy: no per-shape compilation; under a
    trace, where the draw is not a concrete array, in JAX)."""
    size = int(np.prod(shape, dtype=np.int64))
    if isinstance(flat, jax.core.Tracer):
        return flat[:size].reshape(shape)
    return jnp.asarray(np.asarray(flat)[:size].reshape(shape))


def _flat_draws() -> bool:
    return bool(jax.config.jax_threefry_partitionable)


def normal(key, shape, dtype=jnp.float32, scale: float = 1.0) -> jax.Array:
    """`(scale * jax.random.normal(key, shape, float32)).astype(dtype)`, the same values, compiled
    once per power-of-two size rather than once per shape."""
    shape = tuple(int(d) for d in shape)
    if not _flat_draws():
        x = jax.random.normal(key, shape, jnp.float32)
        return (x if scale == 1 else scale * x).astype(dtype)
    size = int(np.prod(shape, dtype=np.int64))
    x = _flat_normal(key, _bucket(size))  # scaled and cast op by op, as above, on the flat draw
    return _cut((x if scale == 1 else scale * x).astype(dtype), shape)


def randint(key, shape, high: int) -> jax.Array:
    """`jax.random.randint(key, shape, 0, high, int32)`, compiled once per power-of-two size."""
    shape = tuple(int(d) for d in shape)
    if not _flat_draws():
        return jax.random.randint(key, shape, 0, high, jnp.int32)
    size = int(np.prod(shape, dtype=np.int64))
    return _cut(_flat_randint(key, _bucket(size), int(high)), shape)


def log_gate(key, shape, strength: float, dtype=jnp.float32):
    """Natural-log decays ≤ 0 with typical magnitude `strength` (0: none; 5+: strong decay)."""
    shape = tuple(int(d) for d in shape)
    if strength == 0:
        return jnp.zeros(shape, dtype)
    if not _flat_draws():
        x = jax.random.normal(key, shape, jnp.float32)
        return (-strength * jax.nn.sigmoid(x + 1.0) * 2.0).astype(dtype)
    size = int(np.prod(shape, dtype=np.int64))
    # the arithmetic op by op, as above (inside one jit XLA fuses it and float32 results differ in the
    # last place), on the whole flat draw: compiled once per size too
    x = _flat_normal(key, _bucket(size))
    return _cut((-strength * jax.nn.sigmoid(x + 1.0) * 2.0).astype(dtype), shape)


def recurrent_inputs(seed: int, B: int, T: int, H: int, K: int, V: int, *, dtype=jnp.float32,
                     gates: Sequence[str] = ("gk",), strength: float = 1.0, n_seqs: int | None = None,
                     initial_state: bool = True):
    """Random inputs for `workbench.recurrent` as a dict of keyword arguments.

    gates: any of "g", "g_gamma", "gk", "gv". n_seqs: number of sequences when the inputs are
    packed (then B is forced to 1 and cu_seqlens is left for the caller to add).
    """
    ks = jax.random.split(jax.random.key(seed), 9)
    args = dict(q=normal(ks[0], (B, T, H, K), dtype), k=normal(ks[1], (B, T, H, K), dtype),
                v=normal(ks[2], (B, T, H, V), dtype))
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
        args["initial_state"] = normal(ks[6], (N, H, K, V), jnp.float32, scale=0.5)
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
    args = dict(q=normal(ks[0], (B, Tq, H, D), dtype), k=normal(ks[1], (B, Tk, Hkv, D), dtype),
                v=normal(ks[2], (B, Tk, Hkv, D), dtype))
    if sinks:
        args["sinks"] = normal(ks[3], (H,), aux_dtype)
    if bias is not None:
        if bias not in ("BH", "1H", "B1", "11"):
            raise ValueError(f"bias: expected one of 'BH', '1H', 'B1', '11' or None, got {bias!r}")
        shape = (B if bias[0] == "B" else 1, H if bias[1] == "H" else 1, Tq, Tk)
        args["bias"] = normal(ks[4], shape, aux_dtype)
    if segments:
        ids = lambda kk, T: jnp.sort(randint(kk, (B, T), segments), axis=1)  # noqa: E731
        args["segment_ids"] = (ids(ks[5], Tq), ids(ks[6], Tk))
    return args

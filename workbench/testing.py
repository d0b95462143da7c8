"""Error metrics against a float64 oracle, the error-budget rule, `check` and its `Report`, input factories.

The rule every kernel is held to (STYLE.md): with `oracle` the float64 reference on the same
(rounded) inputs,

    err(kernel, oracle) ≤ RATIO · err(reference in the kernel's dtype, oracle) + atol

where err is the RMS-relative error ‖x − oracle‖ / ‖oracle‖. Both errors are reported, never
only asserted. `check(fn, reference, args)` applies it to every output and every gradient of a
function (a kernel of this package or anyone's) and returns a `Report`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

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
    `attention_backward_cotangents`), or None for none. The yardstick becomes √(err(reference)² +
    err(floor)²), and never less than the RMS of rounding the output to its dtype over its n elements: eps / (2√3)
    relative per element, and since the mean square of n uniform roundings σ² varies by 0.894 σ² / √n
    (one standard deviation), its value three deviations up, σ √(1 + 2.68 / √n) (over a few elements
    the reference can land closer than that by luck; an extra rounding, as a kernel's 16-bit
    intermediate takes, then doubles its error; without the √n term a dev-profile draw, T = 1 and
    D = 8 in bfloat16, had its 8 dq values at 4.8e-3 against a bound of 4.4e-3):
    tolerance = ratio · yardstick + atol. The reported reference error stays the reference's.
    """
    comparison = compare(name, kernel, reference, oracle, ratio, atol)
    n = max(1, int(np.size(kernel)))
    rounding = float(jnp.finfo(kernel.dtype).eps) / (2 * 3 ** 0.5) * _three_deviations_up(n, 2.68)
    floor_err = 0.0 if floor is None else rms_rel(floor, oracle)
    yardstick = max(float(np.hypot(comparison.reference_err, floor_err)), rounding)
    extra = ratio * max(0.0, yardstick - comparison.reference_err)
    return dataclasses.replace(comparison, tolerance=float(comparison.tolerance + extra))


def attention_backward_cotangents(do, dlse, o, lse, o_exact, lse_exact, logit_error=None):
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
    o_exact, lse_exact: the float64 oracle's. logit_error: `attention_logit_error` of the inputs, or None. The
    backward forms each logit again and takes P against the forward's lse, which summed logits rounded apart
    from these: each within about u · m_ij of the exact one, so P_ij errs by up to 2u · m_ij besides ε_i, per row
    2u · Σ_j p_ij m_ij. Given, that joins ε_i (with its sign: the floor's error grows). It matters where a row
    sees a single key: the reference's P is exactly 1 there, the kernel's 2^(s·log2 e − lse2) is not (the dev
    profile's find: Tq = Tk = 1, a bias and softcap 20, dbias 1.04e-6 against a floor-built 1.01e-6).
    Returns float64 (do', dlse'); rows whose lse is −inf keep their cotangents.
    """
    f32, f64 = jnp.float32, jnp.float64
    o_exact, lse_exact = jnp.asarray(o_exact, f64), jnp.asarray(lse_exact, f64)
    do, dlse, lse = jnp.asarray(do).astype(f64), jnp.asarray(dlse).astype(f64), jnp.asarray(lse).astype(f64)
    highest = jax.lax.Precision.HIGHEST
    delta = jnp.einsum("bthd,bthd->bht", jnp.asarray(o).astype(f32), do.astype(f32), precision=highest)
    exact = jnp.einsum("bthd,bthd->bht", o_exact, do, precision=highest)
    seen = jnp.isfinite(lse_exact) & jnp.isfinite(lse)  # a wrong −inf is the lse comparison's to catch
    scale = jnp.where(seen, jnp.exp(jnp.where(seen, lse_exact - lse, 0.0)), 1.0)  # 1 + ε
    if logit_error is not None:
        eta = 2.0 ** -23 * jnp.asarray(logit_error, f64)  # 2u · Σ_j p_ij m_ij
        scale = jnp.where(seen, scale * (1.0 + jnp.where(scale >= 1.0, eta, -eta)), 1.0)
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


def attention_logit_error(q, k, lse_exact, allowed, scale, bias=None, softcap=None):
    """Σ_j p_ij m_ij per row, float64 [B, H, Tq] (0 on rows that see nothing): the error of a row's float32
    logits in units of their rounding, weighted as lse and P weigh them.

    A logit s_ij = scale · q_i·k_j + bias_ij is formed in float32 (bfloat16 inputs too: their products are
    exact, their sums float32) with an error of about u · m_ij, m_ij = scale · Σ_d |q_id k_jd| + |bias_ij|; a
    softcap's tanh has slope ≤ 1, so m bounds its logits' error too. lse_i = log Σ_j exp(s_ij) errs by about
    u · Σ_j p_ij m_ij (∂lse_i/∂s_ij = p_ij), and so does P_ij = exp(s_ij − lse_i) where s_ij and lse_i are rounded
    apart. q [B, Tq, H, D], k [B, Tk, HKV, D], lse_exact [B, H, Tq] (float64, −inf on rows that see nothing),
    allowed bool [B, Tq, Tk] (`reference.allowed_mask`), bias broadcastable to [B, H, Tq, Tk] or None.
    """
    f64 = jnp.float64
    q, k = jnp.asarray(q).astype(f64), jnp.asarray(k).astype(f64)
    k = jnp.repeat(k, q.shape[2] // k.shape[2], axis=2)  # query head h reads kv head h // G
    hi = jax.lax.Precision.HIGHEST
    s = scale * jnp.einsum("bihd,bjhd->bhij", q, k, precision=hi)
    m = scale * jnp.einsum("bihd,bjhd->bhij", jnp.abs(q), jnp.abs(k), precision=hi)
    if bias is not None:
        b = jnp.broadcast_to(jnp.asarray(bias).astype(f64), s.shape)
        finite = jnp.isfinite(b)  # a −inf bias masks its pair: p = 0 there
        s = s + b
        m = m + jnp.where(finite, jnp.abs(b), 0.0)
    if softcap is not None:
        s = softcap * jnp.tanh(s / softcap)
    lse = jnp.asarray(lse_exact, f64)
    seen = jnp.isfinite(lse)
    use = jnp.asarray(allowed)[:, None] & seen[..., None] & jnp.isfinite(s)
    p = jnp.where(use, jnp.exp(jnp.where(use, s - jnp.where(seen, lse, 0.0)[..., None], 0.0)), 0.0)
    return jnp.where(seen, jnp.sum(p * jnp.where(use, m, 0.0), axis=-1), 0.0)


def attention_lse_atol(q, k, lse_exact, allowed, scale, bias=None, softcap=None):
    """atol for lse: `ATOL["float32"]` times the condition number of the logits that form it.

    lse_i errs by about u · Σ_j p_ij m_ij (`attention_logit_error`); relative to ‖lse‖ that is u · cond, cond =
    ‖Σ_j p_ij m_ij‖₂ / ‖lse‖₂ over the rows that see a key. It is about 1 unless the logits cancel (q·k·scale
    against the bias) to values far below their terms, where lse itself is small; the reference's own error can
    fall far below it there by luck. Arguments as `attention_logit_error`'s.
    """
    err = attention_logit_error(q, k, lse_exact, allowed, scale, bias, softcap)
    lse = jnp.asarray(lse_exact, jnp.float64)
    seen = jnp.isfinite(lse)
    size = jnp.sqrt(jnp.sum(jnp.where(seen, lse, 0.0) ** 2))
    cond = jnp.where(size > 0, jnp.sqrt(jnp.sum(err ** 2)) / jnp.where(size > 0, size, 1.0), 1.0)
    return ATOL["float32"] * jnp.maximum(1.0, cond)


def assert_within_budget(comparisons: Sequence[Comparison]) -> None:
    """Fail with the whole table when any comparison is over budget or not finite."""
    bad = [c for c in comparisons if not c.ok]
    if bad:
        table = "\n".join(str(c) for c in comparisons)
        raise AssertionError(f"{len(bad)} output(s) over the error budget:\n{table}")


# ----------------------------------------------------------------------------- check and Report


@dataclasses.dataclass(frozen=True)
class Report:
    """What `check` found: one `Comparison` per output and per gradient, in order.

    `ok` is True when every comparison is within budget and finite; `str(report)` is the table (output or
    gradient, dtype, kernel error, reference error, allowed, max |Δ|, pass); `raise_if_failed()` raises
    AssertionError with the table when one is not. `report["dq"]` is one comparison by name.
    """

    comparisons: tuple[Comparison, ...]
    title: str = ""
    arrays: Mapping[str, tuple[np.ndarray, np.ndarray]] = dataclasses.field(default_factory=dict)
    """(kernel, oracle) as float64 NumPy arrays for the names `check(..., keep_arrays=...)` asked for."""

    @property
    def ok(self) -> bool:
        return bool(self.comparisons) and all(c.ok for c in self.comparisons)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.comparisons)

    def __getitem__(self, name: str) -> Comparison:
        for c in self.comparisons:
            if c.name == name:
                return c
        raise KeyError(f"{name!r}: the report has {', '.join(self.names)}")

    def __str__(self) -> str:
        header = ("output/gradient", "dtype", "kernel error", "reference error", "allowed", "max |Δ|", "pass")
        rows = [(c.name, c.dtype, f"{c.kernel_err:.2e}", f"{c.reference_err:.2e}", f"{c.tolerance:.2e}",
                 f"{c.kernel_max_abs:.2e}", ("PASS" if c.ok else "FAIL") + ("" if c.finite else " (non-finite)"))
                for c in self.comparisons]
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
        line = lambda cells: "  ".join(c.ljust(w) if i < 2 else c.rjust(w)  # noqa: E731
                                       for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
        table = [line(header), line(["-" * w for w in widths]), *map(line, rows)]
        verdict = f"{sum(c.ok for c in self.comparisons)}/{len(self.comparisons)} within budget"
        return "\n".join(([self.title] if self.title else []) + table + [verdict])

    def raise_if_failed(self) -> Report:
        """Raise AssertionError with the table if any comparison is over budget or not finite; else return self."""
        if not self.ok:
            bad = ", ".join(c.name for c in self.comparisons if not c.ok)
            raise AssertionError(f"over the error budget: {bad}\n{self}")
        return self


def _is_float_array(x) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating)


def _argument_names(fn: Callable, n: int) -> list[str]:
    """The names of `fn`'s first n positional parameters where its signature tells them, else arg0, arg1, …"""
    import inspect

    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return [params[i] if i < len(params) else f"arg{i}" for i in range(n)]


def _leaf_names(prefix: str, tree) -> list[str]:
    """`prefix` for a single array, `prefix[0]`, `prefix['a']`, … for the leaves of a pytree."""
    paths = jax.tree_util.tree_flatten_with_path(tree)[0]
    if len(paths) == 1 and not paths[0][0]:
        return [prefix]
    return [prefix + jax.tree_util.keystr(path) for path, _ in paths]


def _gradient_names(parameter: str, grads) -> list[str]:
    """`d<parameter>` for an array; `d<key>` for each array of a dict of arrays (`{"q": …}` → `dq`);
    `d<parameter>[…]` for the leaves of any other pytree."""
    if isinstance(grads, Mapping) and all(hasattr(g, "shape") for g in grads.values()):
        return [f"d{key}" for key in sorted(grads)]  # the order of jax.tree.leaves
    return _leaf_names(f"d{parameter}", grads)


def check(fn: Callable, reference: Callable, args: Sequence, *, argnums: Sequence[int] | None = None,
          cotangents=None, ratio: float = RATIO, seed: int = 0, output_names: Sequence[str] | None = None,
          arg_names: Sequence[str] | None = None, keep_arrays: Sequence[str] = (), jit: bool = True,
          title: str = "", perturbation: float | None = None, variants: Sequence[Callable] = ()) -> Report:
    """Hold `fn` to the error budget against `reference`: every output and every gradient.

    fn, reference: functions of the same positional `args` (pass static options with functools.partial);
    each returns a floating array or a pytree of them. Three results are compared, output by output and
    gradient by gradient:

        kernel     fn(*args), and its VJP, in the arguments' dtypes;
        reference  reference(*args), and its VJP, in the same dtypes;
        oracle     reference on the arguments (and cotangents) cast to float64, with float64 enabled
                   only inside this call (`jax.enable_x64`).

    Each passes when err(kernel, oracle) ≤ ratio · max(err(reference, oracle), rounding) + atol, err the
    RMS-relative error, `rounding` the RMS of rounding the result to its dtype (`compare_with_floor`),
    atol `ATOL[dtype]`. With `perturbation` u, the oracle runs PERTURBATION_SAMPLES times more on every floating
    argument and cotangent times (1 + u·r), r uniform in [−1, 1] (`perturbed`): how far that moves an output (the
    RMS of the draws, `perturbation_floors`) is the error an exact computation on inputs rounded at u may have
    (where a result is a sum whose terms cancel, u·Σ|terms| against its size), and it joins the reference's error
    in quadrature (`compare_with_floor`). u = `PERTURBATION` (float32's ε = 2⁻²³: the kernels accumulate in
    float32, and a result carries a few roundings) is the usual one. `variants`: functions like `reference`
    that, run in float64 as the oracle is, compute the result exactly but for one rounding a kernel's algorithm
    cannot avoid (an intermediate rounded once to the precision the kernel holds it in); how far each moves an
    output from the oracle (times `few_elements_allowance`) joins that floor in quadrature. Gradients are taken with respect to
    `argnums` (default: every argument that is a
    floating array), with `cotangents` (default: random normal ones drawn from `seed`, one per output,
    never all ones); they are named `d<parameter>` after `arg_names` or `reference`'s signature (`d<key>`
    for an argument that is a dict of arrays). Outputs
    are named by `output_names` (default `out`, or `out[0]`, `out[1]`, … for a tuple). With `jit` each of
    the three runs as one `jax.jit` program (array arguments traced, the others static); without it,
    eagerly. An output of another shape or dtype than the reference's is a ValueError. Returns a `Report`
    (with the kernel's and the oracle's arrays of the names in `keep_arrays`); nothing is asserted
    (`Report.raise_if_failed()`).
    """
    args = tuple(args)
    if argnums is None:
        argnums = [i for i, a in enumerate(args) if _is_float_array(a)]
    argnums = list(argnums)
    for i in argnums:
        if not 0 <= i < len(args):
            raise ValueError(f"argnums: {i} is not an argument index (there are {len(args)} arguments)")
        if not all(_is_float_array(x) for x in jax.tree.leaves(args[i])):
            raise ValueError(f"argnums: argument {i} must be floating arrays to differentiate, got "
                             f"{jax.tree.map(lambda x: getattr(x, 'dtype', type(x).__name__), args[i])}")
    traced = [i for i, a in enumerate(args) if i in argnums or hasattr(a, "dtype")]

    def runner(f, arguments):
        def go(values, cts):
            full = list(arguments)
            for i, x in zip(traced, values):
                full[i] = x

            def call(*diff):
                for i, x in zip(argnums, diff):
                    full[i] = x
                return f(*full)

            out, pullback = jax.vjp(call, *[full[i] for i in argnums])
            return out, pullback(cts)

        return jax.jit(go) if jit else go

    def run(f, arguments, cts):
        return runner(f, arguments)([arguments[i] for i in traced], cts)

    shapes = jax.eval_shape(lambda *values: fn(*[values[traced.index(i)] if i in traced else a
                                                 for i, a in enumerate(args)]), *[args[i] for i in traced])
    want = jax.eval_shape(lambda *values: reference(*[values[traced.index(i)] if i in traced else a
                                                      for i, a in enumerate(args)]), *[args[i] for i in traced])
    if jax.tree.structure(shapes) != jax.tree.structure(want) or any(
            (a.shape, a.dtype) != (b.shape, b.dtype) for a, b in zip(jax.tree.leaves(shapes), jax.tree.leaves(want))):
        raise ValueError(f"fn: returns {jax.tree.map(lambda x: f'{x.dtype}{list(x.shape)}', shapes)}, the reference "
                         f"{jax.tree.map(lambda x: f'{x.dtype}{list(x.shape)}', want)}")
    if cotangents is None:
        cotangents = random_cotangents(seed, shapes)
    out_k, grads_k = run(fn, args, cotangents)
    out_r, grads_r = run(reference, args, cotangents)
    floors = None
    with jax.enable_x64(True):
        wide = lambda tree: jax.tree.map(  # noqa: E731
            lambda x: jnp.asarray(np.asarray(x, np.float64)) if _is_float_array(x) else x, tree)
        args64, cts64 = wide(args), wide(cotangents)
        oracle_run = runner(reference, args64)
        values64 = [args64[i] for i in traced]
        out_o, grads_o = jax.tree.map(lambda x: np.asarray(x, np.float64), oracle_run(values64, cts64))
        if perturbation is not None:
            floors = perturbation_floors(
                lambda i: oracle_run(perturbed(values64, seed + 1 + 2 * i, perturbation),
                                     perturbed(cts64, seed + 2 + 2 * i, perturbation)),
                jax.tree.leaves((out_o, grads_o)))
        if variants:
            floors = variant_floors([runner(v, args64)(values64, cts64) for v in variants],
                                    jax.tree.leaves((out_o, grads_o)), floors)

    names = list(arg_names) if arg_names is not None else _argument_names(reference, len(args))
    if len(names) != len(args):
        raise ValueError(f"arg_names: {len(names)} names for {len(args)} arguments")
    if output_names is not None:
        out_names = list(output_names)
        if len(out_names) != len(jax.tree.leaves(out_k)):
            raise ValueError(f"output_names: {len(out_names)} names for {len(jax.tree.leaves(out_k))} outputs")
    else:
        out_names = _leaf_names("out", out_k)
    grad_names = [name for i, g in zip(argnums, grads_k) for name in _gradient_names(names[i], g)]
    kernel = jax.tree.leaves(out_k) + jax.tree.leaves(grads_k)
    ref = jax.tree.leaves(out_r) + jax.tree.leaves(grads_r)
    oracle = jax.tree.leaves(out_o) + jax.tree.leaves(grads_o)
    all_names = out_names + grad_names
    comparisons = tuple(compare_with_floor(n, k, r, None if floors is None else floors[i], o, ratio)
                        for i, (n, k, r, o) in enumerate(zip(all_names, kernel, ref, oracle)))
    arrays = {n: (np.asarray(k, np.float64), np.asarray(o, np.float64))
              for n, k, o in zip(all_names, kernel, oracle) if n in keep_arrays}
    return Report(comparisons, title, arrays)


# The perturbation floor of `check` and of chunk_gla's and chunk_kda's oracle tests: float32's machine epsilon
# ε = 2u, since a kernel's result carries a few roundings, not one (chunk_gla's per-key gate gradients at T 1:
# 1.4 ulps RMS each, before a sum over K that cancels 14-fold), and the RMS of three draws (`perturbation_floors`).
PERTURBATION = 2.0 ** -23
PERTURBATION_SAMPLES = 3


def perturbed(tree, seed: int, rel: float):
    """Every floating array of `tree` times (1 + rel·r), r uniform in [−1, 1] per element (float64, drawn on the
    host from `seed`); other leaves as they are. The oracle on such inputs, against the oracle: the error of an
    exact computation on inputs rounded at `rel`, the floor a backward-stable kernel's error sits on."""
    rng = np.random.default_rng(seed)

    def move(x):
        if not _is_float_array(x):
            return x
        values = np.asarray(x, np.float64)
        return jnp.asarray(values * (1.0 + rel * rng.uniform(-1.0, 1.0, values.shape)), dtype=x.dtype)

    return jax.tree.map(move, tree)


def perturbation_floors(moved: Callable[[int], Any], oracle: Sequence[Any], samples: int = PERTURBATION_SAMPLES):
    """Per oracle leaf, an array at the oracle plus the RMS over `samples` draws of the change `moved(i)` (the
    oracle on the i-th perturbed inputs, same tree) makes to it, times `few_elements_allowance` of the leaf's size:
    what `compare_with_floor` takes as a floor. For a single number one draw lands within half the change's
    typical size one time in three, the RMS of three one time in seven; over many elements the RMS averages."""
    oracle = [np.asarray(x, np.float64) for x in oracle]
    squares = [np.zeros_like(x) for x in oracle]
    for i in range(samples):
        for square, x, o in zip(squares, jax.tree.leaves(moved(i)), oracle):
            square += (np.asarray(x, np.float64) - o) ** 2
    return [o + np.sqrt(square / samples) * few_elements_allowance(o.size) for o, square in zip(oracle, squares)]


def variant_floors(results: Sequence[Any], oracle: Sequence[Any], floors: Sequence[Any] | None = None):
    """Per oracle leaf, `perturbation_floors`' form (an array at the oracle plus a change): each variant's result
    (same tree as the oracle's) minus the oracle, times `few_elements_allowance` of the leaf's size, joined in
    quadrature, element by element, with the change of `floors` (None: none)."""
    oracle = [np.asarray(x, np.float64) for x in oracle]
    squares = [np.zeros_like(x) if floors is None else (np.asarray(f, np.float64) - x) ** 2
               for x, f in zip(oracle, floors or oracle)]
    for result in results:
        for square, x, o in zip(squares, jax.tree.leaves(result), oracle):
            square += ((np.asarray(x, np.float64) - o) * few_elements_allowance(o.size)) ** 2
    return [o + np.sqrt(square) for o, square in zip(oracle, squares)]


def few_elements_allowance(n: int) -> float:
    """How far above its typical size a kernel's RMS error over n elements may land, when each element's error is
    a sum of roundings like the floor's change: the mean square of n such (about normal) errors varies by
    √(2/n) of itself (one standard deviation), and the allowance is its value three deviations up,
    √(1 + 3√2 / √n): 2.29 for one number, 1.24 at 64, 1.03 at 4096 (`compare_with_floor` allows the rounding
    term the same for the same reason). Without it, a float32 sum of eight cancelling products added in another
    random order than the reference's failed the floor in 21 of 800 draws, with it in 1
    (tests/test_testing.py::test_another_order_of_a_cancelling_sum_passes_the_floor_in_all_but_a_rare_draw)."""
    return _three_deviations_up(n, 3.0 * np.sqrt(2.0))


def _three_deviations_up(n: int, spread: float) -> float:
    """√(1 + spread / √n): an RMS over n elements at three standard deviations of its mean square above the mean,
    `spread` being three times the relative deviation of one element's square (2.68 for uniform roundings,
    `compare_with_floor`; 3√2 for normal errors, `few_elements_allowance`)."""
    return float(np.sqrt(1.0 + spread / np.sqrt(max(1, int(n)))))


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

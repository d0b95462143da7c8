"""One bench run: for every shape of a set, the op's Triton path, its peers, its variants and its reference,
timed on the same inputs and cotangents, each row checked against an independent result.

For every shape the harness times

    triton     the op with `implementation="triton"` under `jax.jit`;
    peers      other libraries' kernels for the same math (`--peers`, `peers.py`);
               and other checkouts of workbench (`--against DIR`, `against.py`), as peers;
    variants   other static choices of the Triton path (`triton[<name>]` rows, never a peer);
    reference  the pure-JAX reference under `jax.jit`;

in that order, so a run cut short keeps the figures that matter most. Each (shape, implementation, pass)
gets the median, min and p90 of `iters` timed samples after the warm-up calls (`timing.py`; with
`--timer copies`, of a program that runs the pass n times, per copy; with `--timer device`, the same program
timed by the span of its kernels in a profiler trace), an achieved
bandwidth from an estimate of the bytes read and written once, its fraction of the device's peak when
known, the ratio to the best peer measured in the same run, and its error against the reference's output
on the same inputs (max |Δ| and RMS relative, per output and gradient). An implementation whose
RMS-relative error exceeds `WRONG_RMS_REL[dtype]` is marked WRONG and not ranked.

An implementation is not run past its `OpBench.max_T`, nor after it runs out of device memory: both are
recorded under "skipped" with the reason. Where the reference does not run, the errors are measured
against the op's first `error_sources` entry measured at that shape; with none, rows are "unchecked".

On a CPU Triton runs in its interpreter: only the shape sets an op lists in `cpu_shape_sets` run (a smoke
test, the record marked `"interpreted": true`); others are refused (`Refused`).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import autotune, launch, testing
from .against import describe
from .against import peers as against_peers
from .machine import device_info, git_state, versions
from .peers import import_peer
from .records import Refused
from .spec import OpBench, Peer, PeerCalls
from .specs import OPS
from .timing import (TIMERS, WARMUP, device_timer_available, jax_calls, paired_device_samples, paired_samples,
                     say, time_copies_ms, time_device_ms, time_ms)

IMPLEMENTATIONS = ("triton", "reference")
WRONG_RMS_REL = {"bfloat16": 5e-2, "float16": 2e-2, "float32": 1e-3}


def run(op_name: str = "recurrent", shape_set: str = "target", *, iters: int = 20, reps: int = 1,
        implementations: Sequence[str] = IMPLEMENTATIONS, peers: bool = False, command: str = "",
        shapes: Sequence[Mapping[str, int]] | None = None, tokens: Sequence[int] | None = None,
        errors_from: str = "reference", progress: Callable[[dict[str, Any]], None] | None = None,
        variants: bool | Sequence[str] = True, timer: str = "calls", paired: int = 0,
        settle: float = 0.0, against: Sequence[str] = ()) -> dict[str, Any]:
    """Time `op_name` over a shape set (or explicit `shapes`) and return the record (not written).

    tokens: only the shapes with these sequence lengths T (a long sweep in parts; recorded).
    variants: also time the op's `variants` beside the Triton path (each compiles and autotunes anew at
      every shape: a long sweep may leave them to the target shapes; recorded); a list of names: only those.
    errors_from: "reference" (the JAX reference's outputs, computed even when it is not timed) or
      "peers" (the op's `error_sources` measured in the same run; the reference is then not run at
      all unless timed: at large shapes its XLA compile can take minutes).
    timer: "calls" (each sample `reps` calls back to back) or "copies" (each sample `reps` calls of one
      program that runs the pass n times, divided by n: the device's time where a call is too
      short to hide the host's dispatch; `timing.time_copies_ms`) or "device" (that program, each sample the
      span from its first kernel's start to its last kernel's end in a profiler trace, divided by n: without
      the host's cost of calling a program of n copies' buffers; GPU only; `timing.time_device_ms`). A
      contender that is not one JAX program (a torch peer) is timed by calls in all three; every row records
      its timer and n ("copies"), and its ratio is to the best peer timed the same way.
    paired: with timer "copies" or "device", after a shape's contenders, this many rounds that each time the kernel
      and the best peer (by median, among the peers timed as copies) once, one after the other, in an order that
      reverses every round (`timing.paired_samples`, `timing.paired_device_samples`); the kernel's row gets
      `paired`: the peer, the rounds, each one's median, and the median, min and max of the rounds' ratios. A
      ratio of two medians taken minutes apart carries the device's drift between them (a warm GPU slows); the
      paired ratio does not.
    settle: seconds each timed program runs back to back before its samples (and the paired rounds before theirs;
      `timing.settle`): a GPU at its power limit samples at the clocks sustained work holds (recorded as
      `settle_s`).
    against: folders of other checkouts of workbench, each loaded into this process and timed as the peer
      `workbench@<folder name>` (`against.py`); with `paired`, the kernel is paired with the fastest of them
      rather than with the fastest peer. The record's `against` lists each one's path and git state.
    progress: called with the record so far ("complete": False) after every timed contender, so a run
      cut short by a time limit still leaves what it measured (`workbench bench` writes it).
    """
    op = OPS[op_name] if op_name in OPS else _unknown_op(op_name)
    shapes = _shapes(op_name, op, shape_set, shapes, tokens)
    _check_options(op_name, op, shape_set, implementations, iters, reps, errors_from, timer)
    if not settle >= 0:
        raise ValueError(f"settle: seconds ≥ 0, got {settle!r}")
    if paired and (timer not in ("copies", "device") or paired < 1 or "triton" not in implementations):
        raise ValueError(f"paired: a number of rounds ≥ 1 with timer 'copies' or 'device' and 'triton' among the "
                         f"implementations; got paired={paired!r}, timer={timer!r}, "
                         f"implementations={list(implementations)}")
    bench = _Run(op_name, op, shape_set, shapes, tokens, iters, reps, implementations, errors_from, command, timer,
                 timed_variants=chosen_variants(op_name, variants) if "triton" in implementations else {},
                 paired=paired, settle=settle)
    others = against_peers(op, against)  # before the run starts: a wrong folder fails at once
    bench.against = [describe(path) for path in against]
    bench.load_peers((op.peers if peers else ()) + others)
    for i, shape in enumerate(shapes):
        inputs = op.inputs(shape, jnp.dtype(op.dtype), i)
        cotangents = testing.random_cotangents(1000 + i, jax.eval_shape(jax_calls(op, "reference", inputs, []).forward))
        reference = jax_calls(op, "reference", inputs, cotangents)
        if "reference" not in implementations and errors_from == "reference":
            bench.reference_outputs(shape, reference)  # the errors still need it
        for name, kind, make in bench.contenders(inputs, cotangents, reference):
            bench.time_contender(shape, name, kind, make)
            if progress is not None:
                progress(bench.record(complete=False))
        bench.pair_shape(shape)
        bench.finish_shape()
    return bench.record(complete=True)


def chosen_variants(op_name: str, variants: bool | Sequence[str]) -> dict[str, Mapping[str, Any]]:
    """The variants of `op_name` to time: all (True), none (False) or those named (unknown: ValueError)."""
    op = OPS[op_name]
    if isinstance(variants, bool):
        return dict(op.variants) if variants else {}
    unknown = sorted(set(variants) - set(op.variants))
    if unknown:
        raise ValueError(f"--variants: {op_name} has no variant {', '.join(map(repr, unknown))}; known: "
                         f"{', '.join(map(repr, op.variants)) or 'none'}")
    return {v: op.variants[v] for v in variants}


def output_errors(names, got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> dict[str, dict[str, float]]:
    """max |Δ| and RMS-relative error of each output (or gradient) against the one it is checked against."""
    return {n: {"max_abs": testing.max_abs(g, w), "rms_rel": testing.rms_rel(g, w)}
            for n, g, w in zip(names, got, want)}


# ----------------------------------------------------------------------------- checks of the options


def _unknown_op(op_name: str):
    raise ValueError(f"--op: unknown op {op_name!r}; known: {', '.join(OPS)}")


def _shapes(op_name, op: OpBench, shape_set, shapes, tokens):
    if shapes is None:
        if shape_set not in op.shape_sets:
            raise ValueError(f"--shapes: {op_name} has no shape set {shape_set!r}; known: {', '.join(op.shape_sets)}")
        shapes = op.shape_sets[shape_set]
    if tokens is not None:
        known = sorted({s["T"] for s in shapes})
        if not tokens or set(tokens) - set(known):
            raise ValueError(f"--T: expected sequence lengths of shape set {shape_set!r} ({', '.join(map(str, known))}), "
                             f"got {','.join(map(str, tokens))!r}")
        shapes = tuple(s for s in shapes if s["T"] in set(tokens))
    return shapes


def _check_options(op_name, op: OpBench, shape_set, implementations, iters, reps, errors_from, timer) -> None:
    unknown = set(implementations) - set(IMPLEMENTATIONS)
    if unknown or not implementations:
        raise ValueError(f"--implementations: expected a comma list of {', '.join(IMPLEMENTATIONS)}, "
                         f"got {','.join(implementations)!r}")
    if iters < 1:
        raise ValueError(f"--iters: must be ≥ 1, got {iters}")
    if reps < 1:
        raise ValueError(f"--reps: must be ≥ 1, got {reps}")
    if errors_from not in ("reference", "peers"):
        raise ValueError(f"--errors-from: expected reference or peers, got {errors_from!r}")
    if timer not in TIMERS:
        raise ValueError(f"--timer: expected {' or '.join(TIMERS)}, got {timer!r}")
    if timer == "device" and not device_timer_available():
        raise Refused("--timer device times kernels by their events on a GPU in a profiler trace, and there is no "
                      "GPU here; use --timer calls or copies")
    if launch.INTERPRET and shape_set not in op.cpu_shape_sets:
        raise Refused(f"no CUDA GPU: Triton runs in its interpreter here, where shape set {shape_set!r} of "
                      f"{op_name} would take hours and time nothing; use --shapes "
                      f"{' or '.join(op.cpu_shape_sets)} for a smoke test, or run on a GPU")
    if launch.INTERPRET:
        say("warning: Triton is interpreted on this CPU: the timings are meaningless (smoke test only)")


def _out_of_memory(exc: BaseException) -> bool:
    """XLA's RESOURCE_EXHAUSTED or torch's CUDA out-of-memory error."""
    text = f"{type(exc).__name__}: {exc}"
    return "RESOURCE_EXHAUSTED" in text or "OutOfMemory" in text or "out of memory" in text.lower()


# ----------------------------------------------------------------------------- one run's state


@dataclasses.dataclass
class _Run:
    """What a run accumulates: its peers, rows, skips, and the outputs of the current shape's contenders."""

    op_name: str
    op: OpBench
    shape_set: str
    shapes: Sequence[Mapping[str, int]]
    tokens: Sequence[int] | None
    iters: int
    reps: int
    implementations: Sequence[str]
    errors_from: str
    command: str
    timer: str
    timed_variants: Mapping[str, Mapping[str, Any]]
    warmup: int = 1 if launch.INTERPRET else WARMUP  # the interpreter neither compiles nor autotunes
    paired: int = 0
    settle: float = 0.0
    device: dict[str, Any] = dataclasses.field(default_factory=device_info)
    t_start: float = dataclasses.field(default_factory=time.perf_counter)
    peer_status: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    against: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    active_peers: list[Peer] = dataclasses.field(default_factory=list)
    used_modules: list[str] = dataclasses.field(default_factory=list)
    results: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    skipped: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    shape_rows: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    outputs_of: dict[str, dict[str, list[np.ndarray]]] = dataclasses.field(default_factory=dict)
    copies_of: dict[str, tuple[PeerCalls, dict[str, int]]] = dataclasses.field(default_factory=dict)

    def say(self, shape, name: str, text: str) -> None:
        label = " ".join(f"{n}={s}" for n, s in shape.items())
        say(f"[{time.perf_counter() - self.t_start:7.1f} s] {self.op_name} {label} {name}: {text}")

    def load_peers(self, peers: Sequence[Peer]) -> None:
        """Import each peer; record the ones that cannot run here with the reason."""
        for peer in peers:
            try:
                import_peer(peer.module)
            except ImportError as exc:
                self.peer_status.append({"peer": peer.name, "status": "not installed", "reason": str(exc)[:500]})
                continue
            except Exception as exc:  # an installed peer that cannot load (wrong jax, a missing symbol) is recorded
                self.peer_status.append({"peer": peer.name, "status": "import failed",
                                         "reason": f"{type(exc).__name__}: {exc}"[:500]})
                continue
            self.used_modules += [peer.runtime, peer.module]
            if peer.needs_cuda and self.device["platform"] != "gpu" and not (peer.interpretable and launch.INTERPRET):
                self.peer_status.append({"peer": peer.name, "status": "skipped: needs a CUDA GPU"})
                continue
            self.active_peers.append(peer)

    def skip(self, shape, name: str, reason: str) -> None:
        self.skipped.append({"shape": dict(shape), "implementation": name, "reason": reason})
        self.say(shape, name, f"skipped ({reason})")

    def reference_outputs(self, shape, reference: PeerCalls) -> None:
        """The reference's outputs and gradients, for the errors, when it is not timed."""
        reason = self.op.skip_reason("reference", shape)
        if reason is not None:
            self.skip(shape, "reference", reason)
            return
        try:
            fb = reference.to_numpy(reference.forward_backward())
        except Exception as exc:
            if not _out_of_memory(exc):
                raise
            self.skip(shape, "reference", f"out of memory: {type(exc).__name__}: {exc}"[:500])
            return
        self.outputs_of["reference"] = {"forward": fb[:len(self.op.outputs)], "forward_backward": fb}

    def contenders(self, inputs, cotangents, reference: PeerCalls) -> list[tuple[str, str, Callable[[], PeerCalls]]]:
        """(name, kind, make the calls): the kernel, then the peers (the ratios need both), then its variants,
        the reference last."""
        op = self.op
        out: list[tuple[str, str, Callable[[], PeerCalls]]] = []
        if "triton" in self.implementations:
            out.append(("triton", "kernel", lambda: jax_calls(op, "triton", inputs, cotangents)))
        out += [(p.name, "peer", lambda p=p: p.setup(inputs, cotangents)) for p in self.active_peers]
        out += [(f"triton[{v}]", "kernel", lambda opts=opts: jax_calls(op, "triton", inputs, cotangents, **opts))
                for v, opts in self.timed_variants.items()]
        if "reference" in self.implementations:
            out.append(("reference", "kernel", lambda: reference))
        return out

    def time_contender(self, shape, name: str, kind: str, make: Callable[[], PeerCalls]) -> None:
        """Time one contender's forward and forward+backward at `shape`; a peer's failure and running out of
        memory are recorded, anything else raises."""
        reason = self.op.skip_reason(name, shape)
        if reason is not None:
            self.skip(shape, name, reason)
            return
        try:
            calls = make()
            (fwd_ms, fwd_out, fwd_n), (fb_ms, fb_out, fb_n) = (self.time_pass(calls, p)
                                                               for p in ("forward", "forward_backward"))
        except Exception as exc:
            if kind == "peer":
                self.peer_status.append({"peer": name, "status": f"failed: {type(exc).__name__}: {exc}"[:500]})
                self.say(shape, name, f"failed ({exc})")
                return
            if not _out_of_memory(exc):
                raise
            self.skip(shape, name, f"out of memory: {type(exc).__name__}: {exc}"[:500])
            return
        got = {"forward": calls.to_numpy(fwd_out), "forward_backward": calls.to_numpy(fb_out)}
        self.outputs_of[name] = got
        if self.paired and fwd_n is not None and (name == "triton" or kind == "peer"):
            self.copies_of[name] = (calls, {"forward": fwd_n, "forward_backward": fb_n})
        fwd_bytes, fwd_bwd_bytes = self.op.bytes(shape, jnp.dtype(self.op.dtype))
        flops = self.op.flops(shape) if self.op.flops is not None else (None, None)
        kept = calls.kept() if calls.kept is not None else None
        for pass_, ms, n, nbytes, nflops in (("forward", fwd_ms, fwd_n, fwd_bytes, flops[0]),
                                             ("forward_backward", fb_ms, fb_n, fwd_bwd_bytes, flops[1])):
            self.shape_rows.append({"shape": dict(shape), "implementation": name, "kind": kind, "pass": pass_,
                                    "ms": ms, "timer": "calls" if n is None else self.timer, "copies": n,
                                    "bytes": nbytes, "flops": nflops, "_got": got[pass_]})
            if pass_ == "forward_backward" and kept is not None:  # what the forward keeps for the backward
                self.shape_rows[-1].update(residual_bytes=kept[0], residual_ratio=kept[0] / kept[1])
        if kind == "peer" and not any(p["peer"] == name for p in self.peer_status):
            self.peer_status.append({"peer": name, "status": "measured"})
        self.say(shape, name, f"forward {fwd_ms['median']:.3f} ms, forward+backward {fb_ms['median']:.3f} ms")

    def time_pass(self, calls: PeerCalls, pass_: str):
        """(ms, last result, copies in the timed program or None when timed by calls) of one pass."""
        plain = getattr(calls, pass_)
        if self.timer == "copies" and calls.copies is not None:
            return time_copies_ms(lambda n: calls.copies(pass_, n), plain, calls.block, self.iters, self.warmup,
                                   self.reps, self.settle)
        if self.timer == "device" and calls.copies is not None:
            return time_device_ms(lambda n: calls.copies(pass_, n), plain, calls.block, self.iters, self.warmup,
                                  self.settle)
        return (*time_ms(plain, calls.block, self.iters, self.warmup, self.reps, self.settle), None)

    def pair_shape(self, shape) -> None:
        """`paired` rounds of the kernel and the best peer timed as copies, per pass (see `run`)."""
        kernel = self.copies_of.pop("triton", None)
        for pass_ in ("forward", "forward_backward") if kernel is not None else ():
            peers = [r for r in self.shape_rows if r["pass"] == pass_ and r["implementation"] in self.copies_of]
            others = {a["name"] for a in self.against}
            peers = [r for r in peers if r["implementation"] in others] or peers  # --against: those first
            if not peers:
                continue
            peer = min(peers, key=lambda r: r["ms"]["median"])["implementation"]
            calls, copies = self.copies_of[peer]
            programs = [kernel[0].copies(pass_, kernel[1][pass_]), calls.copies(pass_, copies[pass_])]
            pair = paired_device_samples if self.timer == "device" else paired_samples
            ours, theirs = pair(programs, calls.block, self.paired, self.settle)
            ratios = sorted(a / b for a, b in zip(ours, theirs))
            row = next(r for r in self.shape_rows if r["pass"] == pass_ and r["implementation"] == "triton")
            row["paired"] = {"peer": peer, "rounds": self.paired, "ms": statistics.median(ours),
                             "peer_ms": statistics.median(theirs), "ratio": statistics.median(ratios),
                             "ratio_min": ratios[0], "ratio_max": ratios[-1]}
            self.say(shape, "triton", f"{pass_} paired with {peer} over {self.paired} rounds: "
                                      f"ratio {row['paired']['ratio']:.3f} ({ratios[0]:.3f}-{ratios[-1]:.3f})")
        self.copies_of = {}

    def finish_shape(self) -> None:
        self.results += _finish(self.shape_rows, self.outputs_of, self.errors_from, self.op,
                                WRONG_RMS_REL[self.op.dtype], self.device)
        self.shape_rows, self.outputs_of = [], {}

    def record(self, complete: bool) -> dict[str, Any]:
        rows = self.results
        if not complete:  # the shape in progress too
            rows = rows + _finish(self.shape_rows, self.outputs_of, self.errors_from, self.op,
                                  WRONG_RMS_REL[self.op.dtype], self.device)
        op = self.op
        return {
            "op": self.op_name, "harness": "workbench.bench", "command": self.command, "interpreted": launch.INTERPRET,
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "device": self.device,
            "versions": versions(sorted(set(self.used_modules))), "git": git_state(),
            # how the kernels' configs were chosen: WORKBENCH_AUTOTUNE, what autotune did in this process, and
            # each autotuned kernel's config by key (where it came from: table, tuned, disk, ...)
            "autotune": autotune_summary(autotune.__name__),
            "shape_set": self.shape_set, "shapes": [dict(s) for s in self.shapes],
            "tokens": None if self.tokens is None else list(self.tokens),
            "dtype": op.dtype, "iters": self.iters, "reps": self.reps, "timer": self.timer, "paired": self.paired,
            "settle_s": self.settle, "warmup": self.warmup, "implementations": list(self.implementations),
            "wrong_rms_rel": WRONG_RMS_REL[op.dtype], "variants": list(self.timed_variants),
            "peers": self.peer_status,
            # each other checkout with its own autotune's choices: a kernel of it that missed the table shows here
            "against": [{**a, "autotune": autotune_summary(a["module"] + ".autotune")} for a in self.against],
            "limits": {n: {"max_T": t, "why": why} for n, (t, why) in op.max_T.items()},
            "error_sources": list(op.error_sources), "errors_from": self.errors_from, "skipped": self.skipped,
            **op.notes, "results": rows, "seconds": time.perf_counter() - self.t_start, "complete": complete,
        }


def autotune_summary(name: str) -> dict[str, Any] | None:
    """What a workbench package's `autotune` module (by its import name) did in this process: WORKBENCH_AUTOTUNE,
    its counters, and each autotuned kernel's config by key with where it came from (table, tuned, disk, ...);
    None for a package whose autotune keeps none of these (an old checkout timed with `--against`)."""
    try:
        module = importlib.import_module(name)
    except ImportError:
        return None
    if not all(hasattr(module, n) for n in ("mode", "STATS", "CHOSEN")):
        return None
    return {"mode": module.mode(), "stats": dict(module.STATS),
            "chosen": sorted(module.CHOSEN.values(), key=lambda c: json.dumps(c, sort_keys=True))}


def _finish(shape_rows, outputs_of, errors_from, op, bound, device):
    """The rows of one shape with errors, status, rates and ratios (copies; `shape_rows` kept)."""
    sources = op.error_sources if errors_from == "peers" else ("reference", *op.error_sources)
    source = next((n for n in sources if n in outputs_of), None)
    done = []
    for row in shape_rows:
        row = dict(row)
        got = row.pop("_got")
        row["error_source"] = source
        if source is None:
            row["errors"], row["status"] = {}, "unchecked"
        else:
            row["errors"] = output_errors(op.names[:len(got)], got, outputs_of[source][row["pass"]])
            worst = max((e["rms_rel"] for e in row["errors"].values()), default=0.0)
            row["status"] = "WRONG" if not worst <= bound else "ok"  # NaN is WRONG too
        seconds = row["ms"]["median"] / 1e3
        row["gb_per_s"] = row["bytes"] / seconds / 1e9
        row["tflops_per_s"] = row["flops"] / seconds / 1e12 if row["flops"] else None
        peak = device["peak_bytes_per_s"]
        row["fraction_of_peak"] = row["bytes"] / seconds / peak if peak else None
        done.append(row)
    for pass_ in ("forward", "forward_backward"):
        rows = [r for r in done if r["pass"] == pass_]
        best = {}  # per timer: a row's ratio is to the best peer timed the same way
        for p in rows:
            if p["kind"] == "peer" and p["status"] == "ok":
                best[p["timer"]] = min(best.get(p["timer"], math.inf), p["ms"]["median"])
        for r in rows:
            b = best.get(r["timer"])
            r["ratio_to_best_peer"] = (r["ms"]["median"] / b if b and r["status"] == "ok" else None)
    return done

"""`workbench bench`: forward and forward+backward timings of each op, appended to `data/bench/`.

A run (`run`, harness.py) times, for every shape of a named shape set and on the same random inputs and
random cotangents (one for every output, final states included), the op's Triton path, its peers (other
libraries' kernels for the same math, peers.py), its variants and its pure-JAX reference, and checks every
row's outputs and gradients against an independent one. Each run writes ONE new file
`<out>/<op>-<UTC timestamp>.json` (records.py), never overwriting one; its keys: `op, harness, command,
interpreted, date, device {name, kind, platform, driver, peak_bytes_per_s}, versions, git {commit, dirty},
autotune {mode, stats, chosen [{kernel, key, config, source}]: each autotuned kernel's config and its origin},
shape_set, shapes, tokens (the --T filter or None), dtype, iters, reps, timer, paired (rounds; 0: none),
settle_s (seconds of calls before each program's samples), implementations, peers [{peer, status, reason?}],
against [{path, name, module, git, autotune}] (`--against`; autotune as above, of that checkout),
limits {name: {max_T, why}}, error_sources, skipped [{shape, implementation, reason}], results`;
each result has `shape, implementation, kind, pass, ms {median, min, p90}, timer, copies, bytes, gb_per_s,
fraction_of_peak, flops, tflops_per_s (attention; None elsewhere), ratio_to_best_peer, error_source, errors
{name: {max_abs, rms_rel}}, status` (ok | WRONG | unchecked), and on the kernel's rows with --paired
`paired {peer, rounds, ms, peer_ms, ratio, ratio_min, ratio_max}`.

The package, one job per module:

    spec.py        OpBench, Peer, PeerCalls: what bench knows of an op and of a peer
    specs.py       one OpBench per op (shape sets, inputs, call, bytes, FLOPs, peers, variants, limits): OPS
    peers.py       the peer adapters (flash-linear-attention, ejkernel, cuDNN/XLA attention), each once
    against.py     `--against DIR`: another checkout of workbench loaded into the run as a peer
    timing.py      timing a call on the device; the op's jitted forward and forward+backward
    machine.py     the device, versions and git state a record carries
    harness.py     one run: contenders, timings, errors, ratios
    first_call.py  `--first-call`: wall seconds of a fresh process to its first result, cold then cached
    ring.py        `--op ring_attention`: the ring's weak scaling over the visible devices
    data_parallel.py  `--data-parallel`: an op with its batch over every device, against one device's share
    tune.py        `workbench tune --write-table`: the GPU's choices into the shipped tuning table
    records.py     record files: names claimed, partial records, append-only writes
    table.py       the printed tables

Adding an op: write its input factory, call and byte estimate in specs.py, its peers in peers.py, and add
its `OpBench` to `OPS`.
"""

from .first_call import FIRST_CALL_GOAL, FIRST_CALL_OUT, first_call, first_call_child
from .harness import IMPLEMENTATIONS, WRONG_RMS_REL, chosen_variants, output_errors, run
from .machine import PEAK_BYTES_PER_S, device_info, git_state, versions
from .records import DEFAULT_OUT, Refused, claim_stamp, release_stamp, stamp_now, write, write_partial
from .spec import OpBench, Peer, PeerCalls
from .specs import OPS
from .table import first_call_table, table
from .timing import TIMERS, WARMUP, device_events, jax_calls, time_copies_ms, time_device_ms, time_ms

__all__ = ["DEFAULT_OUT", "FIRST_CALL_GOAL", "FIRST_CALL_OUT", "IMPLEMENTATIONS", "OPS", "PEAK_BYTES_PER_S", "WARMUP",
           "WRONG_RMS_REL", "OpBench", "Peer", "PeerCalls", "Refused", "TIMERS", "chosen_variants", "claim_stamp",
           "device_events", "device_info", "first_call", "first_call_child", "first_call_table", "git_state",
           "jax_calls", "output_errors", "release_stamp", "run", "stamp_now", "table", "time_copies_ms",
           "time_device_ms", "time_ms", "versions", "write", "write_partial"]

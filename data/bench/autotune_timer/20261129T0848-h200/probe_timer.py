"""Probe: the autotuner's timer on long kernels. For every config it times, also: host ms of one eager launch
(not waited for), and the same call jitted once (chained n=1 and n=4). Then runs `workbench tune` as given."""
import sys, time, math
import workbench  # noqa
import jax
from workbench import device_time, cli

orig = device_time.time_on_device
def probe(run, inputs):
    eager = orig(run, inputs)
    t0 = time.perf_counter(); out = run(inputs); host = (time.perf_counter() - t0) * 1e3; jax.block_until_ready(out)
    res = {}
    for n in (1, 4):
        prog, arrays = device_time.chained(run, inputs, n)
        jax.block_until_ready(prog(arrays))
        best = math.inf
        for _ in range(5):
            t0 = time.perf_counter(); jax.block_until_ready(prog(arrays)); best = min(best, (time.perf_counter() - t0) * 1e3 / n)
        res[n] = best
    print(f"PROBE eager {eager:.3f} ms  host-per-launch {host:.3f} ms  jit n=1 {res[1]:.3f}  jit n=4 {res[4]:.3f}", flush=True)
    return eager
device_time.time_on_device = probe
sys.exit(cli.main(sys.argv[1:]))

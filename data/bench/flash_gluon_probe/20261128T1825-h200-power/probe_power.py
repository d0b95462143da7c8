"""Issue 47: do the Gluon forward and cuDNN run at the same clock? Each (implementation, mask, pass) runs for
DUR seconds back to back (a jitted program of 8 copies, as `--timer copies` does) while `nvidia-smi` samples the
SM clock, the power drawn, the temperature and the clock-event reasons every 50 ms; the script prints one JSON line
per run: ms per copy (median), the median SM clock over the run's samples after its first half second, the mean
power, the reasons seen (hex bitmask: 0x4 software power cap, 0x20 software thermal, 0x40 hardware thermal,
0x80 hardware power brake), and ms × MHz (thousands of cycles a call at that clock). Two rounds, the order of the
implementations reversed in the second."""
import json, statistics, subprocess, sys, threading, time
import jax, jax.numpy as jnp
import workbench

DUR, N = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0, 8
samples = []


def sample():
    p = subprocess.Popen(["nvidia-smi", "--id=0", "--query-gpu=clocks.sm,power.draw,temperature.gpu,"
                          "clocks_event_reasons.active", "--format=csv,noheader,nounits", "-lms", "50"],
                         stdout=subprocess.PIPE, text=True)
    for line in p.stdout:
        try:
            mhz, watts, temp, reasons = (x.strip() for x in line.split(","))
            samples.append((time.time(), float(mhz), float(watts), float(temp), int(reasons, 16)))
        except ValueError:
            pass


threading.Thread(target=sample, daemon=True).start()
B, T, H, D = 4, 4096, 16, 128
ks = jax.random.split(jax.random.key(0), 4)
q, k, v, do = (jax.random.normal(kk, (B, T, H, D), jnp.bfloat16) for kk in ks)
impls = {"workbench": lambda q, k, v, c: workbench.flash_attention(q, k, v, causal=c),
         "cudnn": lambda q, k, v, c: jax.nn.dot_product_attention(q, k, v, is_causal=c, implementation="cudnn")}


def program(f, causal, backward):
    def one(q, k, v, do):
        if not backward:
            return f(q, k, v, causal)
        o, pull = jax.vjp(lambda *a: f(*a, causal), q, k, v)
        return o, pull(do)
    return jax.jit(lambda copies: [one(*c) for c in copies])


copies = [jax.tree.map(jnp.copy, (q, k, v, do)) for _ in range(N)]
print(json.dumps({"jax": jax.__version__, "device": jax.devices()[0].device_kind}), flush=True)
for rnd in range(2):
    for causal in (False, True):
        for backward in (False, True):
            order = list(impls) if rnd == 0 else list(impls)[::-1]
            for name in order:
                prog = program(impls[name], causal, backward)
                jax.block_until_ready(prog(copies))
                times, t_start = [], time.time()
                while time.time() - t_start < DUR:
                    t0 = time.perf_counter(); jax.block_until_ready(prog(copies))
                    times.append((time.perf_counter() - t0) * 1e3 / N)
                t_end = time.time()
                win = [s for s in samples if t_start + 0.5 <= s[0] <= t_end]
                ms = statistics.median(times[len(times) // 4:])
                mhz = statistics.median(s[1] for s in win) if win else None
                reasons = 0
                for s in win:
                    reasons |= s[4]
                print(json.dumps(dict(round=rnd, impl=name, causal=causal, backward=backward, ms=round(ms, 4),
                                      calls=len(times), samples=len(win), mhz=mhz,
                                      mhz_range=[min(s[1] for s in win), max(s[1] for s in win)] if win else None,
                                      watts=round(statistics.mean(s[2] for s in win), 1) if win else None,
                                      temp=max(s[3] for s in win) if win else None, reasons=hex(reasons),
                                      kcycles=round(ms * mhz, 1) if mhz else None)), flush=True)

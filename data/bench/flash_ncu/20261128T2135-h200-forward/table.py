import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr = rows[0]; data = [r for r in rows[2:] if r and r[0].isdigit()]
def col(name):
    return hdr.index(name) if name in hdr else None
want = {"µs": "gpu__time_duration.sum", "tensor%": "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
        "issue%": "smsp__issue_active.avg.pct_of_peak_sustained_active", "warps%": "sm__warps_active.avg.pct_of_peak_sustained_active",
        "dram%": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "DRAM GB": "dram__bytes.sum",
        "SMclk MHz": "sm__cycles_elapsed.avg.per_second", "cycles": "sm__cycles_elapsed.max",
        "regs": "launch__registers_per_thread", "grid": "launch__grid_size", "threads": "launch__block_size"}
for r in ("barrier", "long_scoreboard", "mio_throttle", "short_scoreboard", "wait", "math_pipe_throttle", "dispatch_stall", "no_instruction", "lg_throttle", "membar", "sleeping", "branch_resolving", "selected", "not_selected"):
    want[r] = f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio"
idx = {k: col(v) for k, v in want.items()}
missing = [k for k, v in idx.items() if v is None]
print("missing:", missing)
name_c = hdr.index("Kernel Name")
print("| kernel | " + " | ".join(k for k in want if idx[k] is not None) + " |")
for r in data:
    vals = []
    for k in want:
        if idx[k] is None: continue
        v = r[idx[k]].replace(",", "")
        try:
            x = float(v)
            if k == "µs": x = x / 1000 if hdr and rows[1][idx[k]] == "nsecond" else x
            if k == "DRAM GB": x = x / (1e9 if rows[1][idx[k]] == "byte" else 1e3 if rows[1][idx[k]] == "Mbyte" else 1)
            vals.append(f"{x:.4g}")
        except ValueError: vals.append(v)
    print(f"| {r[name_c][:45]} | " + " | ".join(vals) + " |")
print("units:", {k: rows[1][idx[k]] for k in want if idx[k] is not None})

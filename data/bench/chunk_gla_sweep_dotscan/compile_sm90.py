"""Compile the three sweeps for sm_90 at two configs each, for bf16, f16 and f32 inputs at K = V = 64."""
import sys; sys.path.insert(0, ".")  # run from the repository root
import workbench  # noqa
import jax, jax.numpy as jnp
from workbench import compile_check, bench
op = bench.OPS["chunk_gla"]
specs_all = []
for dtype in ("bfloat16", "float16", "float32"):
    for shape in (dict(B=8, T=4096, H=16, K=64, V=64), dict(B=1, T=65536, H=16, K=64, V=64)):
        with compile_check.record(all_configs=True) as specs:
            op.trace(shape, dtype)
        specs_all += [s for s in specs if s["kernel"] in ("chunk_h_kernel", "chunk_dh_kernel", "chunk_segment_sweep_kernel")
                      and (s["constexprs"]["BK"], s["constexprs"]["BV"], s["num_warps"], s["num_stages"]) in ((32, 64, 4, 2), (64, 64, 8, 2))]
d = compile_check.distinct(specs_all)
print(len(d), "distinct", flush=True)
res = compile_check.compile_all(d, last="resources", workers=1)
print("failed", res["failed"][:3] if res["failed"] else 0)
for r in res["resources"]:
    s, x = r["spec"], r["resources"]
    print(s["kernel"][:22], s["signature"].get("gk", s["signature"].get("x")), s["constexprs"].get("REVERSE"), {k: s["constexprs"].get(k) for k in ("BK", "BV")}, s["num_warps"], s["num_stages"], "regs", x["registers"], "stack", x["stack"], "BAR", x["BAR"], "HMMA", x["HMMA"], "HGMMA", x["HGMMA"])

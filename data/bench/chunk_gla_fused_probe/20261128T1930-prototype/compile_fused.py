"""On a CPU (sm_90): the prototype's launches at the target (B8 T4096 H16 K=V=64 bf16, one sweep) and B1 T64k
(16 segments) compiled for Hopper, BV 64 / 32 and 4 / 8 warps: registers, spills, mma kind. Run from the repo root
with this folder on PYTHONPATH."""
import json, os, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workbench  # first: Triton's interpreter where there is no GPU
import jax, jax.numpy as jnp
from workbench import compile_check
import probe_fused

shape = lambda *s, dt=jnp.bfloat16: jax.ShapeDtypeStruct(s, dt)  # noqa: E731
specs = []
for (B, T), nseg in (((8, 4096), 1), ((1, 65536), 16)):
    args = [shape(B, T, 16, 64)] * 4
    for BV, w in ((64, 4), (32, 4), (64, 8)):
        with compile_check.record() as s:
            jax.eval_shape(lambda *x: probe_fused.fused_forward(*x, BV=BV, warps=w, nseg=nseg), *args)
        specs += [x for x in s if x["module"] == "fused_kernels"]
sass_dir = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()
r = compile_check.compile_all(specs, last="resources", sass_dir=sass_dir)
for f in r["failed"]:
    print(compile_check.describe(f)[-2000:])
for row in r["resources"]:
    res = row["resources"]
    print(json.dumps(dict(kernel=row["spec"]["kernel"], BV=row["spec"]["constexprs"]["BV"],
                          warps=row["spec"]["num_warps"],
                          **{k: res.get(k) for k in ("registers", "stack", "LDL", "STL", "HMMA", "HGMMA", "shared")})))

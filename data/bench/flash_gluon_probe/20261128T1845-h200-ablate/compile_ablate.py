"""On a CPU (Triton 3.9, sm_90): `gluon_kernels_ablate.py` compiled plain at D 128 with ABLATE 0 and 1: registers,
spills, barriers. Run from the repo root with this folder on PYTHONPATH."""
import json, os, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.getcwd())
import jax.numpy as jnp
from tests.flash_attention.test_gluon import _recorded
from workbench import compile_check, testing

x = testing.attention_inputs(0, 2, 1000, 1000, 8, 2, 128, dtype=jnp.bfloat16)
specs = [dict(s, module="gluon_kernels_ablate") for s in _recorded(x, causal=False) if not s["constexprs"]["KEEP_F32"]]
specs = [dict(s, constexprs=dict(s["constexprs"], ABLATE=a)) for s in specs for a in (0, 1)]
r = compile_check.compile_all(specs, last="resources", sass_dir=sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp())
for f in r["failed"]:
    print(compile_check.describe(f)[-1500:])
for row in r["resources"]:
    res = row["resources"]
    print(json.dumps(dict(ABLATE=row["spec"]["constexprs"]["ABLATE"], **{k: res.get(k) for k in ("registers", "stack", "LDL", "STL", "BAR")})))

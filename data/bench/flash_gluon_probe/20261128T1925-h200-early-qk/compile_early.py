"""On a CPU (Triton 3.9, sm_90): `gluon_kernels_early.py` compiled as the op launches it (plain only, D 128 and 64,
with and without the float32 copy): registers, spills, barriers, shared memory. Run from the repo root with this
folder on PYTHONPATH."""
import json, os, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.getcwd())
import jax.numpy as jnp
from tests.flash_attention.test_gluon import _recorded
from workbench import compile_check, testing

for D in (128, 64):
    for causal in (False,):
        x = testing.attention_inputs(0, 2, 1000, 1000, 8, 2, D, dtype=jnp.bfloat16)
        specs = [dict(s, module="gluon_kernels_early") for s in _recorded(x, causal=causal)]
        r = compile_check.compile_all(specs, last="resources",
                                      sass_dir=sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp())
        for f in r["failed"]:
            print(compile_check.describe(f)[-1500:])
        for row in r["resources"]:
            res = row["resources"]
            print(json.dumps(dict(D=D, causal=causal, keep_f32=row["spec"]["constexprs"]["KEEP_F32"],
                                  **{k: res.get(k) for k in ("registers", "stack", "LDL", "STL", "BAR", "shared")})))

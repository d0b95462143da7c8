# For a device call (carry .devcache with the slim Triton 3.9 and its env.sh): the fused prototype against the
# op's forward at the target and B1 T4k-64k (~2-4 minutes with autotuning and compiles).
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/fused
P=data/bench/chunk_gla_fused_probe/20261128T1930-prototype
WORKBENCH_AUTOTUNE=table timeout 230 python3 $P/probe_fused.py time > $OUT/fused/fused.jsonl 2> $OUT/fused/fused.err
echo "fused exit $?"; cat $OUT/fused/fused.jsonl; grep -iE "error" $OUT/fused/fused.err | grep -v nanobind | head -5

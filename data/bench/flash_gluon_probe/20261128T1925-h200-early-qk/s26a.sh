# Call 1 of the 26th session (carry .devcache; tree = main): issue 47's prepared probes — free-ends and early-q kᵀ
# kernels against main (plain), the forward after cuDNN's kernel, then free-ends at the causal target. ~7-8 min.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
bash data/bench/flash_gluon_probe/20261128T1925-h200-early-qk/run_next.sh
. .devcache/env.sh
WORKBENCH_AUTOTUNE=table timeout 150 python3 data/bench/flash_gluon_probe/20261128T1905-h200-free-ends/probe_free.py > $OUT/next/free.jsonl 2> $OUT/next/free.err
echo "free exit $?"; cat $OUT/next/free.jsonl; grep -iE "error" $OUT/next/free.err | grep -v nanobind | head -5

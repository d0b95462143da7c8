# For the next session's first device call (carry .devcache with the slim Triton 3.9 and its env.sh): the free-ends
# and early-q kᵀ kernels against main (plain), then the after-another-kernel probe. ~4-5 minutes with compiles.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/next
P=data/bench/flash_gluon_probe
WORKBENCH_AUTOTUNE=table timeout 220 python3 $P/20261128T1925-h200-early-qk/probe_early.py > $OUT/next/early.jsonl 2> $OUT/next/early.err
echo "early exit $?"; cat $OUT/next/early.jsonl; grep -iE "error" $OUT/next/early.err | grep -v nanobind | head -5
WORKBENCH_AUTOTUNE=table timeout 100 python3 $P/20261128T1915-h200-after-another/probe_after.py > $OUT/next/after.jsonl 2> $OUT/next/after.err
echo "after exit $?"; cat $OUT/next/after.jsonl; grep -iE "error" $OUT/next/after.err | grep -v nanobind | head -5

# Call 3 of the 25th session (carry .devcache; tree = branch fwd-fence): the fence probe, the Gluon forward GPU
# tests on the branch, the sustained power probe (both implementations, fwd only) and the target bench.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/fence
P=data/bench/flash_gluon_probe/20261128T1900-h200-fence
WORKBENCH_AUTOTUNE=table timeout 200 python3 $P/probe_fence.py > $OUT/fence/fence.jsonl 2> $OUT/fence/fence.err
echo "probe exit $?"; cat $OUT/fence/fence.jsonl; grep -iE "error" $OUT/fence/fence.err | grep -v nanobind | head -5
WORKBENCH_AUTOTUNE=off timeout -s INT 170 python3 -m pytest -p no:cacheprovider -m gpu -n 6 tests/flash_attention/test_gpu.py \
    -k "gluon_forward or default_forward or target" -rA > $OUT/fence/fwd_tests.log 2>&1; echo "tests exit $?"
pkill -f pytest
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/fence/fwd_tests.log | sed 's/tests.*test_gpu.py:://' | tail -15

# Call 4 of the 24th session (carry .devcache; tree = main after the merge of gluon-fwd-causal-sched): synccheck over
# the merged forward at shapes with more blocks than programs, then the whole flash GPU test file.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/d
P=data/bench/flash_gluon_probe/20261128T1630-h200-pipelined
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout 80 compute-sanitizer --tool synccheck --print-limit 20 python3 $P/check_fwd.py > $OUT/d/synccheck.log 2>&1; echo "synccheck exit $?"
grep -E "max\||ERROR SUMMARY|Error" $OUT/d/synccheck.log | head -8
WORKBENCH_AUTOTUNE=off timeout -s INT 240 python3 -m pytest -p no:cacheprovider -m gpu -n 8 tests/flash_attention/test_gpu.py \
    -rA > $OUT/d/flash_gpu.log 2>&1; echo "tests exit $?"
pkill -f pytest
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/d/flash_gpu.log | sed 's/tests.*test_gpu.py:://' | tail -40

# Call 2 of the 24th session (carry .devcache; tree = branch gluon-fwd-pipelined): probe against the counter-scheduled
# kernel, the Gluon-forward GPU tests, then racecheck and synccheck of the forward alone.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/b
P=data/bench/flash_gluon_probe/next-pipelined
WORKBENCH_AUTOTUNE=table timeout 200 python3 $P/probe_pipelined.py > $OUT/b/pipelined.jsonl 2> $OUT/b/pipelined.err; echo "probe exit $?"
cut -c1-420 $OUT/b/pipelined.jsonl; grep -iE "error" $OUT/b/pipelined.err | head -5
WORKBENCH_AUTOTUNE=off timeout -s INT 130 python3 -m pytest -p no:cacheprovider -m gpu -n 6 tests/flash_attention/test_gpu.py \
    -k "gluon_forward or default_forward or target" -rA > $OUT/b/fwd_tests.log 2>&1; echo "tests exit $?"
pkill -f pytest
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/b/fwd_tests.log | sed 's/tests.*test_gpu.py:://' | tail -14
export XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off
timeout 120 compute-sanitizer --tool racecheck --racecheck-report hazard --print-limit 20 python3 $P/check_fwd.py > $OUT/b/racecheck.log 2>&1; echo "racecheck exit $?"
grep -E "max\||ERROR SUMMARY|RACECHECK SUMMARY|Error|hazard" $OUT/b/racecheck.log | head -12
timeout 90 compute-sanitizer --tool synccheck --print-limit 20 python3 $P/check_fwd.py > $OUT/b/synccheck.log 2>&1; echo "synccheck exit $?"
grep -E "max\||ERROR SUMMARY|Error" $OUT/b/synccheck.log | head -8

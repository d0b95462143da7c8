# Call 5 of the 25th session (carry .devcache; tree = branch fwd-tma-store): the TMA-store probe, the Gluon forward
# GPU tests on the branch, synccheck.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/ts
P=data/bench/flash_gluon_probe/20261128T1900-h200-tma-store
WORKBENCH_AUTOTUNE=table timeout 200 python3 $P/probe_tma_store.py > $OUT/ts/tma_store.jsonl 2> $OUT/ts/tma_store.err
echo "probe exit $?"; cat $OUT/ts/tma_store.jsonl; grep -iE "error" $OUT/ts/tma_store.err | grep -v nanobind | head -5
WORKBENCH_AUTOTUNE=off timeout -s INT 170 python3 -m pytest -p no:cacheprovider -m gpu -n 6 tests/flash_attention/test_gpu.py \
    -k "gluon_forward or default_forward or target" -rA > $OUT/ts/fwd_tests.log 2>&1; echo "tests exit $?"
pkill -f pytest
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/ts/fwd_tests.log | sed 's/tests.*test_gpu.py:://' | tail -15
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout 90 compute-sanitizer --tool synccheck --print-limit 20 python3 $P/check_fwd.py > $OUT/ts/synccheck.log 2>&1; echo "synccheck exit $?"
grep -E "max\||ERROR SUMMARY|Error" $OUT/ts/synccheck.log | head -8

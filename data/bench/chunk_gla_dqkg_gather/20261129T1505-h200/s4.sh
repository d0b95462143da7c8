# call 4: the one chunk_gla GPU test the first call's limit cut off, alone
source .devcache/env.sh
t0=$(date +%s)
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT ${TEST_S:-400} python3 -m pytest -q -rA -s -p no:cacheprovider -m gpu "tests/chunk_gla/test_gpu.py::test_compiled_target_rows_bf16_within_budget" > $OUT/test_rows.log 2>&1
echo "test rc $? $(( $(date +%s) - t0 )) s"
grep -E "PASSED|FAILED|passed|failed|rms|Error" $OUT/test_rows.log | head -30

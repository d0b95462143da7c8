# call D: the target-rows GPU test with the reference on the host, and the other GPU tests that run chunk_gla
source .devcache/env.sh
t0=$(date +%s)
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 240 python3 -m pytest -q -rA -s -p no:cacheprovider -m gpu tests/chunk_gla/test_gpu.py -k test_compiled_target_rows_bf16_within_budget --durations=5 > $OUT/target_rows.log 2>&1
echo "target rows rc $? $(( $(date +%s) - t0 )) s" | tee -a $OUT/walls.txt
grep -E "PASS|FAIL|passed|failed|slowest|s call" $OUT/target_rows.log | head -20
t0=$(date +%s)
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 240 python3 -m pytest -q -rA -p no:cacheprovider -m gpu -n 4 tests/test_bounds.py tests/test_bench.py > $OUT/other_gpu.log 2>&1
echo "other gpu tests rc $? $(( $(date +%s) - t0 )) s" | tee -a $OUT/walls.txt
tail -8 $OUT/other_gpu.log

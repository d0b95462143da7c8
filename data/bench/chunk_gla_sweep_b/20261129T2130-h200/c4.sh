# call 4: b's accuracy per config on the GPU; the two f32 tests that failed, with the old first config
set -x
source .devcache/env.sh
timeout -s INT 120 python3 .devcache/diag_b.py > $OUT/diag_b.jsonl 2> $OUT/diag_b.err
echo "diag rc $?" >> $OUT/walls.txt
sed -i 's/for bk, bv, w, st in ((32, 64, 4, 1), (32, 64, 4, 2), (16, 64, 4, 3), (64, 64, 8, 2), (64, 32, 4, 2),/for bk, bv, w, st in ((64, 32, 4, 2), (32, 64, 4, 2), (16, 64, 4, 3), (64, 64, 8, 2), (32, 64, 4, 1),/' workbench/chunk_gla/kernels.py
grep -n "for bk, bv, w, st" workbench/chunk_gla/kernels.py
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 150 python3 -m pytest -q -rA -p no:cacheprovider -m gpu -n 4 tests/chunk_gla/test_gpu.py -k "strong-chunk32-f32 or two_level_state_pass_within_budget" > $OUT/gpu_tests_old_first.log 2>&1
echo "tests rc $?" >> $OUT/walls.txt
cat $OUT/diag_b.jsonl; tail -3 $OUT/diag_b.err; grep -E "FAIL|PASS|passed|failed" $OUT/gpu_tests_old_first.log | tail -30; cat $OUT/walls.txt

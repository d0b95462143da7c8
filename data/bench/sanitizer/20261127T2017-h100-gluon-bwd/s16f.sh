# s16 call 6: the Gluon backward as the default: the whole flash GPU test file, synccheck over the Gluon paths
# (dS barrier now non-aligned), the target bench with the "triton backward" variant beside cuDNN
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/f
( WORKBENCH_AUTOTUNE=off timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu -n 6 --dist loadgroup tests/flash_attention/test_gpu.py -rfE --durations=5 > $OUT/f/gpu.log 2>&1; echo "gpu exit $?"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/f/gpu.log | tail -8 )
( XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout 110 compute-sanitizer --tool synccheck --print-limit 20 python3 scripts/every_path.py gluon > $OUT/f/synccheck.log 2>&1; echo "synccheck exit $?"; grep -E "ERROR SUMMARY|^FAIL|Barrier error" $OUT/f/synccheck.log | head -5; grep -c "^ok" $OUT/f/synccheck.log )
( WORKBENCH_AUTOTUNE=table timeout 170 python3 -m workbench bench --op flash_attention --shapes target --timer copies --peers --implementations triton --variants "triton backward" --out $OUT/f/bench > $OUT/f/bench.out 2> $OUT/f/bench.err; echo "bench exit $?"; grep -E "triton|cudnn" $OUT/f/bench.out | grep -v xla )

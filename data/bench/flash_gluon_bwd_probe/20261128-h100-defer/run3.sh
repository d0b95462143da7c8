# Third H100 call, on the branch's final kernel (DEFER_DQ: causal only): the target bench row, then the flash GPU
# file with the default. bash data/bench/flash_gluon_bwd_probe/20261128-h100-defer/run3.sh
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/f
nvidia-smi --query-gpu=name --format=csv,noheader
( WORKBENCH_AUTOTUNE=table timeout 170 python3 -m workbench bench --op flash_attention --shapes target --timer copies --peers --implementations triton --variants "triton backward" --out $OUT/f/bench > $OUT/f/bench.out 2> $OUT/f/bench.err; echo "bench exit $?"; grep -E "triton|cudnn" $OUT/f/bench.out | grep -v xla )
( WORKBENCH_AUTOTUNE=off timeout -s INT 270 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/flash_attention/test_gpu.py -rA --junitxml=$OUT/f/junit.xml > $OUT/f/tests.log 2>&1; echo "tests exit $?" ); pkill -f pytest; sleep 1
grep -E "^(FAILED|ERROR)|passed|failed" $OUT/f/tests.log | tail -15; grep -c "^PASSED" $OUT/f/tests.log

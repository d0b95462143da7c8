set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/n
git log --oneline -1 > $OUT/n/commit.txt 2>/dev/null || true
( WORKBENCH_AUTOTUNE=off timeout -s INT 400 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 --dist loadgroup tests/flash_attention/test_gpu.py -rfE --durations=15 > $OUT/n/suite.out 2>&1; echo "suite exit $?" ); pkill -f pytest; sleep 3; tail -30 $OUT/n/suite.out
( WORKBENCH_AUTOTUNE=table timeout 160 python3 -m workbench bench --op flash_attention --shapes target --timer copies --peers --implementations triton --variants "triton backward" --out $OUT/n/bench > $OUT/n/bench.out 2> $OUT/n/bench.err; echo "bench exit $?"; grep -E "triton|cudnn" $OUT/n/bench.out | grep -v xla )

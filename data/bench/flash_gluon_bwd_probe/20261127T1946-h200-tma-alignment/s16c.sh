# s16 call 3: the stats padding fix: Gluon GPU tests (forward + backward), then the sweep with the gluon backward variant
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/c
( WORKBENCH_AUTOTUNE=off timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/flash_attention/test_gpu.py -k gluon -rfE > $OUT/c/gpu.log 2>&1; echo "gpu exit $?"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/c/gpu.log | tail -8 )
( WORKBENCH_AUTOTUNE=table timeout 330 python3 -m workbench bench --op flash_attention --shapes sweep --T 1024,4096,16384 --timer copies --peers --implementations triton --variants "gluon backward" --out $OUT/c/bench > $OUT/c/bench.out 2> $OUT/c/bench.err; echo "bench exit $?"; grep -E "triton|cudnn" $OUT/c/bench.out | grep -v xla )

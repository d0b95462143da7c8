# s16 call 1: branch gluon-bwd on the GPU: the Gluon GPU tests (forward on final code + backward), the target bench
# with the "gluon backward" variant beside cuDNN, the bwd5 probe
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/a
nvidia-smi --query-gpu=name --format=csv,noheader
( WORKBENCH_AUTOTUNE=off timeout 260 python3 -m pytest -q -p no:cacheprovider -m gpu tests/flash_attention/test_gpu.py -k gluon -rfE > $OUT/a/gpu.log 2>&1; echo "gpu exit $?"; grep -E "passed|failed|Error" $OUT/a/gpu.log | tail -8 )
( WORKBENCH_AUTOTUNE=table timeout 200 python3 -m workbench bench --op flash_attention --shapes target --timer copies --peers --implementations triton --variants "gluon backward" --out $OUT/a/bench > $OUT/a/bench.out 2> $OUT/a/bench.err; echo "bench exit $?"; cat $OUT/a/bench.out | tail -20 )
( WORKBENCH_AUTOTUNE=off timeout 100 python3 .devcache/bwd5/probe_bwd5.py > $OUT/a/bwd5.jsonl 2>/dev/null; echo "bwd5 exit $?"; tail -3 $OUT/a/bwd5.jsonl )

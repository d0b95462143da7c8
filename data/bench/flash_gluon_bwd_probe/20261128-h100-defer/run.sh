# One H100 call from branch gluon-bwd-defer (carry .devcache for the Triton 3.9 wheel):
#   bash data/bench/flash_gluon_bwd_probe/20261128-h100-defer/run.sh
set -u
D=data/bench/flash_gluon_bwd_probe/20261128-h100-defer
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/p
nvidia-smi --query-gpu=name --format=csv,noheader
( WORKBENCH_AUTOTUNE=off timeout -s INT 200 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 \
    tests/flash_attention/test_gpu.py -k "gluon_backward or default_backward" -rA > $OUT/p/tests.log 2>&1; echo "tests exit $?" ); pkill -f pytest; sleep 2
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/p/tests.log | tail -30
WORKBENCH_AUTOTUNE=table timeout 300 python3 $D/probe_defer.py > $OUT/p/defer.jsonl 2> $OUT/p/defer.err; echo "probe exit $?"
cat $OUT/p/defer.jsonl; grep -v Warn $OUT/p/defer.err | tail -5

# Call 3 of the 24th session (carry .devcache; tree = branch gluon-fwd-pipelined): probe at five shapes against the
# counter-scheduled kernel; the faster at the target stays in the tree; its Gluon-forward GPU tests; the target bench.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/c
P=data/bench/flash_gluon_probe/next-pipelined
SHAPE_IDS=4,6,9,5 CUDNN=0 WORKBENCH_AUTOTUNE=table timeout 170 python3 $P/probe_pipelined.py > $OUT/c/pipelined.jsonl 2> $OUT/c/pipelined.err; echo "probe exit $?"
cut -c1-300 $OUT/c/pipelined.jsonl
if ! python3 $P/decide.py $OUT/c/pipelined.jsonl; then
    sed 's/^from workbench.launch import sm_count/from ..launch import sm_count/' $P/gluon_kernels_sched.py > workbench/flash_attention/gluon_kernels.py
    echo "running the counter-scheduled kernel"
fi
md5sum workbench/flash_attention/gluon_kernels.py
WORKBENCH_AUTOTUNE=off timeout -s INT 170 python3 -m pytest -p no:cacheprovider -m gpu -n 8 tests/flash_attention/test_gpu.py \
    -k "gluon_forward or default_forward or target" -rA > $OUT/c/fwd_tests.log 2>&1; echo "tests exit $?"
pkill -f pytest
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/c/fwd_tests.log | sed 's/tests.*test_gpu.py:://' | tail -14
left=$((575 - SECONDS)); echo "bench gets $left s"
WORKBENCH_AUTOTUNE=table timeout $left python3 -m workbench bench --op flash_attention --shapes target --timer copies --peers \
    --implementations triton --no-variants --out $OUT/c/bench > $OUT/c/flash_target.out 2> $OUT/c/flash_target.err; echo "flash target exit $?"
cut -c1-200 $OUT/c/flash_target.out | head -16

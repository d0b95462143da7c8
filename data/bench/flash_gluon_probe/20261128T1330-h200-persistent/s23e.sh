# Call 5 of the 23rd session (carry .devcache; this tree = branch gluon-fwd-persistent, final): its probe on 5 shapes,
# the Gluon-forward GPU tests, then the flash target bench with cuDNN.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/e
nvidia-smi --query-gpu=name --format=csv,noheader
P=data/bench/flash_gluon_probe/next-persistent
NSHAPES=5 WORKBENCH_AUTOTUNE=table timeout 150 python3 $P/probe_persistent.py > $OUT/e/persistent.jsonl 2> $OUT/e/persistent.err; echo "probe exit $?"
cut -c1-420 $OUT/e/persistent.jsonl; grep -iE "error" $OUT/e/persistent.err | head -5
WORKBENCH_AUTOTUNE=off timeout -s INT 120 python3 -m pytest -p no:cacheprovider -m gpu -n 6 tests/flash_attention/test_gpu.py \
    -k "gluon_forward or default_forward or target" -rA > $OUT/e/fwd_tests.log 2>&1; echo "tests exit $?"
pkill -f pytest
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/e/fwd_tests.log | sed 's/tests.*test_gpu.py:://' | tail -12
left=$((520 - SECONDS)); echo "bench gets $left s"
WORKBENCH_AUTOTUNE=table timeout $left python3 -m workbench bench --op flash_attention --shapes target --timer copies --peers \
    --implementations triton --no-variants --out $OUT/e/bench > $OUT/e/flash_target.out 2> $OUT/e/flash_target.err; echo "flash target exit $?"
cut -c1-200 $OUT/e/flash_target.out | head -20

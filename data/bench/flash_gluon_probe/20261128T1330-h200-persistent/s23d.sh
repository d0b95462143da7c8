# Call 4 of the 23rd session (carry .devcache; this tree = branch gluon-fwd-persistent): the persistent forward's
# probe alone, then the Gluon-forward GPU tests.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/d
nvidia-smi --query-gpu=name --format=csv,noheader
P=data/bench/flash_gluon_probe/next-persistent
WORKBENCH_AUTOTUNE=table timeout 260 python3 $P/probe_persistent.py > $OUT/d/persistent.jsonl 2> $OUT/d/persistent.err; echo "probe exit $?"
cut -c1-400 $OUT/d/persistent.jsonl; grep -iE "error" $OUT/d/persistent.err | head -5
left=$((560 - SECONDS)); echo "tests get $left s"
WORKBENCH_AUTOTUNE=off timeout -s INT $left python3 -m pytest -p no:cacheprovider -m gpu -n 6 tests/flash_attention/test_gpu.py \
    -k "gluon_forward or default_forward or target" -rA > $OUT/d/fwd_tests.log 2>&1; echo "tests exit $?"
pkill -f pytest
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/d/fwd_tests.log | sed 's/tests.*test_gpu.py:://' | tail -16

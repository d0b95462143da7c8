# Call 1 of the 24th session (carry .devcache; tree = branch gluon-fwd-causal-sched): the probe, the Gluon-forward
# GPU tests, then the flash target bench with cuDNN.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/a
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader
P=data/bench/flash_gluon_probe/next-causal-sched  # this folder, as it was named then
WORKBENCH_AUTOTUNE=table timeout 230 python3 $P/probe_sched.py > $OUT/a/sched.jsonl 2> $OUT/a/sched.err; echo "probe exit $?"
cut -c1-400 $OUT/a/sched.jsonl; grep -iE "error" $OUT/a/sched.err | head -5
WORKBENCH_AUTOTUNE=off timeout -s INT 130 python3 -m pytest -p no:cacheprovider -m gpu -n 6 tests/flash_attention/test_gpu.py \
    -k "gluon_forward or default_forward or target" -rA > $OUT/a/fwd_tests.log 2>&1; echo "tests exit $?"
pkill -f pytest
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/a/fwd_tests.log | sed 's/tests.*test_gpu.py:://' | tail -14
left=$((570 - SECONDS)); echo "bench gets $left s"
WORKBENCH_AUTOTUNE=table timeout $left python3 -m workbench bench --op flash_attention --shapes target --timer copies --peers \
    --implementations triton --no-variants --out $OUT/a/bench > $OUT/a/flash_target.out 2> $OUT/a/flash_target.err; echo "flash target exit $?"
cut -c1-200 $OUT/a/flash_target.out | head -24

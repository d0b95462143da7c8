# Call 6 of the 25th session (carry .devcache; tree = branch fwd-tma-store, final): the Gluon forward GPU tests,
# the target bench (--paired 10), the sustained power/clock probe.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/f
WORKBENCH_AUTOTUNE=off timeout -s INT 150 python3 -m pytest -p no:cacheprovider -m gpu -n 6 tests/flash_attention/test_gpu.py \
    -k "gluon_forward or default_forward or target" -rA > $OUT/f/fwd_tests.log 2>&1; echo "tests exit $?"
pkill -f pytest
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/f/fwd_tests.log | sed 's/tests.*test_gpu.py:://' | tail -15
timeout 260 python3 -m workbench bench --op flash_attention --shapes target --timer copies --peers --implementations triton \
    --no-variants --paired 10 --out $OUT/f > $OUT/f/bench.log 2>&1; echo "bench exit $?"
grep -v "^ - \|nanobind" $OUT/f/bench.log | tail -22
timeout 120 python3 data/bench/flash_gluon_probe/20261128T1825-h200-power/probe_power.py 3 > $OUT/f/power.jsonl 2> $OUT/f/power.err
echo "power exit $?"; cut -c1-330 $OUT/f/power.jsonl

# 29th session, call 3 (carry .devcache; tree = main 76d283d): the 29 flash GPU tests call 2 did not reach, by name,
# then the flash target once on an idle GPU.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/c $OUT/b
( WORKBENCH_AUTOTUNE=off timeout -s INT 350 python3 -c "
import sys, pytest
ids = open('.devcache/s29_rest_ids.txt').read().splitlines()
sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-m', 'gpu', '-n', '12', '-rA',
    '--junitxml=$OUT/c/junit.xml', '--durations=40', *ids]))" > $OUT/c/suite.out 2>&1; echo "suite exit $?" ); pkill -f pytest; sleep 2
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/c/suite.out | sed 's/tests.*test_gpu.py:://' | tail -40
timeout 190 python3 -m workbench bench --op flash_attention --shapes target --timer copies --peers --implementations triton \
   --no-variants --paired 10 --settle 2 --errors-from peers --out $OUT/b > $OUT/b/target1.txt 2>&1; echo "target exit $?"
grep -E "^B=|paired" $OUT/b/target1.txt | grep -v "xla\]"

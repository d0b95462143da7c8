set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/n
( WORKBENCH_AUTOTUNE=off timeout -s INT 510 python3 -c "
import sys, pytest
ids = open('.devcache/s17/rest_ids.txt').read().splitlines()
sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-m', 'gpu', '-n', '10', '--dist', 'loadgroup', '-rA',
    '--junitxml=$OUT/n/junit.xml', '--durations=40', *ids]))" > $OUT/n/suite.out 2>&1; echo "suite exit $?" ); pkill -f pytest; sleep 2; grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/n/suite.out | tail -50

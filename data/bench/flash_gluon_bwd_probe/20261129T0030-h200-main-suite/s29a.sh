# 29th session, call 2 (carry .devcache; tree = main 76d283d): the whole flash GPU file with xdist, then `workbench verify`.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/a
WORKBENCH_AUTOTUNE=off timeout -s INT 250 python3 -m pytest -p no:cacheprovider -m gpu -n 8 tests/flash_attention/test_gpu.py \
    -rA > $OUT/a/flash_gpu.log 2>&1; echo "tests exit $?"
pkill -f pytest
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/a/flash_gpu.log | sed 's/tests.*test_gpu.py:://' | tail -50
timeout 210 python3 -m workbench verify > $OUT/a/verify.txt 2>&1; echo "verify exit $?"; tail -5 $OUT/a/verify.txt

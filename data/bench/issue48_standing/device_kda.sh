# The second call (H200): chunk_kda's table-config test alone, one process (its rows printed), then chunk_kda's
# bench row at the target (the first call's timed out there, compiling the reference's autodiff for the errors).
set -x
source .devcache/env.sh
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 200 python3 -m pytest -q -rA -s \
  -p no:cacheprovider -p no:xdist -m gpu -k tuning_table_configs tests/kda/test_gpu.py > $OUT/kda_table_test.log 2>&1
grep -E "PASS|FAIL|passed|failed|\{" $OUT/kda_table_test.log | tail -24
WORKBENCH_AUTOTUNE=table timeout 240 python3 -m workbench bench --op chunk_kda --shapes target --implementations triton \
  --no-variants --timer device --out $OUT 2>&1 | tail -6

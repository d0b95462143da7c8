# Call 7 of the 25th session (carry .devcache; tree = main d128f7d): the target bench with --settle 2 --paired 10.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/g
timeout 320 python3 -m workbench bench --op flash_attention --shapes target --timer copies --peers --implementations triton \
    --no-variants --paired 10 --settle 2 --out $OUT/g > $OUT/g/bench.log 2>&1; echo "bench exit $?"
grep -v "^ - \|nanobind" $OUT/g/bench.log | tail -24

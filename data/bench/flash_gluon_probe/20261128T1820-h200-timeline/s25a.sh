# Call 1 of the 25th session (carry .devcache; tree = main 44f364a): the timeline probe, then the target bench
# with --paired 10.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
bash data/bench/flash_gluon_probe/next-timeline/run_timeline.sh
mkdir -p $OUT/bench
timeout 330 python3 -m workbench bench --op flash_attention --shapes target --timer copies --peers --implementations triton \
    --no-variants --paired 10 --out $OUT/bench > $OUT/bench/bench.log 2>&1; echo "bench exit $?"
tail -40 $OUT/bench/bench.log

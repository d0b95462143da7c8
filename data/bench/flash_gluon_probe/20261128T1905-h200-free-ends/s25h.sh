# Call 8 of the 25th session (carry .devcache; tree = main + the free-ends probe): the probe, as far as the budget goes.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/free
WORKBENCH_AUTOTUNE=table timeout 100 python3 data/bench/flash_gluon_probe/20261128T1905-h200-free-ends/probe_free.py > $OUT/free/free.jsonl 2> $OUT/free/free.err
echo "probe exit $?"; cat $OUT/free/free.jsonl; grep -iE "error" $OUT/free/free.err | grep -v nanobind | head -5

# Next session (tree = main; carry .devcache): the two-level state pass at the target shapes, both linear ops.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/s
WORKBENCH_AUTOTUNE=table timeout 400 python3 data/bench/linear_segments_at_target/20261129T0125-prepared/probe_segments.py \
    > $OUT/s/segments.jsonl 2> $OUT/s/segments.err
echo "probe exit $?"; cat $OUT/s/segments.jsonl; grep -iE "error" $OUT/s/segments.err | grep -v nanobind | head -5

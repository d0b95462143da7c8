# For the next session's device call (carry .devcache with the slim Triton 3.9 and its env.sh, as the developers'
# guide describes): the stamped forward at four shapes, both masks (~2-3 minutes with compiles).
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/timeline
P=data/bench/flash_gluon_probe/next-timeline
WORKBENCH_AUTOTUNE=table timeout 300 python3 $P/probe_timeline.py > $OUT/timeline/timeline.jsonl 2> $OUT/timeline/timeline.err
echo "probe exit $?"; cut -c1-600 $OUT/timeline/timeline.jsonl; grep -iE "error" $OUT/timeline/timeline.err | head -5

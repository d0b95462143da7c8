# Next session, call 1, on an H200 (tree = branch gla-forward-next = main + gla-a-per-chunk + gla-states-in-dtype;
# carry .devcache): the two prepared probes. Table misses (the branch's changed kernels) are tuned at first call.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/p
PYTHONPATH=$PWD:$PYTHONPATH timeout 280 python3 data/bench/chunk_gla_a_per_chunk/20261128T2230-prepared/probe_per_chunk.py \
    > $OUT/p/per_chunk.jsonl 2> $OUT/p/per_chunk.err
echo "per-chunk probe exit $?"; cat $OUT/p/per_chunk.jsonl; grep -i error $OUT/p/per_chunk.err | grep -v nanobind | head -3
P=data/bench/chunk_gla_states_in_dtype/20261129T0130-prepared
WORKBENCH_AUTOTUNE=table timeout 200 python3 $P/probe_states.py > $OUT/p/states.jsonl 2> $OUT/p/states.err
echo "states probe exit $?"; cat $OUT/p/states.jsonl; grep -iE "error" $OUT/p/states.err | grep -v nanobind | head -5

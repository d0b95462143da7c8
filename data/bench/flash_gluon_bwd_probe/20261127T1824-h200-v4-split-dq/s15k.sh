# s15 call 11: Gluon backward v4 (dQ split by columns between the groups) against v3 on one machine
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 WORKBENCH_AUTOTUNE=table
. .devcache/env.sh
mkdir -p $OUT/k
timeout 200 python3 .devcache/bwd4/probe_bwd4.py > $OUT/k/bwd4.jsonl 2> $OUT/k/bwd4.err; echo "bwd4 exit $?"; cat $OUT/k/bwd4.jsonl; grep -v "leaked\|nanobind\|skipped rem" $OUT/k/bwd4.err | tail -3
timeout 100 python3 .devcache/bwd3/probe_bwd3.py 2>/dev/null | grep '"shape": \[4, 4096' > $OUT/k/bwd3_again.jsonl; echo "bwd3 exit $?"; cat $OUT/k/bwd3_again.jsonl

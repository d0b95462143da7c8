# s15 call 10: Gluon backward v2 with named-barrier turns and elected releases (bwd3), against v2, workbench, cuDNN
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 WORKBENCH_AUTOTUNE=table
. .devcache/env.sh
mkdir -p $OUT/j
timeout 200 python3 .devcache/bwd3/probe_bwd3.py > $OUT/j/bwd3.jsonl 2> $OUT/j/bwd3.err; echo "bwd3 exit $?"; cat $OUT/j/bwd3.jsonl
timeout 120 python3 .devcache/bwd2/probe_bwd2.py 2>/dev/null | grep '"shape": \[4, 4096' > $OUT/j/bwd2_again.jsonl; echo "bwd2 exit $?"; cat $OUT/j/bwd2_again.jsonl

# Second H100 call from branch gluon-bwd-defer (DEFER a constexpr): bash data/bench/flash_gluon_bwd_probe/20261128-h100-defer/run2.sh
set -u
D=data/bench/flash_gluon_bwd_probe/20261128-h100-defer
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/p
nvidia-smi --query-gpu=name --format=csv,noheader
WORKBENCH_AUTOTUNE=table timeout 420 python3 $D/probe_defer.py > $OUT/p/defer2.jsonl 2> $OUT/p/defer2.err; echo "probe exit $?"
cat $OUT/p/defer2.jsonl; grep -v Warn $OUT/p/defer2.err | grep -v leaked | tail -3

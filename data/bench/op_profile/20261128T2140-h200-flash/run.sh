# Call 4 of the 27th session: per-kernel device time of one flash forward call, ours and cuDNN's (target, both masks).
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 WORKBENCH_AUTOTUNE=table
. .devcache/env.sh
mkdir -p $OUT/p
for c in 0 1; do
  timeout 200 python3 scripts/op_profile.py --op flash_attention --shape B=4,T=4096,H=16,D=128,causal=$c --peers \
     --passes forward,forward_backward --top 12 > $OUT/p/causal$c.txt 2> $OUT/p/causal$c.err; echo "exit $?"
  cat $OUT/p/causal$c.txt
done

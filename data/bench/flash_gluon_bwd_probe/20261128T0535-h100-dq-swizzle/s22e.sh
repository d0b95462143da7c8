# Call 5 of the 22nd session (H100; carry env.sh, tarball, wheel): branch gluon-bwd-dqswizzle's probe.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 WORKBENCH_AUTOTUNE=table
. .devcache/env.sh
mkdir -p $OUT/s
nvidia-smi --query-gpu=name --format=csv,noheader
NSHAPES=5 timeout 175 python3 data/bench/flash_gluon_bwd_probe/20261128T0535-h100-dq-swizzle/probe_swizzle.py > $OUT/s/swz.jsonl 2> $OUT/s/swz.err; echo "probe exit $?"
cut -c1-330 $OUT/s/swz.jsonl; grep -iE "error" $OUT/s/swz.err | head -5

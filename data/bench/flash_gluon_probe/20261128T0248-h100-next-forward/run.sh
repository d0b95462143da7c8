# One H100 call from branch gluon-next (carry .devcache/env.sh, the Triton 3.9 tarball, the zstandard wheel):
#   bash data/bench/flash_gluon_probe/20261128T0248-h100-next-forward/run.sh
set -u
D=data/bench/flash_gluon_probe/20261128T0248-h100-next-forward
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/p
nvidia-smi --query-gpu=name --format=csv,noheader
WORKBENCH_AUTOTUNE=table timeout 300 python3 $D/probe_ffma.py > $OUT/p/ffma.jsonl 2> $OUT/p/ffma.err; echo "probe exit $?"
cat $OUT/p/ffma.jsonl; grep -v Warn $OUT/p/ffma.err | grep -v leaked | tail -3
( WORKBENCH_AUTOTUNE=off timeout -s INT 200 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 \
    tests/flash_attention/test_gpu.py -k "gluon_forward or default_forward" -rA > $OUT/p/tests.log 2>&1; echo "tests exit $?" ); pkill -f pytest
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/p/tests.log | tail -12

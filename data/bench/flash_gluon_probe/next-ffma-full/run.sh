# One H100 call from branch gluon-ffma-full (Triton 3.9.0 slim copy first on PYTHONPATH, TRITON_BACKENDS_IN_TREE=1,
# TRITON_PTXAS_PATH and TRITON_PTXAS_BLACKWELL_PATH set to /usr/local/cuda/bin/ptxas: the setup of `env.sh` in the
# earlier probe folders): bash data/bench/flash_gluon_probe/next-ffma-full/run.sh
set -u
D=data/bench/flash_gluon_probe/next-ffma-full
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
mkdir -p $OUT/p
nvidia-smi --query-gpu=name --format=csv,noheader
WORKBENCH_AUTOTUNE=table timeout 150 python3 $D/probe_ffma.py > $OUT/p/ffma.jsonl 2> $OUT/p/ffma.err; echo "probe exit $?"
cut -c1-420 $OUT/p/ffma.jsonl
( WORKBENCH_AUTOTUNE=off timeout -s INT 230 python3 -m pytest -q -p no:cacheprovider -m gpu -n 6 \
    tests/flash_attention/test_gpu.py -k "gluon_forward or default_forward or default_backward" -rA > $OUT/p/tests.log 2>&1; echo "tests exit $?" ); pkill -f pytest
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/p/tests.log | tail -12

# Call 1 of the 22nd session (H100; carry env.sh, the Triton 3.9 tarball, the zstandard wheel, trees gluon-ffma-full,
# kda-checkpoint, gluon-bwd-dqwarp): the two timed probes alone, then the GPU tests and synccheck side by side.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/a $OUT/q
nvidia-smi --query-gpu=name --format=csv,noheader
T=$PWD/.devcache/trees
( cd $T/gluon-ffma-full && PYTHONPATH=/tmp/t39:$T/gluon-ffma-full WORKBENCH_AUTOTUNE=table timeout 150 python3 \
    data/bench/flash_gluon_probe/next-ffma-full/probe_ffma.py > $OUT/a/ffma.jsonl 2> $OUT/a/ffma.err; echo "ffma exit $?"; cut -c1-420 $OUT/a/ffma.jsonl )
D=data/bench/flash_gluon_bwd_probe/next-dq-loader
( cd $T/gluon-bwd-dqwarp && PYTHONPATH=/tmp/t39:$T/gluon-bwd-dqwarp WORKBENCH_AUTOTUNE=table timeout 170 python3 $D/probe_dq.py \
    > $OUT/q/dq.jsonl 2> $OUT/q/dq.err; echo "dq probe exit $?"; cut -c1-400 $OUT/q/dq.jsonl )
( cd $T/gluon-ffma-full && PYTHONPATH=/tmp/t39:$T/gluon-ffma-full WORKBENCH_AUTOTUNE=off timeout -s INT 210 python3 -m pytest -p no:cacheprovider \
    -m gpu -n 6 tests/flash_attention/test_gpu.py -k "gluon_forward or default_forward or default_backward or (kernel_within_budget and bf16)" -rA > $OUT/a/fwd_tests.log 2>&1; echo "ffma tests exit $?" ) &
( cd $T/kda-checkpoint && PYTHONPATH=/tmp/t39:$T/kda-checkpoint WORKBENCH_AUTOTUNE=off timeout -s INT 210 python3 -m pytest -p no:cacheprovider \
    -m gpu -n 2 tests/kda/test_gpu.py -k recompute -rA > $OUT/a/kda_tests.log 2>&1; echo "kda tests exit $?" ) &
( cd $T/gluon-bwd-dqwarp && sed -i 's/^DQ_BY_LOADER = False/DQ_BY_LOADER = True/' workbench/flash_attention/gluon_backward.py && \
  PYTHONPATH=/tmp/t39:$T/gluon-bwd-dqwarp XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout 200 compute-sanitizer --tool synccheck --print-limit 20 \
    python3 scripts/every_path.py gluon > $OUT/q/synccheck.log 2>&1; echo "synccheck exit $?"; grep -E "ERROR SUMMARY|^FAIL" $OUT/q/synccheck.log ) &
wait; pkill -f pytest
for f in fwd_tests kda_tests; do echo "== $f"; grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/a/$f.log | sed 's/tests.*test_gpu.py:://' | tail -14; done

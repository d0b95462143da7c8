# Call 2 of the 20th session (main 0d41dfb checkout + .devcache/trees of gluon-next and gla-residuals, H100).
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/c
nvidia-smi --query-gpu=name --format=csv,noheader
T=$PWD/.devcache/trees
# 1. timing, alone on the GPU: gluon-next's forward against main's kernel copy, cuDNN beside
( cd $T/gluon-next && PYTHONPATH=/tmp/t39:$T/gluon-next WORKBENCH_AUTOTUNE=table timeout 150 python3 \
    data/bench/flash_gluon_probe/next-forward/probe_ffma.py > $OUT/c/ffma.jsonl 2> $OUT/c/ffma.err; echo "ffma exit $?"; cut -c1-420 $OUT/c/ffma.jsonl )
# 2. timing, alone: gla-residuals' new variant at T64k beside the default
( cd $T/gla-residuals && PYTHONPATH=/tmp/t39:$T/gla-residuals WORKBENCH_AUTOTUNE=table timeout 130 python3 -m workbench bench --op chunk_gla \
    --shapes sweep --T 65536 --variants "recomputed residuals" --out $OUT/c/bench > $OUT/c/res_bench.out 2> $OUT/c/res_bench.err; echo "residual bench exit $?"; grep -E "triton|fla" $OUT/c/res_bench.err | tail -6 )
# 3. correctness, three suites at once: main's remaining flash cases, gluon-next's forward cases, gla-residuals' new test
( WORKBENCH_AUTOTUNE=off timeout -s INT 230 python3 -m pytest -p no:cacheprovider -m gpu -n 5 tests/flash_attention/test_gpu.py \
    -k "(gluon_backward and (GQA or T4096 or T777)) or default_backward or default_forward or target_shape or atomic" -rA > $OUT/c/main_tests.log 2>&1; echo "main tests exit $?" ) &
( cd $T/gluon-next && PYTHONPATH=/tmp/t39:$T/gluon-next WORKBENCH_AUTOTUNE=off timeout -s INT 230 python3 -m pytest -p no:cacheprovider \
    -m gpu -n 6 tests/flash_attention/test_gpu.py -k "gluon_forward or default_forward" -rA > $OUT/c/fwd_tests.log 2>&1; echo "gluon-next tests exit $?" ) &
( cd $T/gla-residuals && PYTHONPATH=/tmp/t39:$T/gla-residuals WORKBENCH_AUTOTUNE=off timeout -s INT 230 python3 -m pytest -p no:cacheprovider \
    -m gpu -n 2 tests/chunk_gla/test_gpu.py -k recomputed_residuals -rA > $OUT/c/res_tests.log 2>&1; echo "residual tests exit $?" ) &
wait; pkill -f pytest
for f in main_tests fwd_tests res_tests; do echo "== $f"; grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/c/$f.log | sed 's/tests.*test_gpu.py:://' | tail -12; done

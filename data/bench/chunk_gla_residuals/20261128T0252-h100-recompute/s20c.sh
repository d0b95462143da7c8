# Call 3 of the 20th session (H100): gla-residuals' variant at the target and T16k (alone), then its GPU test and
# gluon-next's fixed default-forward test at once.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/d
nvidia-smi --query-gpu=name --format=csv,noheader
T=$PWD/.devcache/trees
( cd $T/gla-residuals && PYTHONPATH=/tmp/t39:$T/gla-residuals WORKBENCH_AUTOTUNE=table timeout 100 python3 -m workbench bench --op chunk_gla \
    --shapes target --variants "recomputed residuals" --out $OUT/d/bench > $OUT/d/t.out 2> $OUT/d/t.err; echo "target exit $?"; grep -E "triton" $OUT/d/t.err | tail -4 )
( cd $T/gla-residuals && PYTHONPATH=/tmp/t39:$T/gla-residuals WORKBENCH_AUTOTUNE=table timeout 80 python3 -m workbench bench --op chunk_gla \
    --shapes sweep --T 16384 --variants "recomputed residuals" --out $OUT/d/bench > $OUT/d/s.out 2> $OUT/d/s.err; echo "sweep exit $?"; grep -E "triton" $OUT/d/s.err | tail -4 )
( cd $T/gla-residuals && PYTHONPATH=/tmp/t39:$T/gla-residuals WORKBENCH_AUTOTUNE=off timeout -s INT 260 python3 -m pytest -p no:cacheprovider \
    -m gpu -n 2 tests/chunk_gla/test_gpu.py -k recomputed_residuals -rA --durations=5 > $OUT/d/res_tests.log 2>&1; echo "residual tests exit $?" ) &
( cd $T/gluon-next && PYTHONPATH=/tmp/t39:$T/gluon-next WORKBENCH_AUTOTUNE=off timeout -s INT 260 python3 -m pytest -p no:cacheprovider \
    -m gpu tests/flash_attention/test_gpu.py -k "default_forward" -rA > $OUT/d/fwd_test.log 2>&1; echo "gluon-next test exit $?" ) &
wait; pkill -f pytest
for f in res_tests fwd_test; do echo "== $f"; grep -E "^(PASSED|FAILED|ERROR)|passed|failed|s call" $OUT/d/$f.log | sed 's/tests.*test_gpu.py:://' | tail -8; done

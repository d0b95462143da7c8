# Call 2 of the 22nd session (H100; carry env.sh, tarball, wheel, trees main-kda and merged = main + gluon-ffma-full
# + kda-checkpoint): chunk_kda's recompute row at T64k on main and on the merged tree, then the six flash GPU tests
# the first call left unrun.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/b
nvidia-smi --query-gpu=name --format=csv,noheader
T=$PWD/.devcache/trees
for tree in main-kda merged; do
  ( cd $T/$tree && PYTHONPATH=/tmp/t39:$T/$tree WORKBENCH_AUTOTUNE=table timeout 170 python3 -m workbench bench --op chunk_kda \
      --shapes sweep --T 65536 --timer copies --implementations triton --variants "recomputed residuals" --out $OUT/b/$tree \
      > $OUT/b/$tree.out 2> $OUT/b/$tree.err; echo "$tree exit $?"; grep -E "triton" $OUT/b/$tree.err | tail -3 )
done
left=$((570 - SECONDS)); echo "tests get $left s"
F=tests/flash_attention/test_gpu.py
( cd $T/merged && PYTHONPATH=/tmp/t39:$T/merged WORKBENCH_AUTOTUNE=off timeout -s INT $left python3 -m pytest -p no:cacheprovider \
    -m gpu -n 6 "$F::test_compiled_kernel_within_budget[non-causal-D80-GQA-Tq<Tk-bf16]" \
    "$F::test_compiled_kernel_within_budget[window+softcap+sinks+bias-D80-bf16]" \
    "$F::test_compiled_gluon_forward_within_budget[causal-D128-GQA-T1000]" \
    "$F::test_compiled_gluon_forward_within_budget[causal-Tq>Tk-rows-see-nothing]" \
    "$F::test_compiled_default_forward_is_the_gluon_kernel_on_hopper" \
    "$F::test_compiled_default_backward_is_the_gluon_kernel_on_hopper" -rA > $OUT/b/fwd_tests.log 2>&1; echo "tests exit $?" )
pkill -f pytest
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/b/fwd_tests.log | sed 's/tests.*test_gpu.py:://' | tail -10

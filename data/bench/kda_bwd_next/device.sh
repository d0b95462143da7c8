# One H200 call (carry .devcache: slim Triton 3.9.0, env.sh, bwd_variants.tgz from make_variants.sh): each tree's
# forward+backward at the target with every kernel at its first config (the fused kernel's line and the device-busy
# time), then tests/kda's GPU tests on the tree with all three patches (dl_tf32x3's precision only a GPU shows).
#   bash data/bench/kda_bwd_next/make_variants.sh && bash data/bench/kda_bwd_next/device.sh
SECONDS=0
ABL_TGZ=bwd_variants.tgz ABLATIONS="gather_x whole_in_fused dl_tf32x3 all" PASSES=forward_backward \
  ABL_TIMEOUT=${ABL_TIMEOUT:-90} KERNEL=chunk_kda_bwd_wy_dqkg_fused_kernel bash data/bench/kda_prep_regs/device.sh profile_ablate
echo "profiles done at ${SECONDS}s"
source .devcache/env.sh > /dev/null
(cd /tmp/abl/${TEST_TREE:-all} && PYTHONPATH=/tmp/t39:$PWD XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off \
  timeout -s INT $((575 - SECONDS)) python3 -m pytest -q -rA -p no:cacheprovider -m gpu -n 16 tests/kda > $OUT/gpu_tests_${TEST_TREE:-all}.log 2>&1)
tail -3 $OUT/gpu_tests_${TEST_TREE:-all}.log; echo "tests done at ${SECONDS}s"

# call 1 (H200): chunk_kda's states stored in the inputs' dtype for the backward: GPU tests, then the fused
# backward kernel retuned for its new keys (hs in bf16/f16) at the target shapes
source .devcache/env.sh
T=workbench/tuning/NVIDIA_H200.json
t0=$(date +%s)
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 240 python3 -m pytest -q -rA -p no:cacheprovider -m gpu -n 8 tests/kda > $OUT/tests.log 2>&1
echo "tests rc $? $(( $(date +%s) - t0 )) s" | tee -a $OUT/walls.txt
tail -2 $OUT/tests.log
t0=$(date +%s)
timeout -s INT 300 python3 -m workbench tune --write-table --op chunk_kda --kernels chunk_kda_bwd_wy_dqkg_fused_kernel --shapes target --dtypes bfloat16,float16 --head-dims 64,128 > $OUT/tune_target.log 2>&1
echo "tune target rc $? $(( $(date +%s) - t0 )) s" | tee -a $OUT/walls.txt
tail -5 $OUT/tune_target.log
cp $T $OUT/table_after_target.json

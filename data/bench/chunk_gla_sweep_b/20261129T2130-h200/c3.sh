# call 3 (gla-sweep-b): GPU tests on the final kernels, then the H200 table for the three sweep kernels (bf16)
set -x
source .devcache/env.sh
mkdir -p $OUT/g
t0=$(date +%s)
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 200 python3 -m pytest -q -rA -p no:cacheprovider -m gpu -n 8 tests/chunk_gla > $OUT/gpu_tests.log 2>&1
echo "tests rc $? $(( $(date +%s) - t0 )) s" >> $OUT/walls.txt
K=chunk_h_kernel,chunk_dh_kernel,chunk_segment_sweep_kernel
t0=$(date +%s)
timeout -s INT 230 python3 -m workbench tune --write-table --op chunk_gla --kernels $K --shapes target --dtypes bfloat16 --head-dims 64,128,256 > $OUT/tune_bf16_target.log 2>&1
echo "tune bf16 target rc $? $(( $(date +%s) - t0 )) s" >> $OUT/walls.txt
cp workbench/tuning/NVIDIA_H200.json $OUT/g/
t0=$(date +%s)
timeout -s INT 160 python3 -m workbench tune --write-table --op chunk_gla --kernels $K --shapes sweep > $OUT/tune_bf16_sweep.log 2>&1
echo "tune bf16 sweep rc $? $(( $(date +%s) - t0 )) s" >> $OUT/walls.txt
cp workbench/tuning/NVIDIA_H200.json $OUT/g/
tail -4 $OUT/gpu_tests.log; grep -h "chose\|tuned" $OUT/tune_*.log | cut -c1-220; cat $OUT/walls.txt

# next session, call 1 (branch gla-dqkg-phases): GPU tests, then dqkg's H200 entries at the bf16 target grid
set -x
source .devcache/env.sh
mkdir -p $OUT/g
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 200 python3 -m pytest -q -rA -p no:cacheprovider -m gpu -n 8 tests/chunk_gla > $OUT/gpu_tests.log 2>&1
echo "tests rc $?" >> $OUT/walls.txt
timeout -s INT 240 python3 -m workbench tune --write-table --op chunk_gla --kernels chunk_dqkg_kernel --shapes target --dtypes bfloat16 --head-dims 64,128,256 > $OUT/tune_bf16_target.log 2>&1
echo "tune rc $?" >> $OUT/walls.txt
timeout -s INT 120 python3 -m workbench tune --write-table --op chunk_gla --kernels chunk_dqkg_kernel --shapes sweep > $OUT/tune_bf16_sweep.log 2>&1
cp workbench/tuning/NVIDIA_H200.json $OUT/g/
tail -3 $OUT/gpu_tests.log; grep -h "chose" $OUT/tune_*.log | cut -c1-200; cat $OUT/walls.txt
# call 2: the same tune for --dtypes float16 --head-dims 64,128,256 and float32 64,128; then the paired benches (c6.sh of
# data/bench/chunk_gla_sweep_b/20261129T2130-h200) against main; drop dqkg's H100 entries if any remain (served by the H200)

# gla-final (gla-next with chunk_dqkg_kernel back to main's source: its hi/lo product did not change its time),
# second device call: GPU tests on this code; chunk_dv_kernel over the bf16 sweep, chunk_o_kernel at T 16k/32k
# (their missing entries), then the b group and dv at the bf16 target K 128 and 256.
source .devcache/env.sh > $OUT/walls.txt 2>&1
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; cp workbench/tuning/NVIDIA_H200.json $OUT/; }
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 200 python3 -m pytest -q -rA \
  -p no:cacheprovider -m gpu -n 8 tests/chunk_gla > $OUT/gpu_tests.log 2>&1; w "tests rc=$?"
tune() { timeout -s INT "$1" python3 -m workbench tune --write-table --op chunk_gla "${@:2}" >> $OUT/tune.log 2>&1; w "${*:2} rc=$?"; }
tune 120 --kernels chunk_dv_kernel --shapes sweep --T 1024,2048,4096,8192,16384,32768 --dtypes bfloat16
tune 60 --kernels chunk_o_kernel --shapes sweep --T 16384,32768 --dtypes bfloat16
tune 240 --kernels chunk_h_kernel,chunk_dh_kernel,chunk_o_kernel,chunk_dv_kernel --shapes target --dtypes bfloat16 \
  --head-dims 128,256
cat $OUT/walls.txt; tail -2 $OUT/gpu_tests.log; grep -h "tuned$" $OUT/tune.log

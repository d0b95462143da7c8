# Issue 48, forward-alone states in the inputs' 16-bit dtype, second device call (one H200; carry
# .devcache/{env.sh,triton390.tar.xz}): chunk_o_kernel tuned over the bench sweep (bf16 K 64, B1 T 1k-64k), then
# at the float16 target K 64/128/256; the table copied back after each step.
source .devcache/env.sh > $OUT/walls.txt 2>&1
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; cp workbench/tuning/NVIDIA_H200.json $OUT/; }
left() { echo $(( 570 - ($(date +%s) - T0) )); }
tune() { timeout -s INT "$1" python3 -m workbench tune --write-table --op chunk_gla "${@:2}" >> $OUT/tune.log 2>&1; w "${*:2} rc=$?"; }
tune 240 --kernels chunk_o_kernel --shapes sweep --dtypes bfloat16
tune $(left) --kernels chunk_o_kernel --shapes target --dtypes float16 --head-dims 64,128,256
cat $OUT/walls.txt; grep -h "chose" $OUT/tune.log | cut -c1-200

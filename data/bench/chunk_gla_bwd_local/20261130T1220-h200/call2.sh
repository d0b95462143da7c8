# session 2026-11-30b, call 2: dh/dv/dqkg retuned, bf16 sweep T 1k-32k and bf16 target K 128, 256
source .devcache/env.sh > $OUT/walls.txt 2>&1
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; cp workbench/tuning/NVIDIA_H200.json $OUT/; }
tune() { timeout -s INT "$1" python3 -m workbench tune --write-table --op chunk_gla "${@:2}" >> $OUT/tune.log 2>&1; w "${*:2} rc=$?"; }
K3=chunk_dh_kernel,chunk_dv_kernel,chunk_dqkg_kernel
tune 200 --kernels $K3 --shapes sweep --T 1024,2048,4096,8192,16384,32768 --dtypes bfloat16
tune 350 --kernels $K3 --shapes target --dtypes bfloat16 --head-dims 128,256
cat $OUT/walls.txt; grep -h "chose\|error" $OUT/tune.log | cut -c1-200

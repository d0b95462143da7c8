# session 2026-11-30b, call 3: dh/dv/dqkg retuned, float16 target K 64/128/256, float32 K 64
source .devcache/env.sh > $OUT/walls.txt 2>&1
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; cp workbench/tuning/NVIDIA_H200.json $OUT/; }
tune() { timeout -s INT "$1" python3 -m workbench tune --write-table --op chunk_gla "${@:2}" >> $OUT/tune.log 2>&1; w "${*:2} rc=$?"; }
K3=chunk_dh_kernel,chunk_dv_kernel,chunk_dqkg_kernel
tune 420 --kernels $K3 --shapes target --dtypes float16 --head-dims 64,128,256
tune 160 --kernels $K3 --shapes target --dtypes float32 --head-dims 64
cat $OUT/walls.txt; grep -h "chose\|error" $OUT/tune.log | cut -c1-200

# gla-final, third device call: the b group and dv at the bf16 target K 256 (call b's limit cut it), then f16
# K 64/128/256; each shape merged as it finishes, the table copied back after each step.
source .devcache/env.sh > $OUT/walls.txt 2>&1
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; cp workbench/tuning/NVIDIA_H200.json $OUT/; }
left() { echo $(( 585 - ($(date +%s) - T0) )); }
tune() { timeout -s INT "$1" python3 -m workbench tune --write-table --op chunk_gla "${@:2}" >> $OUT/tune.log 2>&1; w "${*:2} rc=$?"; }
KS=chunk_h_kernel,chunk_dh_kernel,chunk_o_kernel,chunk_dv_kernel
tune 330 --kernels $KS --shapes target --dtypes bfloat16 --head-dims 256
tune $(left) --kernels $KS --shapes target --dtypes float16 --head-dims 64,128,256
cat $OUT/walls.txt; grep -h "tuned$" $OUT/tune.log

# branch gla-b-local, third device call: more of the grid for the changed kernels (bf16 target K 128, 256; bf16
# sweep T 1k-32k), the table copied back after each step (device time runs out before the rest).
source .devcache/env.sh > $OUT/walls.txt 2>&1
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; cp workbench/tuning/NVIDIA_H200.json $OUT/; }
KS=chunk_h_kernel,chunk_dh_kernel,chunk_segment_sweep_kernel,chunk_o_kernel
timeout -s INT 100 python3 -m workbench tune --write-table --op chunk_gla --kernels $KS --shapes sweep \
  --T 1024,2048,4096,8192,16384,32768 --dtypes bfloat16 > $OUT/tune.log 2>&1; w "sweep rc=$?"
timeout -s INT 110 python3 -m workbench tune --write-table --op chunk_gla --kernels $KS --shapes target \
  --dtypes bfloat16 --head-dims 128,256 >> $OUT/tune.log 2>&1; w "target rc=$?"
cat $OUT/walls.txt; grep -h "tuned" $OUT/tune.log

# gla-sweep-dotscan: retune the three sweeps' H200 entries (bf16 target K 64/128/256, bf16 B1 T64k, f16 target K 64/128/256)
source .devcache/env.sh > $OUT/walls.txt 2>&1
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; cp workbench/tuning/NVIDIA_H200.json $OUT/; }
KS=chunk_h_kernel,chunk_dh_kernel,chunk_segment_sweep_kernel
timeout -s INT 230 python3 -m workbench tune --write-table --op chunk_gla --kernels $KS --shapes target \
  --dtypes bfloat16 --head-dims 64,128,256 > $OUT/tune_bf16.log 2>&1; w "bf16 target rc=$?"
timeout -s INT 110 python3 -m workbench tune --write-table --op chunk_gla --kernels $KS --shapes sweep --T 65536 \
  --dtypes bfloat16 > $OUT/tune_sweep.log 2>&1; w "bf16 sweep rc=$?"
timeout -s INT 200 python3 -m workbench tune --write-table --op chunk_gla --kernels $KS --shapes target \
  --dtypes float16 --head-dims 64,128,256 > $OUT/tune_f16.log 2>&1; w "f16 target rc=$?"
cat $OUT/walls.txt; grep -h "chose\|tuned\|entries" $OUT/tune_*.log | cut -c1-200 | tail -40

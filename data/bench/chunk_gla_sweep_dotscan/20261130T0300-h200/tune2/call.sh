# gla-sweep-dotscan: the rest of the sweeps' H200 entries (bf16 B1 T1k-32k, f32 target K 64/128)
source .devcache/env.sh > $OUT/walls.txt 2>&1
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; cp workbench/tuning/NVIDIA_H200.json $OUT/; }
KS=chunk_h_kernel,chunk_dh_kernel,chunk_segment_sweep_kernel
timeout -s INT 200 python3 -m workbench tune --write-table --op chunk_gla --kernels $KS --shapes sweep \
  --T 1024,2048,4096,8192,16384,32768 --dtypes bfloat16 > $OUT/tune_sweep.log 2>&1; w "bf16 sweep rc=$?"
timeout -s INT 150 python3 -m workbench tune --write-table --op chunk_gla --kernels chunk_h_kernel,chunk_dh_kernel \
  --shapes target --dtypes float32 --head-dims 64,128 > $OUT/tune_f32.log 2>&1; w "f32 target rc=$?"
cat $OUT/walls.txt; grep -h "tuned\|error" $OUT/tune_*.log | cut -c1-200 | tail -20

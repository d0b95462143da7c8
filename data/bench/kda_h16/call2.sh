# call 2 (H200): the fused backward kernel retuned over the bf16 sweep (B1, T 1k-64k, K = V = 128)
source .devcache/env.sh
T=workbench/tuning/NVIDIA_H200.json
t0=$(date +%s)
timeout -s INT 540 python3 -m workbench tune --write-table --op chunk_kda --kernels chunk_kda_bwd_wy_dqkg_fused_kernel --shapes sweep --dtypes bfloat16 > $OUT/tune_sweep.log 2>&1
echo "tune sweep rc $? $(( $(date +%s) - t0 )) s" | tee -a $OUT/walls.txt
grep -E "chose|merged" $OUT/tune_sweep.log; cp $T $OUT/table_after_sweep.json

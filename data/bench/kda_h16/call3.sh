# call 3 (H200): the fused backward kernel retuned at the wide heads (K = V = 256, bf16 and f16), then the
# retuned code paired against main (its workbench/ at 5d6c4bb, `--against`)
source .devcache/env.sh
T=workbench/tuning/NVIDIA_H200.json
rm -rf /tmp/main && mkdir -p /tmp/main && tar -xzf .devcache/main.tgz -C /tmp/main
t0=$(date +%s)
timeout -s INT 300 python3 -m workbench tune --write-table --op chunk_kda --kernels chunk_kda_bwd_wy_dqkg_fused_kernel --shapes wide --dtypes bfloat16,float16 > $OUT/tune_wide.log 2>&1
echo "tune wide rc $? $(( $(date +%s) - t0 )) s" | tee -a $OUT/walls.txt
grep -E "chose|merged" $OUT/tune_wide.log; cp $T $OUT/table_after_wide.json
for S in target 65536; do
  t0=$(date +%s)
  if [ $S = target ]; then sel="--shapes target"; else sel="--shapes sweep --T 65536"; fi
  WORKBENCH_AUTOTUNE=table timeout -s INT 120 python3 -m workbench bench --op chunk_kda $sel --implementations triton --no-variants --timer copies --paired 7 --against /tmp/main --out $OUT > $OUT/bench_$S.txt 2>&1
  echo "bench $S rc $? $(( $(date +%s) - t0 )) s" | tee -a $OUT/walls.txt
  grep -E "paired|residual" $OUT/bench_$S.txt | head -6
done

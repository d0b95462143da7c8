# session 2026-11-30b, call 5: dqkg with a BK 16 / 168-register candidate, tuned at the bf16 target and T64k; paired
source .devcache/env.sh > $OUT/walls.txt 2>&1
mkdir -p /tmp/main && tar -xzf .devcache/main.tgz -C /tmp/main
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; cp workbench/tuning/NVIDIA_H200.json $OUT/; }
timeout -s INT 60 python3 -m workbench tune --write-table --op chunk_gla --kernels chunk_dqkg_kernel --shapes target --dtypes bfloat16 --head-dims 64 > $OUT/tune.log 2>&1; w "tune target rc=$?"
timeout -s INT 45 python3 -m workbench tune --write-table --op chunk_gla --kernels chunk_dqkg_kernel --shapes sweep --T 65536 --dtypes bfloat16 >> $OUT/tune.log 2>&1; w "tune 64k rc=$?"
WORKBENCH_AUTOTUNE=table timeout -s INT 55 python3 -m workbench bench --op chunk_gla --shapes target --implementations triton \
  --no-variants --timer copies --paired 7 --against /tmp/main --out $OUT > $OUT/bench_target.log 2>&1; w "pair target rc=$?"
cat $OUT/walls.txt; grep -h "chose" $OUT/tune.log | cut -c1-220; grep paired $OUT/bench_target.log | tail -2

# branch gla-b-local, second device call: chunk_o_kernel with two more candidates capped at 128 registers (at
# 132 its chosen config fits 3 programs per SM, at 128 four), tuned at the bf16 target K 64; forward profile; pairing.
source .devcache/env.sh > $OUT/walls.txt 2>&1
mkdir -p /tmp/main && rm -rf /tmp/main/workbench && tar -xzf .devcache/main.tgz -C /tmp/main
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; }
timeout -s INT 90 python3 -m workbench tune --write-table --op chunk_gla --kernels chunk_o_kernel --shapes target \
  --dtypes bfloat16 --head-dims 64 > $OUT/tune.log 2>&1; w "tune rc=$?"
cp workbench/tuning/NVIDIA_H200.json $OUT/
WORKBENCH_AUTOTUNE=table timeout -s INT 60 python3 scripts/op_profile.py --op chunk_gla \
  --shape B=8,T=4096,H=16,K=64,V=64 --passes forward,forward_backward --top 8 > $OUT/profile.txt 2>&1; w "profile rc=$?"
timeout -s INT 80 python3 -m workbench bench --op chunk_gla --shapes target --implementations triton --no-variants \
  --timer copies --paired 7 --errors-from peers --against /tmp/main --out $OUT > $OUT/bench.log 2>&1; w "bench rc=$?"
cat $OUT/walls.txt; grep -h "chose" $OUT/tune.log | cut -c1-200; grep -h "^paired" $OUT/bench.log; cat $OUT/profile.txt

source .devcache/env.sh > $OUT/walls.txt 2>&1
mkdir -p /tmp/main && rm -rf /tmp/main/workbench && tar -xzf .devcache/main.tgz -C /tmp/main
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; }
timeout -s INT 90 python3 -m workbench bench --op chunk_gla --shapes target --implementations triton --no-variants \
  --timer copies --paired 7 --errors-from peers --against /tmp/main --out $OUT > $OUT/bench_target.log 2>&1; w "target rc=$?"
timeout -s INT 90 python3 -m workbench bench --op chunk_gla --shapes sweep --T 65536 --implementations triton --no-variants \
  --timer copies --paired 7 --errors-from peers --against /tmp/main --out $OUT > $OUT/bench_t64k.log 2>&1; w "t64k rc=$?"
WORKBENCH_AUTOTUNE=table timeout -s INT 60 python3 scripts/op_profile.py --op chunk_gla \
  --shape B=8,T=4096,H=16,K=64,V=64 --passes forward_backward --top 20 > $OUT/profile_fb.txt 2>&1; w "profile rc=$?"
cat $OUT/walls.txt; grep -h "^paired" $OUT/bench_*.log; head -16 $OUT/profile_fb.txt

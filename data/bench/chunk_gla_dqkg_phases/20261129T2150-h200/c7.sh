# call 7 (gla-dqkg-phases): paired against main (after gla-sweep-b); the branch's dqkg tuned ahead on first use
source .devcache/env.sh > /dev/null
mkdir -p /tmp/main && tar -xzf .devcache/main.tgz -C /tmp/main
timeout -s INT 75 python3 -m workbench bench --op chunk_gla --shapes target --implementations triton --no-variants --timer copies --paired 7 --errors-from peers --against /tmp/main --out $OUT > $OUT/bench_target.txt 2>&1
timeout -s INT 60 python3 -m workbench bench --op chunk_gla --shapes sweep --T 65536 --implementations triton --no-variants --timer copies --paired 7 --errors-from peers --against /tmp/main --out $OUT > $OUT/bench_64k.txt 2>&1
timeout -s INT 25 python3 scripts/op_profile.py --op chunk_gla --shape B=8,T=4096,H=16,K=64,V=64 --passes forward_backward --top 8 > $OUT/profile_target.txt 2>&1
grep -h "paired\|configs" $OUT/bench_*.txt; cat $OUT/profile_target.txt | tail -10

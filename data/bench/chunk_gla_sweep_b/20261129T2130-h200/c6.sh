# call 6 (gla-sweep-b): the paired benches again, for their JSON records (call 5's did not come back)
source .devcache/env.sh > /dev/null
mkdir -p /tmp/main && tar -xzf .devcache/main.tgz -C /tmp/main
timeout -s INT 80 python3 -m workbench bench --op chunk_gla --shapes target --implementations triton --no-variants --timer copies --paired 7 --errors-from peers --against /tmp/main --out $OUT > $OUT/bench_target.txt 2>&1
timeout -s INT 80 python3 -m workbench bench --op chunk_gla --shapes sweep --T 65536 --implementations triton --no-variants --timer copies --paired 7 --errors-from peers --against /tmp/main --out $OUT > $OUT/bench_64k.txt 2>&1
grep -h "paired\|configs" $OUT/bench_*.txt

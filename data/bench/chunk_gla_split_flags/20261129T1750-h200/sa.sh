# call A: launch-option variants of the two fixed-config kernels, then the paired bench at the target vs main
source .devcache/env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
mkdir -p /tmp/main && tar -xzf .devcache/main.tgz -C /tmp/main
t0=$(date +%s)
timeout -s INT ${VAR_S:-300} python3 .devcache/variants.py 2 > $OUT/variants.txt 2> $OUT/variants.err
echo "variants rc $? $(( $(date +%s) - t0 )) s" | tee -a $OUT/walls.txt
cat $OUT/variants.txt | tail -18
t0=$(date +%s)
timeout -s INT ${BENCH_S:-200} python3 -m workbench bench --op chunk_gla --shapes target --implementations triton --no-variants --timer copies --paired 5 --errors-from peers --against /tmp/main --out $OUT/bench > $OUT/bench_target.txt 2> $OUT/bench_target.err
echo "bench target rc $? $(( $(date +%s) - t0 )) s" | tee -a $OUT/walls.txt
grep -E "paired|triton|main" $OUT/bench_target.txt | head -12
tail -5 $OUT/variants.err $OUT/bench_target.err

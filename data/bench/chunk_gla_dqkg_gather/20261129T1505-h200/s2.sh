# call 2: paired bench against main (target, T64k), then the dqkg tune of the bf16 K64 sweep
set -x
source .devcache/env.sh
mkdir -p /tmp/main && tar -xzf .devcache/main.tgz -C /tmp/main
t0=$(date +%s)
timeout -s INT ${BENCH_S:-170} python3 -m workbench bench --op chunk_gla --shapes target --implementations triton --no-variants --timer copies --paired 5 --errors-from peers --against /tmp/main --out $OUT/bench > $OUT/bench_target.txt 2> $OUT/bench_target.err
echo "bench target rc $? $(( $(date +%s) - t0 )) s" >> $OUT/walls.txt
t0=$(date +%s)
timeout -s INT ${BENCH2_S:-150} python3 -m workbench bench --op chunk_gla --shapes sweep --T 65536 --implementations triton --no-variants --timer copies --paired 5 --errors-from peers --against /tmp/main --out $OUT/bench > $OUT/bench_64k.txt 2> $OUT/bench_64k.err
echo "bench 64k rc $? $(( $(date +%s) - t0 )) s" >> $OUT/walls.txt
mkdir -p $OUT/g
t0=$(date +%s)
timeout -s INT ${TUNE_S:-150} python3 -m workbench tune --write-table --op chunk_gla --kernels chunk_dqkg_kernel --shapes sweep > $OUT/tune_sweep.log 2>&1
echo "tune sweep rc $? $(( $(date +%s) - t0 )) s" >> $OUT/walls.txt
cp workbench/tuning/NVIDIA_H200.json $OUT/g/
cat $OUT/walls.txt

# call 2 (gla-dqkg-phases): f16/f32 tunes of chunk_dqkg_kernel, paired benches against main, profile
source .devcache/env.sh > /dev/null
mkdir -p /tmp/main && tar -xzf .devcache/main.tgz -C /tmp/main
mkdir -p $OUT/g
timeout -s INT 200 python3 -m workbench tune --write-table --op chunk_gla --kernels chunk_dqkg_kernel --shapes target --dtypes float16 --head-dims 64,128,256 > $OUT/tune_f16.log 2>&1; echo "f16 rc $?"
timeout -s INT 150 python3 -m workbench tune --write-table --op chunk_gla --kernels chunk_dqkg_kernel --shapes target --dtypes float32 --head-dims 64,128 > $OUT/tune_f32.log 2>&1; echo "f32 rc $?"
cp workbench/tuning/NVIDIA_H200.json $OUT/g/
timeout -s INT 80 python3 -m workbench bench --op chunk_gla --shapes target --implementations triton --no-variants --timer copies --paired 7 --errors-from peers --against /tmp/main --out $OUT > $OUT/bench_target.txt 2>&1
timeout -s INT 80 python3 -m workbench bench --op chunk_gla --shapes sweep --T 65536 --implementations triton --no-variants --timer copies --paired 7 --errors-from peers --against /tmp/main --out $OUT > $OUT/bench_64k.txt 2>&1
WORKBENCH_AUTOTUNE=table timeout -s INT 60 python3 scripts/op_profile.py --op chunk_gla --shape B=8,T=4096,H=16,K=64,V=64 --passes forward_backward --top 20 > $OUT/profile_target.txt 2>&1
grep -h "chose" $OUT/tune_*.log | cut -c1-160; grep -h "paired\|configs" $OUT/bench_*.txt; head -30 $OUT/profile_target.txt

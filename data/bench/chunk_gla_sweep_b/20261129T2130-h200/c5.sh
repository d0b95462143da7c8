# call 5 (gla-sweep-b): GPU tests on the final code; f16/f32 entries of the two sweeps; paired bench against main
set -x
source .devcache/env.sh
mkdir -p /tmp/main && tar -xzf .devcache/main.tgz -C /tmp/main
mkdir -p $OUT/g
t0=$(date +%s)
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 190 python3 -m pytest -q -rA -p no:cacheprovider -m gpu -n 8 tests/chunk_gla > $OUT/gpu_tests.log 2>&1
echo "tests rc $? $(( $(date +%s) - t0 )) s" >> $OUT/walls.txt
K=chunk_h_kernel,chunk_dh_kernel
t0=$(date +%s)
timeout -s INT 150 python3 -m workbench tune --write-table --op chunk_gla --kernels $K --shapes target --dtypes float16 --head-dims 64,128,256 > $OUT/tune_f16.log 2>&1
echo "tune f16 rc $? $(( $(date +%s) - t0 )) s" >> $OUT/walls.txt
cp workbench/tuning/NVIDIA_H200.json $OUT/g/
t0=$(date +%s)
timeout -s INT 100 python3 -m workbench tune --write-table --op chunk_gla --kernels $K --shapes target --dtypes float32 --head-dims 64,128 > $OUT/tune_f32.log 2>&1
echo "tune f32 rc $? $(( $(date +%s) - t0 )) s" >> $OUT/walls.txt
cp workbench/tuning/NVIDIA_H200.json $OUT/g/
t0=$(date +%s)
timeout -s INT 80 python3 -m workbench bench --op chunk_gla --shapes target --implementations triton --no-variants --timer copies --paired 7 --errors-from peers --against /tmp/main --out $OUT/bench > $OUT/bench_target.txt 2> $OUT/bench_target.err
echo "bench target rc $? $(( $(date +%s) - t0 )) s" >> $OUT/walls.txt
t0=$(date +%s)
timeout -s INT 80 python3 -m workbench bench --op chunk_gla --shapes sweep --T 65536 --implementations triton --no-variants --timer copies --paired 7 --errors-from peers --against /tmp/main --out $OUT/bench > $OUT/bench_64k.txt 2> $OUT/bench_64k.err
echo "bench 64k rc $? $(( $(date +%s) - t0 )) s" >> $OUT/walls.txt
t0=$(date +%s)
WORKBENCH_AUTOTUNE=table timeout -s INT 45 python3 scripts/op_profile.py --op chunk_gla --shape B=8,T=4096,H=16,K=64,V=64 --passes forward,forward_backward --top 20 > $OUT/profile_target.txt 2>&1
echo "profile rc $? $(( $(date +%s) - t0 )) s" >> $OUT/walls.txt
tail -4 $OUT/gpu_tests.log; grep -h "FAIL" $OUT/gpu_tests.log | head; grep -h "tuned\|error" $OUT/tune_*.log | cut -c1-200; cat $OUT/bench_target.txt $OUT/bench_64k.txt | tail -40; tail -30 $OUT/profile_target.txt; cat $OUT/walls.txt

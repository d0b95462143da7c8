# branch gla-b-local, first device call (one H200): GPU tests, the changed kernels tuned at the bf16 target K 64 and
# B1 T64k, paired forward and forward+backward against main, per-kernel profile. Carry .devcache/{env.sh,
# triton390.tar.xz,main.tgz} (main.tgz: `git archive --format=tar.gz main workbench`).
source .devcache/env.sh > $OUT/walls.txt 2>&1
mkdir -p /tmp/main && rm -rf /tmp/main/workbench && tar -xzf .devcache/main.tgz -C /tmp/main
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; }
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 200 python3 -m pytest -q -rA \
  -p no:cacheprovider -m gpu -n 8 tests/chunk_gla > $OUT/gpu_tests.log 2>&1; w "tests rc=$?"
timeout -s INT 110 python3 -m workbench tune --write-table --op chunk_gla \
  --kernels chunk_h_kernel,chunk_o_kernel,chunk_dh_kernel --shapes target --dtypes bfloat16 --head-dims 64 \
  > $OUT/tune.log 2>&1; w "tune target rc=$?"
timeout -s INT 90 python3 -m workbench tune --write-table --op chunk_gla \
  --kernels chunk_segment_sweep_kernel,chunk_o_kernel --shapes sweep --T 65536 --dtypes bfloat16 \
  >> $OUT/tune.log 2>&1; w "tune T64k rc=$?"
cp workbench/tuning/NVIDIA_H200.json $OUT/
for s in "--shapes target" "--shapes sweep --T 65536"; do
  timeout -s INT 80 python3 -m workbench bench --op chunk_gla $s --implementations triton --no-variants \
    --timer copies --paired 7 --errors-from peers --against /tmp/main --out $OUT >> $OUT/bench.log 2>&1; w "bench $s rc=$?"
done
WORKBENCH_AUTOTUNE=table timeout -s INT 60 python3 scripts/op_profile.py --op chunk_gla \
  --shape B=8,T=4096,H=16,K=64,V=64 --passes forward,forward_backward --top 12 > $OUT/profile.txt 2>&1; w "profile rc=$?"
cat $OUT/walls.txt; tail -2 $OUT/gpu_tests.log; grep -h "tuned\|chose" $OUT/tune.log | cut -c1-180; grep -h "^paired" $OUT/bench.log; cat $OUT/profile.txt

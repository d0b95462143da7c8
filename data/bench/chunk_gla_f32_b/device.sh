# One device call (H200): chunk_gla's h and dh sweeps at float32 tuned again (their float32 gate's b is now summed
# as bfloat16 high parts by products with ones plus low parts by scans), chunk_gla's GPU tests, and the float32
# target's per-kernel times against main's code (its own table entries). Repository root, `.devcache` carried.
source .devcache/env.sh > $OUT/walls.txt 2>&1
mkdir -p /tmp/main && tar xzf .devcache/main.tgz -C /tmp/main
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; }
timeout -s INT 200 python3 -m workbench tune --write-table --op chunk_gla --kernels chunk_h_kernel,chunk_dh_kernel \
  --shapes target --dtypes float32 --head-dims 64,128 > $OUT/tune_f32.log 2>&1; w "f32 tune rc=$?"
cp workbench/tuning/NVIDIA_H200.json $OUT/
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 240 \
  python3 -m pytest -q -rA -p no:cacheprovider -m gpu -n 16 tests/chunk_gla > $OUT/gpu_tests.log 2>&1; w "gpu tests rc=$?"
for tree in new main; do
  [ $tree = main ] && export PYTHONPATH=/tmp/t39:/tmp/main
  WORKBENCH_AUTOTUNE=table timeout 100 python3 scripts/op_profile.py --op chunk_gla --dtype float32 \
    --shape B=8,T=4096,H=16,K=64,V=64 --passes forward,forward_backward > $OUT/profile_f32_$tree.log 2>&1; w "profile $tree rc=$?"
done
cat $OUT/walls.txt; tail -2 $OUT/gpu_tests.log; grep -h "chose\|tuned" $OUT/tune_f32.log | cut -c1-160
grep -hE "per call|chunk_h_kernel|chunk_dh_kernel" $OUT/profile_f32_*.log

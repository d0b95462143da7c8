# session 2026-11-30b, call 1: backward h in 16-bit + b formed locally in the backward (gla-bwd-local)
source .devcache/env.sh > $OUT/walls.txt 2>&1
mkdir -p /tmp/main && tar -xzf .devcache/main.tgz -C /tmp/main
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; cp workbench/tuning/NVIDIA_H200.json $OUT/; }
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 240 python3 -m pytest -q -rA \
  -p no:cacheprovider -m gpu -n 8 tests/chunk_gla > $OUT/gpu_tests.log 2>&1; w "tests rc=$?"
tune() { timeout -s INT "$1" python3 -m workbench tune --write-table --op chunk_gla "${@:2}" >> $OUT/tune.log 2>&1; w "${*:2} rc=$?"; }
K3=chunk_dh_kernel,chunk_dv_kernel,chunk_dqkg_kernel
tune 150 --kernels $K3 --shapes target --dtypes bfloat16 --head-dims 64
tune 120 --kernels $K3 --shapes sweep --T 65536 --dtypes bfloat16
WORKBENCH_AUTOTUNE=table timeout -s INT 60 python3 scripts/op_profile.py --op chunk_gla \
  --shape B=8,T=4096,H=16,K=64,V=64 --passes forward,forward_backward --top 12 > $OUT/profile.txt 2>&1; w "profile rc=$?"
WORKBENCH_AUTOTUNE=table timeout -s INT 90 python3 -m workbench bench --op chunk_gla --shapes target --implementations triton \
  --no-variants --timer copies --paired 7 --against /tmp/main --out $OUT > $OUT/bench_target.log 2>&1; w "pair target rc=$?"
WORKBENCH_AUTOTUNE=table timeout -s INT 90 python3 -m workbench bench --op chunk_gla --shapes sweep --T 65536 --implementations triton \
  --no-variants --timer copies --paired 7 --against /tmp/main --out $OUT > $OUT/bench_64k.log 2>&1; w "pair 64k rc=$?"
cat $OUT/walls.txt; tail -3 $OUT/gpu_tests.log; grep -h "chose" $OUT/tune.log | cut -c1-220; tail -8 $OUT/bench_target.log; tail -8 $OUT/bench_64k.log; head -40 $OUT/profile.txt

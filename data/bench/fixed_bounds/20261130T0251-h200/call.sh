# fixed-bounds on the device: GPU tests (chunk_gla, kda), paired forward+backward against main, forward profile
source .devcache/env.sh > $OUT/walls.txt 2>&1
mkdir -p /tmp/main && tar -xzf .devcache/main.tgz -C /tmp/main
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; }
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 270 python3 -m pytest -q -rA \
  -p no:cacheprovider -m gpu -n 8 tests/chunk_gla tests/kda > $OUT/gpu_tests.log 2>&1; w "tests rc=$?"
timeout -s INT 80 python3 -m workbench bench --op chunk_gla --shapes target --implementations triton --no-variants \
  --timer copies --paired 7 --errors-from peers --against /tmp/main --out $OUT > $OUT/bench_gla.log 2>&1; w "gla rc=$?"
WORKBENCH_AUTOTUNE=table timeout -s INT 60 python3 scripts/op_profile.py --op chunk_gla \
  --shape B=8,T=4096,H=16,K=64,V=64 --passes forward --top 20 > $OUT/profile_fwd.txt 2>&1; w "profile rc=$?"
timeout -s INT 100 python3 -m workbench bench --op chunk_kda --shapes target --implementations triton --no-variants \
  --timer copies --paired 5 --errors-from peers --against /tmp/main --out $OUT > $OUT/bench_kda.log 2>&1; w "kda rc=$?"
cat $OUT/walls.txt; tail -3 $OUT/gpu_tests.log; tail -15 $OUT/bench_gla.log; tail -12 $OUT/bench_kda.log; head -30 $OUT/profile_fwd.txt

# Issue 48, forward-alone states in the inputs' 16-bit dtype, first device call (one H200; carry
# .devcache/{env.sh,triton390.tar.xz,main.tgz}): GPU tests of chunk_gla, chunk_o_kernel tuned at the bf16 target
# K 64, the forward's profile, a pairing against main (HEAD before the change), then o at bf16 K 128 and 256.
source .devcache/env.sh > $OUT/walls.txt 2>&1
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; cp workbench/tuning/NVIDIA_H200.json $OUT/; }
left() { echo $(( 580 - ($(date +%s) - T0) )); }
tune() { timeout -s INT "$1" python3 -m workbench tune --write-table --op chunk_gla "${@:2}" >> $OUT/tune.log 2>&1; w "${*:2} rc=$?"; }
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 200 python3 -m pytest -q -rA \
  -p no:cacheprovider -m gpu -n 8 tests/chunk_gla > $OUT/gpu_tests.log 2>&1; w "gpu tests rc=$?"
tune 100 --kernels chunk_o_kernel --shapes target --dtypes bfloat16
WORKBENCH_AUTOTUNE=table timeout -s INT 60 python3 scripts/op_profile.py --op chunk_gla \
  --shape B=8,T=4096,H=16,K=64,V=64 --passes forward,forward_backward --top 6 > $OUT/profile.txt 2>&1; w "profile rc=$?"
mkdir -p /tmp/main && tar xzf .devcache/main.tgz -C /tmp/main
WORKBENCH_AUTOTUNE=table timeout -s INT 150 python3 -m workbench bench --op chunk_gla --shapes target \
  --implementations triton --no-variants --timer copies --paired 7 --against /tmp/main --out $OUT \
  > $OUT/pair.log 2>&1; w "pair rc=$?"
tune $(left) --kernels chunk_o_kernel --shapes target --dtypes bfloat16 --head-dims 128,256
cat $OUT/walls.txt; tail -3 $OUT/gpu_tests.log; cat $OUT/profile.txt; grep -v Warn $OUT/pair.log | tail -12
grep -h "chose" $OUT/tune.log | cut -c1-200

# Issue 48, the two-level pass's fix-up parallel over each segment's chunks (one H200; carry
# .devcache/{env.sh,triton390.tar.xz,main.tgz}): GPU tests of chunk_gla, the op's profile at B1 T64k, pairings
# against main before the session's chunk_gla changes (be2c484) at B1 T64k and at the target.
source .devcache/env.sh > $OUT/walls.txt 2>&1
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; }
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 170 python3 -m pytest -q -rA \
  -p no:cacheprovider -m gpu -n 8 tests/chunk_gla > $OUT/gpu_tests.log 2>&1; w "gpu tests rc=$?"
export WORKBENCH_AUTOTUNE=table
timeout -s INT 40 python3 scripts/op_profile.py --op chunk_gla --shape B=1,T=65536,H=16,K=64,V=64 \
  --passes forward,forward_backward --top 8 > $OUT/profile_T64k.txt 2>&1; w "profile rc=$?"
mkdir -p /tmp/main && tar xzf .devcache/main.tgz -C /tmp/main
pair() { timeout -s INT 80 python3 -m workbench bench --op chunk_gla --implementations triton --no-variants \
  --timer copies --paired 7 --against /tmp/main --out $OUT "$@" >> $OUT/pair.log 2>&1; w "pair $* rc=$?"; }
pair --shapes sweep --T 65536
pair --shapes target
cat $OUT/walls.txt; tail -2 $OUT/gpu_tests.log; cat $OUT/profile_T64k.txt; grep "paired:" $OUT/pair.log

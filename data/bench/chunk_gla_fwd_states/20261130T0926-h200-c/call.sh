# Issue 48, forward-alone states in the inputs' 16-bit dtype, third device call (one H200; carry
# .devcache/{env.sh,triton390.tar.xz,main.tgz}): with the tuned table, the forward's profile at B1 T64k and a
# pairing against main at B1 T64k.
source .devcache/env.sh > $OUT/walls.txt 2>&1
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 WORKBENCH_AUTOTUNE=table
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; }
timeout -s INT 60 python3 scripts/op_profile.py --op chunk_gla --shape B=1,T=65536,H=16,K=64,V=64 \
  --passes forward --top 8 > $OUT/profile_T64k.txt 2>&1; w "profile rc=$?"
mkdir -p /tmp/main && tar xzf .devcache/main.tgz -C /tmp/main
timeout -s INT 150 python3 -m workbench bench --op chunk_gla --shapes sweep --T 65536 --implementations triton \
  --no-variants --timer copies --paired 7 --against /tmp/main --out $OUT > $OUT/pair_T64k.log 2>&1; w "pair rc=$?"
cat $OUT/walls.txt $OUT/profile_T64k.txt; grep -v Warn $OUT/pair_T64k.log | tail -10

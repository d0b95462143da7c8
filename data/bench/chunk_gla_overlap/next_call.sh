# Issue 48: the overlapped prototypes on one H200 (~5 min; carry .devcache/{env.sh,triton390.tar.xz}): the op's
# per-kernel profile at the target (chunk_h + chunk_o; chunk_dh + chunk_dv), then probe.py time in the same call.
source .devcache/env.sh > $OUT/walls.txt 2>&1
export WORKBENCH_AUTOTUNE=table
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; }
timeout -s INT 90 python3 scripts/op_profile.py --op chunk_gla --shape B=8,T=4096,H=16,K=64,V=64 \
  --passes forward,forward_backward --top 8 > $OUT/profile.txt 2>&1; w "profile rc=$?"
(cd data/bench/chunk_gla_overlap && timeout -s INT 400 python3 probe.py time > $OUT/overlap_time.jsonl \
  2> $OUT/overlap_time.err); w "time rc=$?"
cat $OUT/walls.txt $OUT/profile.txt $OUT/overlap_time.jsonl; grep -v Warning $OUT/overlap_time.err | tail -5

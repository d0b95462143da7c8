# Issue 48, next device call (one H200, ~3 min; carry .devcache/{env.sh,triton390.tar.xz}): the persistent,
# pipelined o kernel against the op's at the target and B1 T64k (`probe.py time o`).
source .devcache/env.sh > $OUT/walls.txt 2>&1
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; }
(cd data/bench/chunk_gla_persist && timeout -s INT 300 python3 probe.py time o > $OUT/time_o_h200.jsonl \
  2> $OUT/time.err); w "time o rc=$?"
cat $OUT/walls.txt $OUT/time_o_h200.jsonl; grep -v Warning $OUT/time.err | tail -5

# call 4 (H200): the retuned code paired against main (its workbench/ at 5d6c4bb, `--against`); call 3's pair
# without `--errors-from peers` spent its time in XLA compiling the error check and timed nothing
source .devcache/env.sh
rm -rf /tmp/main && mkdir -p /tmp/main && tar -xzf .devcache/main.tgz -C /tmp/main
for S in target 65536; do
  t0=$(date +%s)
  if [ $S = target ]; then sel="--shapes target"; else sel="--shapes sweep --T 65536"; fi
  WORKBENCH_AUTOTUNE=table timeout -s KILL 110 python3 -m workbench bench --op chunk_kda $sel --implementations triton --no-variants --timer copies --paired 7 --errors-from peers --against /tmp/main --out $OUT > $OUT/bench_$S.txt 2>&1
  echo "bench $S rc $? $(( $(date +%s) - t0 )) s" | tee -a $OUT/walls.txt
  grep -E "paired|residual" $OUT/bench_$S.txt | head -6
done

# call F: chunk_kda's dg and dβ stored in g's and β's dtype by the intra kernel: GPU tests, bit for bit against
# main (b17a1eb), paired benches
source .devcache/env.sh
rm -rf /tmp/main && mkdir -p /tmp/main && tar -xzf .devcache/main.tgz -C /tmp/main
t0=$(date +%s)
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 230 python3 -m pytest -q -rA -p no:cacheprovider -m gpu -n 8 tests/kda > $OUT/tests.log 2>&1
echo "tests rc $? $(( $(date +%s) - t0 )) s" | tee -a $OUT/walls.txt
tail -2 $OUT/tests.log
t0=$(date +%s)
for s in 8,4096,16,128,128 1,32768,16,128,128; do
  timeout -s INT 60 python3 .devcache/bitwise_op.py /tmp/main chunk_kda $s >> $OUT/bitwise.txt 2>&1
done
echo "bitwise rc $? $(( $(date +%s) - t0 )) s" | tee -a $OUT/walls.txt
grep -E "bitwise|Error" $OUT/bitwise.txt
for T in target 32768; do
  t0=$(date +%s)
  if [ $T = target ]; then sel="--shapes target"; else sel="--shapes sweep --T 32768"; fi
  timeout -s INT 80 python3 -m workbench bench --op chunk_kda $sel --implementations triton --no-variants --timer copies --paired 7 --errors-from peers --against /tmp/main --out $OUT/bench > $OUT/bench_$T.txt 2>&1
  echo "bench $T rc $? $(( $(date +%s) - t0 )) s" | tee -a $OUT/walls.txt
  grep -E "paired:" $OUT/bench_$T.txt
done

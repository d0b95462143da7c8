# call E: dgk stored in the gate's dtype by the dqkg kernel, the flag's span as one sum: GPU tests, bit-for-bit
# against main (821fd8e), paired benches, profile
source .devcache/env.sh
rm -rf /tmp/main && mkdir -p /tmp/main && tar -xzf .devcache/main.tgz -C /tmp/main
t0=$(date +%s)
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 200 python3 -m pytest -q -rA -p no:cacheprovider -m gpu -n 8 tests/chunk_gla > $OUT/tests.log 2>&1
echo "tests rc $? $(( $(date +%s) - t0 )) s" | tee -a $OUT/walls.txt
tail -2 $OUT/tests.log
t0=$(date +%s)
timeout -s INT 90 python3 .devcache/bitwise.py /tmp/main > $OUT/bitwise.txt 2>&1
echo "bitwise rc $? $(( $(date +%s) - t0 )) s" | tee -a $OUT/walls.txt
grep -E "bitwise|Error" $OUT/bitwise.txt
for T in target 65536; do
  t0=$(date +%s)
  if [ $T = target ]; then sel="--shapes target"; else sel="--shapes sweep --T 65536"; fi
  timeout -s INT 90 python3 -m workbench bench --op chunk_gla $sel --implementations triton --no-variants --timer copies --paired 7 --errors-from peers --against /tmp/main --out $OUT/bench > $OUT/bench_$T.txt 2>&1
  echo "bench $T rc $? $(( $(date +%s) - t0 )) s" | tee -a $OUT/walls.txt
  grep -E "paired:" $OUT/bench_$T.txt
done
for shape in B=8,T=4096,H=16,K=64,V=64 B=1,T=65536,H=16,K=64,V=64; do
  WORKBENCH_AUTOTUNE=table timeout -s INT 40 python3 scripts/op_profile.py --op chunk_gla --shape $shape --passes forward,forward_backward --top 20 >> $OUT/prof_new.txt 2>&1
done
grep -E "per call|_kernel|convert" $OUT/prof_new.txt

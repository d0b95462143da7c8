# call C: GPU tests (b kernel flags + 4-chunk A / dqk_intra), paired benches vs main, profile, target-rows diagnosis
source .devcache/env.sh
mkdir -p /tmp/main && tar -xzf .devcache/main.tgz -C /tmp/main
t0=$(date +%s)
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 200 python3 -m pytest -q -rA -p no:cacheprovider -m gpu -n 8 tests/chunk_gla -k "not test_compiled_target_rows_bf16_within_budget" > $OUT/tests.log 2>&1
echo "tests rc $? $(( $(date +%s) - t0 )) s" | tee -a $OUT/walls.txt
tail -2 $OUT/tests.log
for T in target 65536; do
  t0=$(date +%s)
  if [ $T = target ]; then sel="--shapes target"; else sel="--shapes sweep --T 65536"; fi
  timeout -s INT 90 python3 -m workbench bench --op chunk_gla $sel --implementations triton --no-variants --timer copies --paired 7 --errors-from peers --against /tmp/main --out $OUT/bench > $OUT/bench_$T.txt 2>&1
  echo "bench $T rc $? $(( $(date +%s) - t0 )) s" | tee -a $OUT/walls.txt
  grep -E "paired:|^B=" $OUT/bench_$T.txt
done
t0=$(date +%s)
for shape in B=8,T=4096,H=16,K=64,V=64 B=1,T=65536,H=16,K=64,V=64; do
  WORKBENCH_AUTOTUNE=table timeout -s INT 40 python3 scripts/op_profile.py --op chunk_gla --shape $shape --passes forward,forward_backward --top 20 >> $OUT/prof_new.txt 2>&1
done
echo "profile rc $? $(( $(date +%s) - t0 )) s" | tee -a $OUT/walls.txt
grep -E "per call|_kernel" $OUT/prof_new.txt
for w in triton ref oracle; do
  timeout -s INT 50 python3 .devcache/diag.py $w >> $OUT/diag.txt 2>&1; echo "diag $w rc $?" >> $OUT/diag.txt
done
grep -E "lowered|compiled|ran|rc|Very slow|Error" $OUT/diag.txt | head -20

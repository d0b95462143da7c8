# call B: chunk_gla GPU tests (b_a kernel), the paired bench at B1 T64k vs main, per-kernel profiles new and main
source .devcache/env.sh
mkdir -p /tmp/main && tar -xzf .devcache/main.tgz -C /tmp/main && mkdir -p /tmp/main/scripts && cp scripts/op_profile.py /tmp/main/scripts/
t0=$(date +%s)
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT ${TEST_S:-300} python3 -m pytest -q -rA -p no:cacheprovider -m gpu -n 8 tests/chunk_gla -k "not test_compiled_target_rows_bf16_within_budget" > $OUT/tests.log 2>&1
echo "tests rc $? $(( $(date +%s) - t0 )) s" | tee -a $OUT/walls.txt
tail -3 $OUT/tests.log
t0=$(date +%s)
timeout -s INT ${BENCH_S:-120} python3 -m workbench bench --op chunk_gla --shapes sweep --T 65536 --implementations triton --no-variants --timer copies --paired 5 --errors-from peers --against /tmp/main --out $OUT/bench > $OUT/bench_64k.txt 2>&1
echo "bench 64k rc $? $(( $(date +%s) - t0 )) s" | tee -a $OUT/walls.txt
grep -E "paired" $OUT/bench_64k.txt
for who in new main; do
  dir=$PWD; [ $who = main ] && dir=/tmp/main
  t0=$(date +%s)
  for shape in B=8,T=4096,H=16,K=64,V=64 B=1,T=65536,H=16,K=64,V=64; do
    (cd $dir && WORKBENCH_AUTOTUNE=table PYTHONPATH=/tmp/t39:$dir timeout -s INT 100 python3 scripts/op_profile.py --op chunk_gla --shape $shape --passes forward,forward_backward --top 20) >> $OUT/prof_$who.txt 2>&1
  done
  echo "profile $who rc $? $(( $(date +%s) - t0 )) s" | tee -a $OUT/walls.txt
done
grep -E "^(  |forward|device|bench|chunk|workbench)" $OUT/prof_new.txt | head -60

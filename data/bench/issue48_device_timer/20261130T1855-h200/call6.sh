source .devcache/env.sh >/dev/null
export WORKBENCH_AUTOTUNE=table
B="python3 -m workbench bench --implementations triton --no-variants --iters 20 --timer device --errors-from peers --out $OUT"
for op in chunk_gla chunk_kda; do
  timeout 200 $B --op $op --shapes target > $OUT/${op}_target.log 2>&1
  timeout 200 $B --op $op --shapes sweep --T 65536 > $OUT/${op}_64k.log 2>&1
done
grep -h "fwd" $OUT/*.log

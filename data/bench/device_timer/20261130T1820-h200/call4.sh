set -x
source .devcache/env.sh >/dev/null
export WORKBENCH_AUTOTUNE=table
B="python3 -m workbench bench --implementations triton --no-variants --iters 20"
timeout 150 $B --op chunk_gla --shapes target --timer device --errors-from peers --out $OUT > $OUT/gla_device.log 2>&1
timeout 150 $B --op chunk_gla --shapes target --timer copies --errors-from peers --out $OUT > $OUT/gla_copies.log 2>&1
timeout 200 $B --op flash_attention --shapes target --peers --timer device --paired 7 --out $OUT > $OUT/flash_device.log 2>&1
timeout 200 $B --op flash_attention --shapes target --peers --timer copies --paired 7 --out $OUT > $OUT/flash_copies.log 2>&1
tail -n 12 $OUT/*.log

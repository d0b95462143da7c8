# Next session, call 3 (tree = gla-forward-next, after s30b's H200 table is copied into the tree): the chunk_gla
# target and B1 T64k with the branch's kernels.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/g
timeout 150 python3 -m workbench bench --op chunk_gla --shapes target --timer copies --peers --implementations triton \
   --no-variants --out $OUT/g > $OUT/g/bench.txt 2>&1; echo "bench exit $?"; grep -E "^B=" $OUT/g/bench.txt
timeout 200 python3 -m workbench bench --op chunk_gla --shapes sweep --T 65536 --timer copies --peers --implementations triton \
   --no-variants --out $OUT/g > $OUT/g/bench64k.txt 2>&1; echo "bench exit $?"; grep -E "^B=" $OUT/g/bench64k.txt

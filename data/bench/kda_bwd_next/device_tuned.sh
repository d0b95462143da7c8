# One H200 call with the three backward patches applied to the working tree (the device takes it; .devcache carried,
# main.tgz = `git archive HEAD workbench`): the fused and intra backward kernels tuned in bfloat16 at the target,
# then the op paired against main at the target and at B1 T64k (AT=table: T64k takes the nearest new entries).
source .devcache/env.sh > $OUT/env.log 2>&1; SECONDS=0
mkdir -p /tmp/main && tar xzf .devcache/main.tgz -C /tmp/main
T="python3 -m workbench tune --write-table --op chunk_kda --dtypes bfloat16"
T="$T --kernels chunk_kda_bwd_wy_dqkg_fused_kernel,chunk_kda_bwd_intra_kernel"
timeout 220 $T --shapes target > $OUT/tune_target.log 2>&1; echo "tune rc=$? ${SECONDS}s"
cp workbench/tuning/NVIDIA_H200.json $OUT/
for set in "--shapes target" "--shapes sweep --T 65536"; do
  left=$((530 - SECONDS)); [ $left -gt 60 ] || break
  WORKBENCH_AUTOTUNE=table timeout $left python3 -m workbench bench --op chunk_kda $set --implementations triton \
    --no-variants --timer device --paired 5 --errors-from peers --against /tmp/main --out $OUT >> $OUT/pair.log 2>&1
  echo "pair ($set) rc=$? ${SECONDS}s"
done
grep -E "^paired|^tune:|configs:" $OUT/tune_target.log $OUT/pair.log

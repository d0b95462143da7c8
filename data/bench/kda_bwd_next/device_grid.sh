# One H200 call with the three backward patches applied to the working tree (.devcache carried): the fused and
# intra backward kernels tuned over the tuning table's grid, as far as LIMIT seconds allow (each shape's choices
# are merged into the table as it finishes; the table is copied to $OUT after each tune).
source .devcache/env.sh > $OUT/env.log 2>&1; SECONDS=0; LIMIT=${LIMIT:-480}
T="python3 -m workbench tune --write-table --op chunk_kda"
T="$T --kernels chunk_kda_bwd_wy_dqkg_fused_kernel,chunk_kda_bwd_intra_kernel ${TUNE_FLAGS:-}"  # e.g. --compile-workers 16
# TUNES: the tunes' arguments, separated by ';' (default: the grid as the first call of 2026-12-01 ran it)
TUNES=${TUNES:-"--shapes target --dtypes bfloat16 --head-dims 64;--shapes target --dtypes float16 --head-dims 64,128;\
--shapes target --dtypes float32 --head-dims 64,128;--shapes wide --dtypes bfloat16,float16,float32;\
--shapes sweep --dtypes bfloat16"}
i=0
IFS=';' read -ra LIST <<< "$TUNES"
for args in "${LIST[@]}"; do
  left=$((LIMIT - SECONDS)); [ $left -gt 40 ] || break
  i=$((i + 1)); timeout $left $T $args > $OUT/tune_grid$i.log 2>&1; echo "tune $i ($args) rc=$? ${SECONDS}s"
  cp workbench/tuning/NVIDIA_H200.json $OUT/
done
grep -hE "^\[" $OUT/tune_grid*.log

# gla-next: one step of a group's grid (`bash grid.sh b 1`, ..., `bash grid.sh dv 4`); README says which.
source .devcache/env.sh > $OUT/walls.txt 2>&1
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; cp workbench/tuning/NVIDIA_H200.json $OUT/; }
case "$1" in
  b) KS=chunk_h_kernel,chunk_dh_kernel,chunk_segment_sweep_kernel,chunk_o_kernel ;;
  dv) KS=chunk_dv_kernel,chunk_dqkg_kernel ;;
  *) echo "group: b or dv" >&2; exit 2 ;;
esac
tune() { timeout -s INT "$1" python3 -m workbench tune --write-table --op chunk_gla --kernels $KS "${@:2}" >> $OUT/tune.log 2>&1; w "$* rc=$?"; }
case "$2" in
  1) tune 560 --shapes sweep --T 1024,2048,4096,8192,16384,32768,65536 --dtypes bfloat16 ;;
  2) tune 560 --shapes target --dtypes bfloat16 --head-dims 128,256 ;;
  3) tune 560 --shapes target --dtypes float16 --head-dims 64,128,256 ;;
  4) tune 560 --shapes target --dtypes float32 --head-dims 64,128 ;;
esac
cat $OUT/walls.txt; grep -h "tuned" $OUT/tune.log

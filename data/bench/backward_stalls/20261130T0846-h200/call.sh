# Issue 48, next device call (one H200, ~6 min; carry .devcache/{env.sh,triton390.tar.xz}):
# 1. chunk_o_kernel at B1 T8k, the one bench key the H200 table answers from its nearest entry (tuning README);
# 2. where the backward's largest kernels wait: Nsight Compute (full set, SASS-level samples) on one launch each of
#    chunk_gla's chunk_dqkg_kernel and chunk_dv_kernel (target B8 T4096 H16 K=V=64 bf16) and chunk_kda's three
#    backward kernels (target B8 T4096 H16 K=V=128 bf16), all at the table's configs.
set -u
source .devcache/env.sh > $OUT/walls.txt 2>&1
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 WORKBENCH_AUTOTUNE=table
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; }
timeout -s INT 70 python3 -m workbench tune --write-table --op chunk_gla --kernels chunk_o_kernel --shapes sweep \
  --T 8192 --dtypes bfloat16 > $OUT/tune.log 2>&1; w "tune o T8k rc=$?"
cp workbench/tuning/NVIDIA_H200.json $OUT/
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
prof() {  # prof NAME OP SHAPE KERNEL-REGEX: compile and tune outside ncu first (one plain run), then one launch each
  python3 scripts/op_profile.py --op $2 --shape $3 --passes forward_backward --iters 1 --reps 1 > /dev/null 2>&1
  timeout -s INT 240 $NCU --clock-control none --set full --import-source yes --kernel-name "regex:$4" \
    --launch-skip 2 --launch-count 3 --export /tmp/$1 --force-overwrite \
    python3 scripts/op_profile.py --op $2 --shape $3 --passes forward_backward --iters 1 --reps 1 > /tmp/$1.out 2>&1
  w "ncu $1 rc=$?"
  $NCU --import /tmp/$1.ncu-rep --page details --csv > $OUT/$1_details.csv 2>&1
  $NCU --import /tmp/$1.ncu-rep --page source --csv --print-source sass > /tmp/$1_sass.csv 2>&1
  python3 -c "import zipfile,sys; z=zipfile.ZipFile(sys.argv[1],'w',zipfile.ZIP_DEFLATED); z.write(sys.argv[2],'sass.csv'); z.write(sys.argv[3],'ncu.out')" \
    $OUT/$1_sass.zip /tmp/$1_sass.csv /tmp/$1.out
}
prof gla chunk_gla B=8,T=4096,H=16,K=64,V=64 "chunk_dqkg_kernel|chunk_dv_kernel"
prof kda chunk_kda B=8,T=4096,H=16,K=128,V=128 "chunk_kda_bwd_intra_kernel|chunk_kda_bwd_wy_dqkg_fused_kernel|chunk_kda_dh_kernel"
cat $OUT/walls.txt; grep -h "chose" $OUT/tune.log | cut -c1-200; ls -la $OUT

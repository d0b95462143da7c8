# Issue 48: where chunk_gla's state sweeps and output kernel wait (one H200; carry .devcache/{env.sh,triton390.tar.xz}):
# Nsight Compute (full set, SASS-level samples) on one launch each of chunk_h_kernel, chunk_o_kernel and
# chunk_dh_kernel at the target (B8 T4096 H16 K=V=64 bf16), the table's configs, inside forward+backward.
set -u
source .devcache/env.sh > $OUT/walls.txt 2>&1
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 WORKBENCH_AUTOTUNE=table
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; }
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
prof() {  # prof NAME OP SHAPE KERNEL-REGEX: compile outside ncu first (one plain run), then one launch each
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
prof gla_fwd chunk_gla B=8,T=4096,H=16,K=64,V=64 "chunk_h_kernel|chunk_o_kernel|chunk_dh_kernel"
cat $OUT/walls.txt; ls -la $OUT

# Where chunk_kda_bwd_prep_kernel waits (one H200; carry .devcache): Nsight Compute (full set, SASS-level samples)
# on one launch inside forward+backward at the target (B8 T4096 H16 K=V=128 bf16), its one config. Another kernel
# of the op: KERNEL=chunk_kda_fwd_prep PASSES=forward bash data/bench/chunk_kda_bwd_prep/ncu/call.sh
set -u
source .devcache/env.sh > $OUT/walls.txt 2>&1
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 WORKBENCH_AUTOTUNE=table
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; }
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
S=B=8,T=4096,H=16,K=128,V=128 KERNEL=${KERNEL:-chunk_kda_bwd_prep} PASSES=${PASSES:-forward_backward}
python3 scripts/op_profile.py --op chunk_kda --shape $S --passes $PASSES --iters 1 --reps 1 > /dev/null 2>&1
timeout -s INT 200 $NCU --clock-control none --set full --import-source yes --kernel-name "regex:$KERNEL" \
  --launch-skip 1 --launch-count 1 --export /tmp/prep --force-overwrite \
  python3 scripts/op_profile.py --op chunk_kda --shape $S --passes $PASSES --iters 1 --reps 1 > /tmp/prep.out 2>&1
w "ncu rc=$?"
$NCU --import /tmp/prep.ncu-rep --page details --csv > $OUT/prep_details.csv 2>&1
$NCU --import /tmp/prep.ncu-rep --page source --csv --print-source sass > /tmp/prep_sass.csv 2>&1
python3 -c "import zipfile,sys; z=zipfile.ZipFile(sys.argv[1],'w',zipfile.ZIP_DEFLATED); z.write(sys.argv[2],'sass.csv'); z.write(sys.argv[3],'ncu.out')" \
  $OUT/prep_sass.zip /tmp/prep_sass.csv /tmp/prep.out
cat $OUT/walls.txt
grep -E '"(Duration|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|DRAM Throughput|Memory Throughput|Issue Slots Busy|Block Limit Registers|Block Limit Shared Mem|Waves Per SM)"' $OUT/prep_details.csv | cut -d, -f13-16 | head -20

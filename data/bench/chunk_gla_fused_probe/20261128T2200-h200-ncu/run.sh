# The chunk_gla half of the 27th session's ncu call (carry .devcache with the slim Triton 3.9 and env.sh; main at
# 85de002): ncu --set full over chunk_gla's forward kernels and the fused prototype at B8 T4096 H16 K=V=64 bf16.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 WORKBENCH_AUTOTUNE=table XLA_FLAGS=--xla_gpu_autotune_level=0
. .devcache/env.sh
mkdir -p $OUT/g
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
timeout -s INT 200 $NCU --clock-control none --set full --import-source no --kernel-name "regex:chunk_" \
    --export $OUT/g/prof --force-overwrite python3 data/bench/chunk_gla_fused_probe/20261128T2200-h200-ncu/prof_fused.py > $OUT/g/full.out 2>&1; echo "gla exit $?"
$NCU --import $OUT/g/prof.ncu-rep --page details --csv > $OUT/g/details.csv 2>&1
$NCU --import $OUT/g/prof.ncu-rep --page raw --csv > $OUT/g/raw.csv 2>&1
rm -f $OUT/g/prof.ncu-rep

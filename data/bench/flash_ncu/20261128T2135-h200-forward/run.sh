# Call 3 of the 27th session (carry .devcache; tree = main): ncu --set full over the flash forwards (ours, cuDNN's) at
# the target, both masks, on main's code; then ncu over chunk_gla's forward kernels and the fused prototype at B8 T4k.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 WORKBENCH_AUTOTUNE=table XLA_FLAGS=--xla_gpu_autotune_level=0
. .devcache/env.sh
mkdir -p $OUT/f $OUT/g
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
$NCU --version > $OUT/f/ncu_version.txt 2>&1
timeout -s INT 240 $NCU --clock-control none --set full --import-source no \
    --kernel-name "regex:flash_fwd_pingpong|flash_fprop" \
    --export $OUT/f/prof --force-overwrite python3 data/bench/flash_ncu/20261127T1738-h200/prof.py > $OUT/f/full.out 2>&1; echo "flash exit $?"
$NCU --import $OUT/f/prof.ncu-rep --page details --csv > $OUT/f/details.csv 2>&1
$NCU --import $OUT/f/prof.ncu-rep --page raw --csv > $OUT/f/raw.csv 2>&1

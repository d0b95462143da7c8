# Call 3 of the 23rd session (carry .devcache; main at cbecd2b+): ncu --set full over workbench's Gluon backward and
# cuDNN's backward at the target, causal and full (the dQ boxes merged).
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 WORKBENCH_AUTOTUNE=table XLA_FLAGS=--xla_gpu_autotune_level=0
. .devcache/env.sh
mkdir -p $OUT/n
nvidia-smi --query-gpu=name --format=csv,noheader
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
$NCU --version > $OUT/n/ncu_version.txt 2>&1
timeout -s INT 300 $NCU --clock-control none --set full --import-source no \
    --kernel-name "regex:flash_bwd_pingpong|flash_bprop|flash_fwd_pingpong|flash_fprop" \
    --export $OUT/n/prof --force-overwrite python3 data/bench/flash_ncu/20261127T1738-h200/prof.py > $OUT/n/full.out 2>&1; echo "full exit $?"
$NCU --import $OUT/n/prof.ncu-rep --page details --csv > $OUT/n/details.csv 2>&1
$NCU --import $OUT/n/prof.ncu-rep --page raw --csv > $OUT/n/raw.csv 2>&1
rm -f $OUT/n/prof.ncu-rep; ls -la $OUT/n; tail -5 $OUT/n/full.out

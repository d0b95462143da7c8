# Call 4 of the 25th session (carry .devcache; tree = main + probe folders): the o-store ablation.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/ablate
P=data/bench/flash_gluon_probe/20261128T1845-h200-ablate
WORKBENCH_AUTOTUNE=table timeout 150 python3 $P/probe_ablate.py > $OUT/ablate/ablate.jsonl 2> $OUT/ablate/ablate.err
echo "probe exit $?"; cat $OUT/ablate/ablate.jsonl; grep -iE "error" $OUT/ablate/ablate.err | grep -v nanobind | head -5

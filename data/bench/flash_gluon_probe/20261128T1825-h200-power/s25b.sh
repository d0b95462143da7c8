# Call 2 of the 25th session: the power/clock probe (issue 47).
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/power
nvidia-smi -q -d POWER,CLOCK | head -60 > $OUT/power/smi_before.txt
timeout 200 python3 data/bench/flash_gluon_probe/20261128T1830-h200-power/probe_power.py 3 > $OUT/power/power.jsonl 2> $OUT/power/power.err
echo "exit $?"; cat $OUT/power/power.jsonl; grep -i error $OUT/power/power.err | head

# call 1 (gla-sweep-b): chunk_gla GPU tests, then the sweeps alone at each config
set -x
source .devcache/env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
t0=$(date +%s)
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT ${TEST_S:-240} python3 -m pytest -q -rA -p no:cacheprovider -m gpu -n 8 tests/chunk_gla > $OUT/gpu_tests.log 2>&1
echo "tests rc $? $(( $(date +%s) - t0 )) s" >> $OUT/walls.txt
t0=$(date +%s)
timeout -s INT ${PROBE_S:-240} python3 .devcache/probe_sweep2.py > $OUT/probe.jsonl 2> $OUT/probe.err
echo "probe rc $? $(( $(date +%s) - t0 )) s" >> $OUT/walls.txt
tail -25 $OUT/gpu_tests.log; cat $OUT/probe.jsonl; tail -3 $OUT/probe.err; cat $OUT/walls.txt

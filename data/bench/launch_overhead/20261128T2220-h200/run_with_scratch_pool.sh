# Call 10 of the 27th session (tree = main + scratch_pool): the launch GPU tests, the launch probe (now the pools
# are set by the launcher at the first scratch launch), and the flash target as 213931Z was run.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/e
WORKBENCH_AUTOTUNE=off timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu_launch.py > $OUT/e/gpu_launch.txt 2>&1; echo "tests exit $?"; tail -3 $OUT/e/gpu_launch.txt
WORKBENCH_AUTOTUNE=table timeout 60 python3 data/bench/launch_overhead/20261128T2220-h200/probe_launch.py > $OUT/e/launch_fixed.jsonl 2> $OUT/e/launch.err; echo "probe exit $?"; cat $OUT/e/launch_fixed.jsonl
timeout 230 python3 -m workbench bench --op flash_attention --shapes target --timer copies --peers --implementations triton \
   --no-variants --paired 10 --settle 2 --errors-from peers --out $OUT/e > $OUT/e/target.txt 2> $OUT/e/target.err; echo "target exit $?"; grep -v "xla\]" $OUT/e/target.txt

# s16 call 5: is synccheck's "divergent threads in block" at the dS barrier about 256-thread bar.sync across partitions?
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 WORKBENCH_AUTOTUNE=off
. .devcache/env.sh
mkdir -p $OUT/e
for mode in sync nonaligned turns; do
  timeout 60 compute-sanitizer --tool synccheck --print-limit 2 python3 .devcache/syncprobe/bars.py $mode > $OUT/e/$mode.log 2>&1; echo "$mode exit $?"; grep -E "^(sync|nonaligned|turns) |Barrier error|ERROR SUMMARY" $OUT/e/$mode.log | head -4
done

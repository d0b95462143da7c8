# s15 call 7: compute-sanitizer over the Gluon forward after 7df440d: memcheck, racecheck, synccheck
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 WORKBENCH_AUTOTUNE=off XLA_PYTHON_CLIENT_ALLOCATOR=platform
. .devcache/env.sh
mkdir -p $OUT/g
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck; do
  timeout 170 $CS --tool $tool --print-limit 20 python3 scripts/every_path.py gluon > $OUT/g/$tool.log 2>&1; echo "$tool exit $?"
  grep -E "^(ok|FAIL)|ERROR SUMMARY|RACECHECK SUMMARY|Invalid|Error|hazard" $OUT/g/$tool.log | grep -v nanobind | tail -12
done

# Call 1 of the 20th session (main 0d41dfb, H100): synccheck + racecheck over the Gluon paths, then the flash GPU file
# without its float32 cases (the Gluon kernels take bf16/f16 only; f32 run the Triton kernels, unchanged since 2026-11-27).
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/s
nvidia-smi --query-gpu=name --format=csv,noheader
git log -1 --format=%h
for tool in synccheck racecheck; do
  ( XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout 110 compute-sanitizer --tool $tool --print-limit 20 \
      python3 scripts/every_path.py gluon > $OUT/s/$tool.log 2>&1; echo "$tool exit $?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^FAIL" $OUT/s/$tool.log | head -5; grep -c "^ok" $OUT/s/$tool.log )
done
( WORKBENCH_AUTOTUNE=off timeout -s INT 340 python3 -m pytest -p no:cacheprovider -m gpu -n 8 tests/flash_attention/test_gpu.py \
    -k "not f32" -rA --junitxml=$OUT/s/gpu.junit.xml > $OUT/s/gpu.log 2>&1; echo "gpu exit $?" ); pkill -f pytest; sleep 1
grep -E "^(FAILED|ERROR)|passed|failed" $OUT/s/gpu.log | tail -8; grep -c "^PASSED" $OUT/s/gpu.log

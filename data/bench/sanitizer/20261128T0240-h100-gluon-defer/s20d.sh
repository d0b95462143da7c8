# Call 4 of the 20th session (main bc4a56e: gluon-next and gla-residuals merged, H100): synccheck over the Gluon
# paths (the forward's new PTX waits), then the flash target record with cuDNN beside it.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/e
nvidia-smi --query-gpu=name --format=csv,noheader
( XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout 100 compute-sanitizer --tool synccheck --print-limit 20 \
      python3 scripts/every_path.py gluon > $OUT/e/synccheck.log 2>&1; echo "synccheck exit $?"; grep -E "ERROR SUMMARY|^FAIL" $OUT/e/synccheck.log | head -5; grep -c "^ok" $OUT/e/synccheck.log )
( WORKBENCH_AUTOTUNE=table timeout 165 python3 -m workbench bench --op flash_attention --shapes target --timer copies --peers \
    --implementations triton --no-variants --out $OUT/e/bench > $OUT/e/target.out 2> $OUT/e/target.err; echo "target exit $?"; grep -E "triton|cudnn" $OUT/e/target.err | grep -v xla )

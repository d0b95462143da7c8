# Call 2 of the 23rd session (carry .devcache; this tree = main with gluon-bwd-dqboxes and kda-statepass-w8 merged):
# synccheck over the Gluon paths alone, then the flash target bench with cuDNN, then chunk_kda at B1 T64k.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/b
nvidia-smi --query-gpu=name --format=csv,noheader
( XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout 170 compute-sanitizer --tool synccheck --print-limit 20 \
    python3 scripts/every_path.py gluon > $OUT/b/synccheck.log 2>&1; echo "synccheck exit $?"; grep -E "ERROR SUMMARY|^FAIL|Barrier error" $OUT/b/synccheck.log | head -5; grep -c "^ok" $OUT/b/synccheck.log )
WORKBENCH_AUTOTUNE=table timeout 220 python3 -m workbench bench --op flash_attention --shapes target --timer copies --peers \
    --implementations triton --variants "triton backward" --out $OUT/b/bench > $OUT/b/flash_target.out 2> $OUT/b/flash_target.err; echo "flash target exit $?"
cat $OUT/b/flash_target.out | cut -c1-200 | head -30
left=$((580 - SECONDS)); echo "kda gets $left s"
WORKBENCH_AUTOTUNE=table timeout $left python3 -m workbench bench --op chunk_kda --shapes sweep --T 65536 --timer copies \
    --implementations triton --no-variants --out $OUT/b/bench > $OUT/b/kda.out 2> $OUT/b/kda.err; echo "kda exit $?"
cat $OUT/b/kda.out | cut -c1-200 | head -20

# s16 call 4: where the default should pick the Gluon backward (D 64, GQA, MQA timings), then compute-sanitizer
# memcheck + synccheck over the Gluon paths (Gluon backward paths added)
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/d
( WORKBENCH_AUTOTUNE=table timeout 250 python3 .devcache/d64/probe_default.py > $OUT/d/default.jsonl 2> $OUT/d/default.err; echo "probe exit $?"; cat $OUT/d/default.jsonl )
for tool in memcheck synccheck; do
( XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout 150 compute-sanitizer --tool $tool --print-limit 20 python3 scripts/every_path.py gluon > $OUT/d/$tool.log 2>&1; echo "$tool exit $?"; grep -E "ERROR SUMMARY|^FAIL" $OUT/d/$tool.log; grep -c "^ok" $OUT/d/$tool.log )
done

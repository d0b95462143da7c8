# Session 33, paired --against runs (after d78f2b8: the other checkout's kernels now hash as ours and find the table).
# RUNS="other:shapes-name ..." ; ratio = main / other (> 1: the other is faster).
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p /tmp/same/main-copy /tmp/fwdnext /tmp/bwitha
[ -d /tmp/same/main-copy/workbench ] || cp -r workbench /tmp/same/main-copy/
rm -rf /tmp/fwdnext/workbench /tmp/bwitha/workbench
tar -xzf .devcache/fwdnext.tgz -C /tmp/fwdnext && tar -xzf .devcache/bwitha.tgz -C /tmp/bwitha
mkdir -p $OUT/a
for run in ${RUNS}; do
  other=${run%%:*}; which=${run##*:}
  if [ $which = t64 ]; then shapes="sweep --T 65536"; else shapes="target --errors-from peers"; fi
  echo "== against $other, $shapes"
  WORKBENCH_AUTOTUNE=${MODE:-table} timeout ${LIMIT:-150} python3 -m workbench bench --op chunk_gla --shapes $shapes --timer copies \
    --paired 10 --settle 1 --implementations triton --no-variants --against $other --out $OUT/a 2>&1 \
    | grep -E "^paired|^B=|Error|error:" | grep -v nanobind
  python3 - $OUT/a <<'P'
import glob, json, os, sys, collections
f = sorted(glob.glob(sys.argv[1] + "/*.json*"), key=os.path.getmtime)[-1]
d = json.load(open(f))
for a in d["against"]:
    au = a.get("autotune") or {}
    print("  against autotune:", a["name"], au.get("stats"), collections.Counter(c["source"] for c in au.get("chosen", [])))
print("  ours:", d["autotune"]["stats"])
for who, au in [("them", a.get("autotune") or {}), ("us", d["autotune"])]:
    for c in au.get("chosen", []):
        k = c["key"]
        print("   ", who, c["kernel"], k.get("programs"), k.get("REVERSE", ""), c["config"]["kwargs"], c["config"]["num_warps"], c["config"]["num_stages"], c["source"])
P
done

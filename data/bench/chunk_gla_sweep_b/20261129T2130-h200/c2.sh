# call 2 (gla-sweep-b): the sweeps alone at each config (raw tiles carried), and main's cumsum + sweep beside them
set -x
source .devcache/env.sh
mkdir -p /tmp/main && tar -xzf .devcache/main.tgz -C /tmp/main
cp .devcache/probe_sweep2.py /tmp/main/
t0=$(date +%s)
timeout -s INT 200 python3 .devcache/probe_sweep2.py > $OUT/probe.jsonl 2> $OUT/probe.err
echo "probe rc $? $(( $(date +%s) - t0 )) s" >> $OUT/walls.txt
(cd /tmp/main && PYTHONPATH=/tmp/t39:/tmp/main timeout -s INT 100 python3 probe_sweep2.py > $OUT/probe_main.jsonl 2> $OUT/probe_main.err)
echo "probe main rc $?" >> $OUT/walls.txt
python3 - <<'PY'
import json, os
for f in ("probe_main.jsonl", "probe.jsonl"):
    for line in open(os.path.join(os.environ["OUT"], f)):
        r = json.loads(line)
        print(f[:10], {k: r[k] for k in r if k in ("tree","B","reverse","nseg","BK","BV","warps","stages","ms","error","max_abs_b_vs_first")})
PY
tail -3 $OUT/probe.err $OUT/probe_main.err; cat $OUT/walls.txt

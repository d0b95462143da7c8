# s15 call 3: ncu profiles of workbench's and cuDNN's flash kernels at the target shape (issue 47's per-kernel profile)
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 WORKBENCH_AUTOTUNE=table XLA_FLAGS=--xla_gpu_autotune_level=0
. .devcache/env.sh
mkdir -p $OUT/n
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
$NCU --version > $OUT/n/ncu_version.txt 2>&1
# 1) every kernel's duration (one pass each)
timeout 200 $NCU --clock-control none --csv --metrics gpu__time_duration.sum --log-file $OUT/n/list.csv python3 .devcache/prof/prof.py > $OUT/n/list.out 2>&1; echo "list exit $?"
python3 - $OUT/n/list.csv > $OUT/n/regex.txt <<'PY'
import csv, sys, re
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: sys.exit(0)
hdr = rows[0]; ki = hdr.index("Kernel Name"); vi = hdr.index("Metric Value"); ui = hdr.index("Metric Unit")
names = {}
for r in rows[1:]:
    v = float(r[vi].replace(",", "")); u = r[ui]
    us = v / 1e3 if u in ("nsecond", "ns") else v if u in ("usecond", "us") else v * 1e3
    print(f"{us:10.1f} us  {r[ki][:160]}", file=sys.stderr)
    if us > 80: names[r[ki].split("(")[0].split("<")[0].strip().split()[-1]] = 1
print("|".join(re.escape(n) for n in names))
PY
# 2) the long kernels in full
timeout 300 $NCU --clock-control none --set full --import-source no --kernel-name "regex:$(cat $OUT/n/regex.txt)" --export $OUT/n/prof --force-overwrite python3 .devcache/prof/prof.py > $OUT/n/full.out 2>&1; echo "full exit $?"
$NCU --import $OUT/n/prof.ncu-rep --page details --csv > $OUT/n/details.csv 2>&1
$NCU --import $OUT/n/prof.ncu-rep --page raw --csv > $OUT/n/raw.csv 2>&1
ls -la $OUT/n
cd $OUT && tar -czf n.tgz n && rm -rf n

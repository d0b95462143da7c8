# call G: compile-ahead on a GPU. The same tune (chunk_gla, its five autotuned kernels, target bf16 K=V=128) in
# two fresh caches: compiled ahead in child processes (first), then compiled one by one as timed (second).
# Then the PTX of every kernel both stored, compared.
source .devcache/env.sh
nproc
for w in ahead plain; do
  rm -rf /tmp/tab_$w /tmp/cache_$w && cp -r workbench/tuning /tmp/tab_$w
  [ $w = plain ] && export WORKBENCH_COMPILE_AHEAD=0
  t0=$(date +%s.%N)
  WORKBENCH_CACHE_DIR=/tmp/cache_$w timeout -s INT 130 python3 -m workbench tune --write-table --op chunk_gla --shapes target --dtypes bfloat16 --head-dims 128 --kernels chunk_dqkg_kernel,chunk_dv_kernel,chunk_o_kernel,chunk_h_kernel,chunk_dh_kernel --folder /tmp/tab_$w > $OUT/tune_$w.log 2>&1
  echo "tune $w rc $? $(python3 -c "import time; print(round(time.time() - $t0, 1))") s" | tee -a $OUT/walls.txt
done
unset WORKBENCH_COMPILE_AHEAD
python3 - <<'PY' | tee $OUT/compare.txt
import json, pathlib
a = {p.name: json.loads(p.read_text()) for p in pathlib.Path("/tmp/cache_plain/kernels").glob("*.json")}
b = {p.name: json.loads(p.read_text()) for p in pathlib.Path("/tmp/cache_ahead/kernels").glob("*.json")}
both = sorted(set(a) & set(b))
same = [n for n in both if a[n]["binary"] == b[n]["binary"] and a[n]["shared"] == b[n]["shared"]]
print("kernels stored: plain", len(a), "ahead", len(b), "in both", len(both), "same PTX", len(same))
for n in both:
    if n not in same: print("differs", n)
ta = json.load(open("/tmp/tab_plain/NVIDIA_H200.json")); tb = json.load(open("/tmp/tab_ahead/NVIDIA_H200.json"))
def pick(t): return {(e["kernel"], json.dumps(e["key"], sort_keys=True)): json.dumps(e["config"], sort_keys=True) for e in t if e["kernel"].startswith("chunk_")}
pa, pb = pick(ta), pick(tb)
print("table entries differing between the two tunes:", sum(pa[k] != pb.get(k) for k in pa))
PY
grep -h "chose\|tuned" $OUT/tune_ahead.log | head -8

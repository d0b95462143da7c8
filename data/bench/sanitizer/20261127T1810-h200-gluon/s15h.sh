# s15 call 8: racecheck, the Gluon forward before 7df440d against after, one path each
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 WORKBENCH_AUTOTUNE=off XLA_PYTHON_CLIENT_ALLOCATOR=platform
. .devcache/env.sh
mkdir -p $OUT/h
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
P="gluon Tq=100 Tk=100 H=4/2 D=128 causal=True"
timeout 120 $CS --tool racecheck --print-limit 40 python3 scripts/every_path.py "$P" > $OUT/h/new.log 2>&1; echo "new exit $?"
cp .devcache/old_gluon_kernels.py workbench/flash_attention/gluon_kernels.py
timeout 120 $CS --tool racecheck --print-limit 40 python3 scripts/every_path.py "$P" > $OUT/h/old.log 2>&1; echo "old exit $?"
for f in new old; do echo "== $f"; grep -E "^ok|^FAIL|RACECHECK SUMMARY|Race reported" $OUT/h/$f.log | sed 's/See https.*refleaks.html//' | tail -12; done

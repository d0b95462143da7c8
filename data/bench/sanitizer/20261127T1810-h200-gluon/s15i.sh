# s15 call 9: memcheck over the Gluon paths on 7df440d (the first try segfaulted in XLA's compile of isfinite)
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 WORKBENCH_AUTOTUNE=off XLA_PYTHON_CLIENT_ALLOCATOR=platform
. .devcache/env.sh
mkdir -p $OUT/i
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
python3 -c "import workbench.flash_attention.gluon_kernels as g; print('TURNS' , g.TURNS)"
timeout 240 $CS --tool memcheck --print-limit 20 python3 scripts/every_path.py gluon > $OUT/i/memcheck.log 2>&1; echo "memcheck exit $?"
grep -E "^(ok|FAIL)|ERROR SUMMARY|Invalid|Segm" $OUT/i/memcheck.log | sed 's/See https.*refleaks.html//' | tail -12

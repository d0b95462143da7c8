# s16 call 2: bisect the Gluon backward's illegal instruction (non-causal D64 T777 f16 failed; contexts poisoned after)
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 WORKBENCH_AUTOTUNE=off
. .devcache/env.sh
mkdir -p $OUT/b
one() { timeout 90 python3 .devcache/bisect/one.py "$@" 2>>$OUT/b/err.log | tail -1; }
one 1 777 4 4 64 float16 0
one 1 777 4 4 64 float16 0 triton
one 1 777 4 4 64 bfloat16 0
one 1 768 4 4 64 float16 0
one 1 1024 4 4 64 bfloat16 0
one 1 777 4 4 64 float16 1
one 1 777 4 4 128 float16 0
one 1 777 4 4 128 bfloat16 0
one 3 5 2 2 128 bfloat16 1
one 1 200 4 4 64 bfloat16 0
timeout 200 compute-sanitizer --tool memcheck --print-limit 20 python3 .devcache/bisect/one.py 1 777 4 4 64 float16 0 > $OUT/b/memcheck.log 2>&1; echo "memcheck exit $?"; grep -E "=========" $OUT/b/memcheck.log | head -30

# Call 1 of the next session: `git checkout gla-next` (gla-resweep-o + gla-dqkg + main), carry [".devcache"],
# refresh .devcache/main_tree first: rm -rf .devcache/main_tree; mkdir -p .devcache/main_tree;
#   git archive main workbench scripts | tar -x -C .devcache/main_tree
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/n
nvidia-smi --query-gpu=name --format=csv,noheader
# 1. per-kernel device time, main's chunk_gla against gla-next's default path (chunk_dqkg_kernel rewritten)
for tree in main next; do
  root=$PWD; [ $tree = main ] && root=$PWD/.devcache/main_tree
  PYTHONPATH=/tmp/t39:$root WORKBENCH_AUTOTUNE=table timeout 150 python3 $root/scripts/op_profile.py --op chunk_gla \
    --shape B=1,T=65536,H=16,K=64,V=64 --passes forward,forward_backward --top 12 > $OUT/n/prof_gla_$tree.txt 2>&1
  echo "profile $tree exit $?"; grep -E "per call|dqkg|resweep" $OUT/n/prof_gla_$tree.txt
done
# 2. the GPU tests of chunk_gla on gla-next (the dqkg rewrite in every case; the fused output's 4 cases)
( WORKBENCH_AUTOTUNE=off timeout -s INT 200 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 \
    tests/chunk_gla/test_gpu.py -rA --durations=20 > $OUT/n/gla_gpu.log 2>&1; echo "gla gpu exit $?" ); pkill -f pytest; sleep 2
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/n/gla_gpu.log | tail -25

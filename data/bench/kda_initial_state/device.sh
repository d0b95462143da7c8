# One device call (H200): the patch's GPU tests, then forward+backward with an initial state, main against the
# patched tree, alternated. `.devcache` carried (slim Triton 3.9.0: data/bench/kda_h16/env.sh). Apply the patch
# first (`git apply data/bench/kda_initial_state/whole_in_with_h0.patch`); main is .devcache/main.tgz.
set -x
source .devcache/env.sh
mkdir -p /tmp/main && tar xzf .devcache/main.tgz -C /tmp/main
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 250 \
  python3 -m pytest -q -rA -p no:cacheprovider -m gpu -n 16 tests/kda > $OUT/gpu_tests.log 2>&1
tail -3 $OUT/gpu_tests.log
for round in 1 2; do
  for tree in /tmp/main $PWD; do
    for shape in B=8,T=4096,H=16,K=128,V=128 B=1,T=65536,H=16,K=128,V=128; do
      PYTHONPATH=/tmp/t39:$tree timeout 120 python3 data/bench/kda_initial_state/probe.py --shape $shape \
        2>/dev/null | tee -a $OUT/probe.jsonl
    done
  done
done

# One device call (H200): kda's GPU tests, the per-kernel profile, then paired forward+backward against main.
# Run from the repository root with `.devcache` carried (slim Triton 3.9.0, main's workbench as main.tgz).
set -x
source .devcache/env.sh
mkdir -p /tmp/main && tar xzf .devcache/main.tgz -C /tmp/main
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
if [ "$1" = tests ] || [ "$1" = all ]; then
  XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 260 \
    python3 -m pytest -q -rA -p no:cacheprovider -m gpu -n 16 tests/kda > $OUT/gpu_tests.log 2>&1
  tail -3 $OUT/gpu_tests.log
  [ "$1" = tests ] && WORKBENCH_AUTOTUNE=table timeout 200 python3 scripts/op_profile.py --op chunk_kda \
    --shape B=1,T=65536,H=16,K=128,V=128 --passes forward_backward --copies 4 > $OUT/profile_t64k.log 2>&1
  tail -25 $OUT/profile_t64k.log
fi
if [ "$1" = pair ] || [ "$1" = all ]; then
  for set in "--shapes target" "--shapes sweep --T 65536"; do
    WORKBENCH_AUTOTUNE=table timeout 280 python3 -m workbench bench --op chunk_kda $set --implementations triton \
      --no-variants --timer device --paired 5 --errors-from peers --against /tmp/main --out $OUT 2>&1 | tail -30
  done
fi
if [ "$1" = probe ]; then
  WORKBENCH_AUTOTUNE=table timeout 400 python3 data/bench/chunk_kda_bwd_prep/probe_configs.py > $OUT/probe_configs.log 2>&1
  cat $OUT/probe_configs.log | grep -v Warning | tail -20
fi

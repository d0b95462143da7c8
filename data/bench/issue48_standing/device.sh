# One device call (H200) for issue 48's standing on main: the tuning table's configs against the float64 oracle
# (the two GPU tests that run them), then chunk_gla's and chunk_kda's bench rows at the target and B1 T64k.
# Run from the repository root with `.devcache` carried (slim Triton 3.9.0 and env.sh: data/bench/kda_h16/env.sh).
set -x
source .devcache/env.sh
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 280 python3 -m pytest -q -rA -s \
  -p no:cacheprovider -m gpu -n 2 -k tuning_table_configs tests/kda/test_gpu.py tests/chunk_gla/test_gpu.py \
  > $OUT/table_tests.log 2>&1
tail -3 $OUT/table_tests.log
for op in chunk_gla chunk_kda; do
  for set in "--shapes target" "--shapes sweep --T 65536"; do
    WORKBENCH_AUTOTUNE=table timeout 150 python3 -m workbench bench --op $op $set --implementations triton \
      --no-variants --timer device --out $OUT 2>&1 | tail -6
  done
done

# call 5 (H200): with 16-bit training states, dg's state term takes the entering state unrounded
# (`_precision.entering_state_term`): chunk_gla's and chunk_kda's GPU tests (most with an initial state) and the
# new oracle cases, compiled, in one pytest run
source .devcache/env.sh
t0=$(date +%s)
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 300 python3 -m pytest -q -rA -p no:cacheprovider -n 16 \
  tests/chunk_gla/test_gpu.py tests/kda/test_gpu.py \
  "tests/chunk_gla/test_chunk_gla.py::test_the_entering_state_reaches_the_log_decay_gradient_unrounded" \
  "tests/kda/test_kda.py::test_the_entering_state_reaches_the_gate_gradient_unrounded" > $OUT/tests.log 2>&1
echo "tests rc $? $(( $(date +%s) - t0 )) s" | tee -a $OUT/walls.txt
grep -E "passed|failed" $OUT/tests.log | tail -3

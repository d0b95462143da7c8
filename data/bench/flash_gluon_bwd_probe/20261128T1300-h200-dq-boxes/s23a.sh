# Call 1 of the 23rd session (carry .devcache): the dQ-boxes probe (branch gluon-bwd-dqboxes = this tree) and the
# kda state pass probe alone, then the branch's flash GPU tests, kda's two-level tests on main + kda-statepass-w8,
# and synccheck on the Gluon paths side by side.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/a
nvidia-smi --query-gpu=name --format=csv,noheader
P=data/bench/flash_gluon_bwd_probe/next-dq-boxes
WORKBENCH_AUTOTUNE=table timeout 250 python3 $P/probe_boxes.py > $OUT/a/boxes.jsonl 2> $OUT/a/boxes.err; echo "boxes exit $?"
cut -c1-420 $OUT/a/boxes.jsonl; grep -iE "error" $OUT/a/boxes.err | head -5
WORKBENCH_AUTOTUNE=off timeout 80 python3 .devcache/probe_state_pass.py > $OUT/a/state_pass.jsonl 2> $OUT/a/state_pass.err; echo "state pass exit $?"
cut -c1-300 $OUT/a/state_pass.jsonl; grep -iE "error" $OUT/a/state_pass.err | head -3
rm -rf /tmp/tkda && mkdir /tmp/tkda && cp -r LICENSE README.md pyproject.toml scripts tests workbench /tmp/tkda/ && cp .devcache/alt/kda_init_w8.py /tmp/tkda/workbench/kda/__init__.py
left=$((585 - SECONDS)); echo "tests get $left s"
( WORKBENCH_AUTOTUNE=off timeout -s INT $left python3 -m pytest -p no:cacheprovider -m gpu -n 6 tests/flash_attention/test_gpu.py \
    -k "gluon_backward or default_backward or target or (kernel_within_budget and bf16)" -rA > $OUT/a/flash_tests.log 2>&1; echo "flash tests exit $?" ) &
( cd /tmp/tkda && PYTHONPATH=/tmp/t39:/tmp/tkda WORKBENCH_AUTOTUNE=off timeout -s INT $left python3 -m pytest -p no:cacheprovider -m gpu -n 2 \
    tests/kda/test_gpu.py -k "two_level or recompute" -rA > $OUT/a/kda_tests.log 2>&1; echo "kda tests exit $?" ) &
( XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout $((left - 20)) compute-sanitizer --tool synccheck --print-limit 20 \
    python3 scripts/every_path.py gluon > $OUT/a/synccheck.log 2>&1; echo "synccheck exit $?"; grep -E "ERROR SUMMARY|^FAIL" $OUT/a/synccheck.log ) &
wait; pkill -f pytest
for f in flash_tests kda_tests; do echo "== $f"; grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/a/$f.log | sed 's/tests.*test_gpu.py:://' | tail -24; done

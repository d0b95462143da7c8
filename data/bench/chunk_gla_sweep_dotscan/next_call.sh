# next device call (branch gla-sweep-dotscan, ~5 min on one H200): the sweeps alone, branch and main, then
# chunk_gla's GPU tests on the branch. Carry .devcache/{env.sh,triton390.tar.xz,main.tgz} (main.tgz: `git archive
# --format=tar.gz main workbench`).
source .devcache/env.sh > /dev/null
mkdir -p /tmp/main && tar -xzf .devcache/main.tgz -C /tmp/main
P=data/bench/chunk_gla_sweep_dotscan/probe.py
timeout -s INT 150 python3 $P > $OUT/probe_branch.jsonl 2> $OUT/probe_branch.err
PYTHONPATH=/tmp/t39:/tmp/main timeout -s INT 150 python3 $P > $OUT/probe_main.jsonl 2> $OUT/probe_main.err
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 200 python3 -m pytest -q -rA \
  -p no:cacheprovider -m gpu -n 8 tests/chunk_gla > $OUT/gpu_tests.log 2>&1
tail -3 $OUT/gpu_tests.log; paste -d'\n' $OUT/probe_branch.jsonl $OUT/probe_main.jsonl | cut -c1-230

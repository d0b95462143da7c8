source .devcache/env.sh >/dev/null
rm -rf /tmp/main && mkdir -p /tmp/main && tar -xzf .devcache/main.tgz -C /tmp/main
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 200 python3 -m pytest -q -rA -p no:cacheprovider -m gpu -n 16 tests/kda > $OUT/gpu_tests.log 2>&1
tail -2 $OUT/gpu_tests.log
export WORKBENCH_AUTOTUNE=table
timeout 100 python3 -m workbench bench --op chunk_kda --shapes sweep --T 65536 --implementations triton --no-variants --timer device --paired 5 --errors-from peers --against /tmp/main --out $OUT > $OUT/bench_64k.log 2>&1
grep -h "paired:\|residual" $OUT/bench_64k.log | head

source .devcache/env.sh >/dev/null
rm -rf /tmp/main && mkdir -p /tmp/main && tar -xzf .devcache/main.tgz -C /tmp/main
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 240 python3 -m pytest -q -rA -p no:cacheprovider -m gpu -n 8 tests/chunk_gla > $OUT/gpu_tests.log 2>&1
tail -3 $OUT/gpu_tests.log
export WORKBENCH_AUTOTUNE=table
timeout 100 python3 scripts/op_profile.py --op chunk_gla --shape B=8,T=4096,H=16,K=64,V=64 --passes forward,forward_backward --copies 8 > $OUT/profile_target.txt 2>&1
B="python3 -m workbench bench --op chunk_gla --implementations triton --no-variants --timer device --paired 7 --errors-from peers --against /tmp/main --out $OUT"
timeout 150 $B --shapes target > $OUT/bench_target.log 2>&1
timeout 150 $B --shapes sweep --T 65536 > $OUT/bench_64k.log 2>&1
grep -h "paired:" $OUT/bench_*.log
grep -h "chunk_a_kernel\|chunk_dqk_intra\|device busy" $OUT/profile_target.txt

# branch gla-b-local: the rest of the grid for the four changed kernels, GPU tests, pairing (~12 min, two calls:
# `bash next_call.sh 1`, then `bash next_call.sh 2`). Carry .devcache/{env.sh,triton390.tar.xz,main.tgz}.
source .devcache/env.sh > $OUT/walls.txt 2>&1
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; cp workbench/tuning/NVIDIA_H200.json $OUT/; }
KS=chunk_h_kernel,chunk_dh_kernel,chunk_segment_sweep_kernel,chunk_o_kernel
tune() { timeout -s INT "$1" python3 -m workbench tune --write-table --op chunk_gla --kernels $KS "${@:2}" >> $OUT/tune.log 2>&1; w "$* rc=$?"; }
if [ "$1" = 1 ]; then
  tune 160 --shapes sweep --T 8192,16384,32768,65536 --dtypes bfloat16
  tune 260 --shapes target --dtypes bfloat16 --head-dims 128,256
  tune 130 --shapes target --dtypes float32 --head-dims 64,128
else
  tune 300 --shapes target --dtypes float16 --head-dims 64,128,256
  mkdir -p /tmp/main && rm -rf /tmp/main/workbench && tar -xzf .devcache/main.tgz -C /tmp/main
  XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 200 python3 -m pytest -q -rA \
    -p no:cacheprovider -m gpu -n 8 tests/chunk_gla > $OUT/gpu_tests.log 2>&1; w "tests rc=$?"
  for s in "--shapes target" "--shapes sweep --T 65536"; do
    timeout -s INT 80 python3 -m workbench bench --op chunk_gla $s --implementations triton --no-variants \
      --timer copies --paired 7 --errors-from peers --against /tmp/main >> $OUT/bench.log 2>&1; w "bench $s rc=$?"
  done
fi
cat $OUT/walls.txt; grep -h "tuned" $OUT/tune.log; tail -2 $OUT/gpu_tests.log 2>/dev/null; grep -h "^paired" $OUT/bench.log 2>/dev/null

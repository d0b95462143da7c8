# Next session, call 2, on an H200 (tree = gla-forward-next), if call 1's probes pay: the changed kernels' H200 table
# entries (chunk_a_kernel, chunk_dqk_intra_kernel: source changed; chunk_o_kernel: new hs dtypes; the three sweep
# kernels: a fifth config), the chunk_gla GPU file. The target bench: s30c.sh. The H100 needs the same tune commands before the branch can merge.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/g
KS=chunk_a_kernel,chunk_dqk_intra_kernel,chunk_o_kernel,chunk_h_kernel,chunk_dh_kernel,chunk_segment_sweep_kernel
( timeout 300 python3 -m workbench tune --write-table --op chunk_gla --shapes target,sweep --kernels $KS &&
  timeout 150 python3 -m workbench tune --write-table --op chunk_gla --shapes target --dtypes bfloat16,float16 \
      --head-dims 64,128,256 --kernels $KS &&
  timeout 100 python3 -m workbench tune --write-table --op chunk_gla --shapes target --dtypes float32 \
      --head-dims 64,128 --kernels $KS ) > $OUT/g/tune.txt 2>&1; echo "tune exit $?"; tail -3 $OUT/g/tune.txt
cp workbench/tuning/NVIDIA_H200.json $OUT/g/
WORKBENCH_AUTOTUNE=off timeout -s INT 150 python3 -m pytest -p no:cacheprovider -m gpu -n 6 tests/chunk_gla/test_gpu.py \
    -rA > $OUT/g/gla_gpu.log 2>&1; echo "tests exit $?"
pkill -f pytest
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/g/gla_gpu.log | sed 's/tests.*test_gpu.py:://' | tail -25

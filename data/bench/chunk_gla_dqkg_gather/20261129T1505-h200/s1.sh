# call 1: chunk_gla GPU tests (gathered X shift in chunk_dqkg_kernel), then the dqkg tune at the target grid
set -x
source .devcache/env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
python3 -m pip list 2>/dev/null | grep -iE "^(jax|jaxlib|jax-cuda|pytest|hypothesis|pytest-xdist|numpy) " > $OUT/pip.txt
t0=$(date +%s)
XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT ${TEST_S:-270} python3 -m pytest -q -rA -p no:cacheprovider -m gpu -n 8 tests/chunk_gla > $OUT/tests.log 2>&1
echo "tests rc $? $(( $(date +%s) - t0 )) s" >> $OUT/walls.txt
t0=$(date +%s)
timeout -s INT ${TUNE_S:-250} python3 -m workbench tune --write-table --op chunk_gla --kernels chunk_dqkg_kernel --shapes target --dtypes ${DTYPES:-bfloat16,float16} --head-dims ${DIMS:-64,128,256} > $OUT/tune.log 2>&1
echo "tune rc $? $(( $(date +%s) - t0 )) s" >> $OUT/walls.txt
mkdir -p $OUT/g && cp workbench/tuning/NVIDIA_H200.json $OUT/g/
tail -3 $OUT/tests.log $OUT/tune.log

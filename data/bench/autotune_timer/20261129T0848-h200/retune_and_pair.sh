# chunk_kda's two backward kernels timed again on Triton 3.9 (their H200 entries were timed on 3.6 and spill on 3.9),
# then main with the new entries paired against main with the old ones (.devcache/main.tgz). Tree = main; no code
# change, so no grid to fill. Ratio = new table / old table: < 1 means the retune is faster.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
export WORKBENCH_CACHE_DIR=/tmp/cache_$$
echo "== fallback test"; timeout 120 python3 -m pytest -q tests/test_gpu_launch.py -k falls_back 2>&1 | tail -3
mkdir -p $OUT/k /tmp/mainco && rm -rf /tmp/mainco/workbench && tar -xzf .devcache/main.tgz -C /tmp/mainco
timeout ${TUNE_S:-300} python3 -m workbench tune --write-table --op chunk_kda --shapes target,sweep --T 4096,32768,65536 \
    --kernels chunk_kda_bwd_intra_kernel,chunk_kda_bwd_wy_dqkg_fused_kernel 2>&1 | grep -vE "^[EWI]1129" | tail -6
cp workbench/tuning/NVIDIA_H200.json $OUT/k/
for shapes in "sweep --T 65536" "target --errors-from peers"; do
  echo "== $shapes"
  WORKBENCH_CACHE_DIR=/tmp/cb_$$ WORKBENCH_AUTOTUNE=table timeout ${LIMIT:-200} python3 -m workbench bench --op chunk_kda --shapes $shapes --timer copies \
    --paired ${ROUNDS:-8} --settle 1 --implementations triton --no-variants --against /tmp/mainco --out $OUT/k 2>&1 \
    | grep -E "^paired|^B=|^configs|^note|Error|error:" | grep -v nanobind
done

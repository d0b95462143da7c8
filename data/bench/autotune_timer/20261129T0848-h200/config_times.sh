# chunk_kda at B1 T64k: the tuner's isolated timings of its two backward kernels (disk cache copied out), then each
# config alone inside the op's forward+backward (scripts/config_times.py): does the tuner's choice hold in the op?
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/c
WORKBENCH_CACHE_DIR=/tmp/ct_$$ timeout 150 python3 -m workbench tune --op chunk_kda --shapes sweep --T 65536 \
    --kernels chunk_kda_bwd_intra_kernel,chunk_kda_bwd_wy_dqkg_fused_kernel 2>&1 | grep -vE "^[EWI]1129" | tail -3
cp -r /tmp/ct_$$ $OUT/c/cache
for k in chunk_kda_bwd_intra_kernel chunk_kda_bwd_wy_dqkg_fused_kernel; do
  WORKBENCH_CACHE_DIR=/tmp/cx_$$ WORKBENCH_AUTOTUNE=table timeout 200 python3 scripts/config_times.py --op chunk_kda \
    --shapes sweep --T 65536 --kernel workbench.kda.backward_kernels:$k --iters 5 --reps 5 --out $OUT/c/$k.json 2>&1 \
    | grep -vE "^[EWI]1129|nanobind" | tail -8
done

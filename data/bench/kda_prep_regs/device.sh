# Device calls (H200) for chunk_kda_fwd_prep_kernel (README.md). Run from the repository root with `.devcache`
# carried (slim Triton 3.9.0 and its env, main's workbench as main.tgz: `git archive HEAD workbench`).
#   bash data/bench/kda_prep_regs/device.sh tune|validate|pair|tests ...   (several modes in one call, in order)
#   bash data/bench/kda_prep_regs/device.sh profile_ab        this tree's forward against main's, kernel by kernel
#   bash data/bench/kda_prep_regs/device.sh profile_ablate    the prep's phases left out one at a time (ablations.py)
set -x
source .devcache/env.sh
mkdir -p /tmp/main && tar xzf .devcache/main.tgz -C /tmp/main
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
for mode in "$@"; do
case "$mode" in
tune)  # the prep kernel over the target and the sweep, bf16 (its key: H, K, V, BT and the grid)
  timeout 300 python3 -m workbench tune --write-table --op chunk_kda \
    --kernels ${KERNELS:-chunk_kda_fwd_prep_kernel} --shapes ${TUNE_SHAPES:-target,sweep} --dtypes bfloat16 > $OUT/tune.log 2>&1
  grep "^tune:" $OUT/tune.log | tail -12; tail -2 $OUT/tune.log; cp workbench/tuning/NVIDIA_H200.json $OUT/ ;;
validate)  # the table's configs against the first ones (those the GPU tests run), at the target and B1 T64k
  WORKBENCH_AUTOTUNE=off timeout 200 python3 data/bench/chunk_gla_o_fixup/table_vs_first.py --op chunk_kda --save /tmp/first.npz
  WORKBENCH_AUTOTUNE=table timeout 200 python3 data/bench/chunk_gla_o_fixup/table_vs_first.py --op chunk_kda --save /tmp/table.npz
  python3 data/bench/chunk_gla_o_fixup/table_vs_first.py --compare /tmp/first.npz /tmp/table.npz | tee $OUT/table_vs_first.txt ;;
tests)
  XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 250 \
    python3 -m pytest -q -rA -p no:cacheprovider -m gpu -n 16 tests/kda > $OUT/gpu_tests.log 2>&1
  tail -3 $OUT/gpu_tests.log ;;
pair)
  for set in "--shapes target" "--shapes sweep --T ${PAIR_T:-65536}"; do
    WORKBENCH_AUTOTUNE=${AT:-table} timeout 250 python3 -m workbench bench --op chunk_kda $set --implementations triton \
      --no-variants --timer device --paired 5 --errors-from peers --against /tmp/main --out $OUT 2>&1 | tail -12
  done ;;
profile)
  for shape in ${PROFILE_SHAPES:-B=8,T=4096,H=16,K=128,V=128}; do
    WORKBENCH_AUTOTUNE=table timeout 150 python3 scripts/op_profile.py --op chunk_kda --shape $shape \
      --passes forward,forward_backward --copies 4 > $OUT/profile_${shape//[=,]/_}.txt 2>&1
    tail -30 $OUT/profile_${shape//[=,]/_}.txt
  done ;;
esac
done
# profile_ab: the forward at the target, kernel by kernel, for this tree and for main's (/tmp/main), one process each
if [ "$1" = profile_ab ]; then
  S=${PROFILE_SHAPE:-B=8,T=4096,H=16,K=128,V=128}
  WORKBENCH_AUTOTUNE=table timeout 200 python3 scripts/op_profile.py --op chunk_kda --shape $S --passes forward \
    --copies 4 > $OUT/profile_new.txt 2>&1; tail -14 $OUT/profile_new.txt
  cp -r scripts /tmp/main/ && (cd /tmp/main && WORKBENCH_AUTOTUNE=table PYTHONPATH=/tmp/t39:/tmp/main timeout 150 \
    python3 scripts/op_profile.py --op chunk_kda --shape $S --passes forward --copies 4 > $OUT/profile_main.txt 2>&1)
  tail -14 $OUT/profile_main.txt
fi
# profile_ablate: the forward at the target with the prep kernel's phases left out one at a time (trees made by
# ablations.py into .devcache/ablations.tgz), every kernel at its first config (WORKBENCH_AUTOTUNE=off); or any
# other trees: ABL_TGZ (in .devcache), ABLATIONS (their names), AT (the autotune mode, e.g. table), PASSES
# (forward_backward for a backward kernel) and KERNEL (whose line to print), e.g. the fused backward's phases:
#   python data/bench/kda_prep_regs/ablations.py /tmp/ablb bwd && tar czf .devcache/ablations_bwd.tgz -C /tmp/ablb .
#   ABL_TGZ=ablations_bwd.tgz ABLATIONS="no_dAqk no_wyv no_inter no_outputs no_dL" PASSES=forward_backward \
#     KERNEL=chunk_kda_bwd_wy_dqkg_fused_kernel bash data/bench/kda_prep_regs/device.sh profile_ablate
if [ "$1" = profile_ablate ]; then
  S=B=8,T=4096,H=16,K=128,V=128
  mkdir -p /tmp/abl && tar xzf .devcache/${ABL_TGZ:-ablations.tgz} -C /tmp/abl
  for v in full ${ABLATIONS:-noinv nowu nointra}; do
    dir=$PWD; [ $v = full ] || dir=/tmp/abl/$v
    (cd $dir && WORKBENCH_AUTOTUNE=${AT:-off} PYTHONPATH=/tmp/t39:$dir timeout ${ABL_TIMEOUT:-70} python3 scripts/op_profile.py --op chunk_kda \
      --shape $S --passes ${PASSES:-forward} --copies 4 --iters 5 --reps 5 > $OUT/ablate_$v.txt 2>&1)
    grep -E "device busy" $OUT/ablate_$v.txt | head -1
    echo "$v: $(grep -E "×  ${KERNEL:-chunk_kda_fwd_prep_kernel}\$" $OUT/ablate_$v.txt | head -1)"
  done
fi

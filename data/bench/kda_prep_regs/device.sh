# Device calls (H200) that time chunk_kda kernels against other trees (README.md). Run from the repository root with
# `.devcache` carried (slim Triton 3.9.0 and its env, main's workbench as main.tgz: `git archive HEAD workbench`).
# The op's tune, tests, pair, validate and profile modes: OP=chunk_kda bash data/bench/chunk_gla_o_fixup/device.sh.
#   bash data/bench/kda_prep_regs/device.sh profile_ab        this tree's forward against main's, kernel by kernel
#   bash data/bench/kda_prep_regs/device.sh profile_ablate    copies of the package (ablations.py), each in turn:
# the forward at the target with the prep kernel's phases left out one at a time (.devcache/ablations.tgz), every
# kernel at its first config (WORKBENCH_AUTOTUNE=off); or any other trees: ABL_TGZ (in .devcache), ABLATIONS (their
# names), AT (the autotune mode, e.g. table), PASSES (forward_backward for a backward kernel) and KERNEL (whose line
# to print), e.g. the fused backward's phases:
#   python data/bench/kda_prep_regs/ablations.py /tmp/ablb bwd && tar czf .devcache/ablations_bwd.tgz -C /tmp/ablb .
#   ABL_TGZ=ablations_bwd.tgz ABLATIONS="no_dAqk no_wyv no_inter no_outputs no_dL" PASSES=forward_backward \
#     KERNEL=chunk_kda_bwd_wy_dqkg_fused_kernel bash data/bench/kda_prep_regs/device.sh profile_ablate
# and the intra backward's phases, at the table's configs (the ablated kernel tuned at its first call):
#   python data/bench/kda_prep_regs/ablations.py /tmp/abli intra && tar czf .devcache/ablations_intra.tgz -C /tmp/abli .
#   ABL_TGZ=ablations_intra.tgz ABLATIONS="no_in no_mats no_products no_exps" PASSES=forward_backward AT=table \
#     ABL_TIMEOUT=150 KERNEL=chunk_kda_bwd_intra_kernel bash data/bench/kda_prep_regs/device.sh profile_ablate
set -x
source .devcache/env.sh
mkdir -p /tmp/main && tar xzf .devcache/main.tgz -C /tmp/main
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
S=${PROFILE_SHAPE:-B=8,T=4096,H=16,K=128,V=128}
if [ "$1" = profile_ab ]; then
  WORKBENCH_AUTOTUNE=table timeout 200 python3 scripts/op_profile.py --op chunk_kda --shape $S --passes forward \
    --copies 4 > $OUT/profile_new.txt 2>&1; tail -14 $OUT/profile_new.txt
  cp -r scripts /tmp/main/ && (cd /tmp/main && WORKBENCH_AUTOTUNE=table PYTHONPATH=/tmp/t39:/tmp/main timeout 150 \
    python3 scripts/op_profile.py --op chunk_kda --shape $S --passes forward --copies 4 > $OUT/profile_main.txt 2>&1)
  tail -14 $OUT/profile_main.txt
fi
if [ "$1" = profile_ablate ]; then
  mkdir -p /tmp/abl && tar xzf .devcache/${ABL_TGZ:-ablations.tgz} -C /tmp/abl
  for v in full ${ABLATIONS:-noinv nowu nointra}; do
    dir=$PWD; [ $v = full ] || dir=/tmp/abl/$v
    (cd $dir && WORKBENCH_AUTOTUNE=${AT:-off} PYTHONPATH=/tmp/t39:$dir timeout ${ABL_TIMEOUT:-70} python3 scripts/op_profile.py \
      --op chunk_kda --shape $S --passes ${PASSES:-forward} --copies 4 --iters 5 --reps 5 > $OUT/ablate_$v.txt 2>&1)
    grep -E "device busy" $OUT/ablate_$v.txt | head -1
    echo "$v: $(grep -E "×  ${KERNEL:-chunk_kda_fwd_prep_kernel}\$" $OUT/ablate_$v.txt | head -1)"
  done
  # one file back, not one per tree (the device tool returns a limited count of files)
  (cd $OUT && tar czf ablate_${ABL_TGZ:-ablations.tgz} ablate_*.txt && rm ablate_*.txt)
fi

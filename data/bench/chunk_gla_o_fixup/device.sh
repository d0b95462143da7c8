# Device calls (H200) for chunk_gla (the two-level forward's fix-up inside chunk_o_kernel) and, with OP=chunk_kda,
# for chunk_kda (data/bench/kda_prep_regs). Run from the repository root with `.devcache` carried (slim Triton
# 3.9.0 and its env, main's workbench as main.tgz: `git archive HEAD workbench`); several modes run in order:
#   [OP=chunk_kda] bash data/bench/chunk_gla_o_fixup/device.sh tune|tests|pair|probe|profile|validate|memcheck ...
set -x
source .devcache/env.sh
mkdir -p /tmp/main && tar xzf .devcache/main.tgz -C /tmp/main
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
OP=${OP:-chunk_gla}
if [ $OP = chunk_kda ]; then
  TESTS=tests/kda KERNELS=${KERNELS:-chunk_kda_fwd_prep_kernel} TUNE_SHAPES=${TUNE_SHAPES:-target,sweep}
  PROFILE_SHAPES=${PROFILE_SHAPES:-B=8,T=4096,H=16,K=128,V=128} PAIR_T=${PAIR_T:-65536}
else
  TESTS=tests/chunk_gla KERNELS=${KERNELS:-chunk_segment_sweep_kernel,chunk_o_kernel} TUNE_SHAPES=${TUNE_SHAPES:-sweep}
  PROFILE_SHAPES=${PROFILE_SHAPES:-B=1,T=65536,H=16,K=64,V=64 B=8,T=4096,H=16,K=64,V=64} PAIR_T=${PAIR_T:-65536,16384}
fi
for mode in "$@"; do
case "$mode" in
tune)  # KERNELS over TUNE_SHAPES in DTYPES (chunk_gla: the segment sweep and the o kernel over the sweep, bf16)
  timeout ${TUNE_S:-300} python3 -m workbench tune --write-table --op $OP \
    --kernels $KERNELS --shapes $TUNE_SHAPES --dtypes ${DTYPES:-bfloat16} > $OUT/tune.log 2>&1
  grep "^tune:" $OUT/tune.log | tail -12; tail -2 $OUT/tune.log; cp workbench/tuning/NVIDIA_H200.json $OUT/ ;;
tests)
  XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout -s INT 250 \
    python3 -m pytest -q -rA -p no:cacheprovider -m gpu -n 16 $TESTS > $OUT/gpu_tests.log 2>&1
  tail -3 $OUT/gpu_tests.log ;;
pair)  # against main (/tmp/main); AT: the autotune mode (table: a changed kernel is tuned at its first call)
  for set in "--shapes sweep --T $PAIR_T" "--shapes target"; do
    WORKBENCH_AUTOTUNE=${AT:-table} timeout 250 python3 -m workbench bench --op $OP $set --implementations triton \
      --no-variants --timer device --paired 5 --errors-from peers --against /tmp/main --out $OUT 2>&1 | tail -12
  done ;;
probe)
  for shape in ${PROBE_SHAPES:-B=8,T=4096,H=16,K=64,V=64 B=1,T=65536,H=16,K=64,V=64}; do
    WORKBENCH_AUTOTUNE=on timeout 200 python3 data/bench/chunk_gla_o_fixup/probe_segments.py --shape $shape \
      --segments ${SEGMENTS:-1,2,4,8} --rounds 2 2>&1 | grep '^{' | tee -a $OUT/probe_segments.jsonl
  done ;;
profile)
  for shape in $PROFILE_SHAPES; do
    WORKBENCH_AUTOTUNE=table timeout 150 python3 scripts/op_profile.py --op $OP --shape $shape \
      --passes forward,forward_backward --copies 4 > $OUT/profile_${shape//[=,]/_}.txt 2>&1
    tail -30 $OUT/profile_${shape//[=,]/_}.txt
  done ;;
validate)  # the table's configs against the first ones (those the GPU tests run), at the target and B1 T64k, in DTYPE
  WORKBENCH_AUTOTUNE=off timeout 200 python3 data/bench/chunk_gla_o_fixup/table_vs_first.py --op $OP \
    --dtype ${DTYPE:-bfloat16} --save /tmp/first.npz
  WORKBENCH_AUTOTUNE=table timeout 200 python3 data/bench/chunk_gla_o_fixup/table_vs_first.py --op $OP \
    --dtype ${DTYPE:-bfloat16} --save /tmp/table.npz
  python3 data/bench/chunk_gla_o_fixup/table_vs_first.py --compare /tmp/first.npz /tmp/table.npz | tee $OUT/table_vs_first.txt ;;
memcheck)  # every path of the op (scripts/every_path.py) under compute-sanitizer
  CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  XLA_PYTHON_CLIENT_ALLOCATOR=platform WORKBENCH_AUTOTUNE=off timeout 300 $CS --tool memcheck --print-limit 20 \
    python3 scripts/every_path.py $OP > $OUT/memcheck.log 2>&1
  grep -v "^=* *$" $OUT/memcheck.log | tail -12 ;;
esac
done

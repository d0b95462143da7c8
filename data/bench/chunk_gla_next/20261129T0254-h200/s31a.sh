# 2026-11-29 call 5 (tree = gla-forward-next + the H200 table tuned in call 3; carry .devcache): states probe again
# (tuned), main (c494d27) against the branch alternated, then the rest of the branch's H200 tune.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
R=$PWD
mkdir -p $OUT/ab /tmp/mainsrc && tar -xzf .devcache/main_c494d27.tgz -C /tmp/mainsrc
P=data/bench/chunk_gla_states_in_dtype/20261129T0130-prepared
WORKBENCH_AUTOTUNE=table timeout 120 python3 $P/probe_states.py > $OUT/ab/states.jsonl 2> $OUT/ab/states.err; cat $OUT/ab/states.jsonl
for i in 1 2 3; do
  for side in main branch; do
    if [ $side = main ]; then cd /tmp/mainsrc; export PYTHONPATH=/tmp/t39:/tmp/mainsrc; else cd $R; export PYTHONPATH=/tmp/t39:$R; fi
    d=$OUT/ab/$side$i; mkdir -p $d
    WORKBENCH_AUTOTUNE=table timeout 100 python3 -m workbench bench --op chunk_gla --shapes target --timer copies \
      --implementations triton --no-variants --out $d > $d/t.txt 2>&1
    WORKBENCH_AUTOTUNE=table timeout 100 python3 -m workbench bench --op chunk_gla --shapes sweep --T 65536 --timer copies \
      --implementations triton --no-variants --out $d > $d/t64.txt 2>&1
    echo "== $side $i"; grep -h "^B=" $d/t.txt $d/t64.txt | awk '{print $1,$2,$5,$6,$7,$8,$9}'
  done
done
cd $R; export PYTHONPATH=/tmp/t39:$R
mkdir -p $OUT/g
KS=chunk_a_kernel,chunk_dqk_intra_kernel,chunk_o_kernel,chunk_h_kernel,chunk_dh_kernel,chunk_segment_sweep_kernel
for spec in "bfloat16 128" "float16 64" "float32 64" "bfloat16 256" "float16 128" "float32 128" "float16 256"; do
  set -- $spec
  timeout 120 python3 -m workbench tune --write-table --op chunk_gla --shapes target --dtypes $1 --head-dims $2 \
      --kernels $KS >> $OUT/g/tune2.txt 2>&1; echo "tune $1 $2 exit $?"
  cp workbench/tuning/NVIDIA_H200.json $OUT/g/
done

# gla-final, fourth device call: the b group and dv at the f32 target K 64/128; a bench row of the final code.
source .devcache/env.sh > $OUT/walls.txt 2>&1
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; cp workbench/tuning/NVIDIA_H200.json $OUT/; }
KS=chunk_h_kernel,chunk_dh_kernel,chunk_o_kernel,chunk_dv_kernel
timeout -s INT 250 python3 -m workbench tune --write-table --op chunk_gla --kernels $KS --shapes target --dtypes float32 \
  --head-dims 64,128 >> $OUT/tune.log 2>&1; w "f32 rc=$?"
WORKBENCH_AUTOTUNE=table timeout -s INT 60 python3 scripts/op_profile.py --op chunk_gla \
  --shape B=8,T=4096,H=16,K=64,V=64 --passes forward,forward_backward --top 8 > $OUT/profile.txt 2>&1; w "profile rc=$?"
timeout -s INT 60 python3 -m workbench bench --op chunk_gla --shapes target --implementations triton --no-variants \
  --out $OUT > $OUT/bench.log 2>&1; w "bench rc=$?"
cat $OUT/walls.txt; grep -h "tuned$" $OUT/tune.log; cat $OUT/profile.txt; tail -5 $OUT/bench.log

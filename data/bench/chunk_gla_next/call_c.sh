# gla-final, third device call: the b group and dv at the f16 and f32 targets, then profile and pairings.
source .devcache/env.sh > $OUT/walls.txt 2>&1
mkdir -p /tmp/main && rm -rf /tmp/main/workbench && tar -xzf .devcache/main.tgz -C /tmp/main
T0=$(date +%s); w() { echo "$1 $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt; cp workbench/tuning/NVIDIA_H200.json $OUT/; }
tune() { timeout -s INT "$1" python3 -m workbench tune --write-table --op chunk_gla "${@:2}" >> $OUT/tune.log 2>&1; w "${*:2} rc=$?"; }
KS=chunk_h_kernel,chunk_dh_kernel,chunk_o_kernel,chunk_dv_kernel
tune 250 --kernels $KS --shapes target --dtypes float16 --head-dims 64,128,256
tune 150 --kernels $KS --shapes target --dtypes float32 --head-dims 64,128
WORKBENCH_AUTOTUNE=table timeout -s INT 60 python3 scripts/op_profile.py --op chunk_gla \
  --shape B=8,T=4096,H=16,K=64,V=64 --passes forward,forward_backward --top 10 > $OUT/profile.txt 2>&1; w "profile rc=$?"
for s in "--shapes target" "--shapes sweep --T 65536"; do
  timeout -s INT 80 python3 -m workbench bench --op chunk_gla $s --implementations triton --no-variants \
    --timer copies --paired 7 --errors-from peers --against /tmp/main --out $OUT >> $OUT/bench.log 2>&1; w "bench $s rc=$?"
done
cat $OUT/walls.txt; grep -h "tuned$" $OUT/tune.log; grep -h "^paired" $OUT/bench.log; cat $OUT/profile.txt

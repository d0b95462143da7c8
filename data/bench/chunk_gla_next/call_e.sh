# fifth device call of the chunk_gla_next merge (README): chunk_o_kernel at B1 T 8k (programs 4096), the one bench-sweep key still answered
# by its nearest entry (gla-b-local's third call was cut before it).
source .devcache/env.sh > $OUT/walls.txt 2>&1
timeout -s INT 70 python3 -m workbench tune --write-table --op chunk_gla --kernels chunk_o_kernel --shapes sweep \
  --T 8192 --dtypes bfloat16 > $OUT/tune.log 2>&1; echo "rc=$?" >> $OUT/walls.txt
cp workbench/tuning/NVIDIA_H200.json $OUT/; cat $OUT/walls.txt; grep -h "tuned$\|chose" $OUT/tune.log | cut -c1-200

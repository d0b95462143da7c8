# call 4 (gla-dqkg-phases): chunk_dqkg_kernel's H200 entry at float32 K = V = 128
source .devcache/env.sh > /dev/null
mkdir -p $OUT/g
T0=$(date +%s)
timeout -s INT 215 python3 -m workbench tune --write-table --op chunk_gla --kernels chunk_dqkg_kernel --shapes target --dtypes float32 --head-dims 128 > $OUT/tune_f32_128.log 2>&1
echo "tune rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/walls.txt
cp workbench/tuning/NVIDIA_H200.json $OUT/g/
grep -h "chose\|tuned" $OUT/tune_f32_128.log | cut -c1-200; cat $OUT/walls.txt

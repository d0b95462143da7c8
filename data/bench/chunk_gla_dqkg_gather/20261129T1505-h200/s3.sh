# call 3: dqkg tune at the target grid in float16 (K = V = 64, 128, 256) and float32 (64, 128)
source .devcache/env.sh
t0=$(date +%s)
timeout -s INT ${TUNE_S:-270} python3 -m workbench tune --write-table --op chunk_gla --kernels chunk_dqkg_kernel --shapes target --dtypes float16 --head-dims 64,128,256 > $OUT/tune_f16.log 2>&1
echo "tune f16 rc $? $(( $(date +%s) - t0 )) s"
cp workbench/tuning/NVIDIA_H200.json $OUT/table_f16.json
t0=$(date +%s)
timeout -s INT ${TUNE2_S:-280} python3 -m workbench tune --write-table --op chunk_gla --kernels chunk_dqkg_kernel --shapes target --dtypes float32 --head-dims 64,128 > $OUT/tune_f32.log 2>&1
echo "tune f32 rc $? $(( $(date +%s) - t0 )) s"
cp workbench/tuning/NVIDIA_H200.json $OUT/table_f32.json
grep -h "tune:\|tuned\|merged" $OUT/tune_f16.log $OUT/tune_f32.log

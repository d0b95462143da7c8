# 2026-11-29 call 6: main (c494d27, /tmp/mainsrc) against gla-forward-next, alternated, stdout only (no $OUT files)
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
R=$PWD
[ -d /tmp/mainsrc/workbench ] || { mkdir -p /tmp/mainsrc && tar -xzf .devcache/main_c494d27.tgz -C /tmp/mainsrc; }
for i in 1 2; do
  for side in main branch; do
    if [ $side = main ]; then cd /tmp/mainsrc; export PYTHONPATH=/tmp/t39:/tmp/mainsrc; else cd $R; export PYTHONPATH=/tmp/t39:$R; fi
    echo "== $side $i"
    WORKBENCH_AUTOTUNE=table timeout 60 python3 -m workbench bench --op chunk_gla --shapes target --settle 1 \
      --implementations triton --no-variants --out /tmp/o_$side$i 2>&1 | grep "^B=" | awk '{print $1,$2,$5,$6,$7,$8,$9}'
    WORKBENCH_AUTOTUNE=table timeout 60 python3 -m workbench bench --op chunk_gla --shapes sweep --T 65536 --settle 1 \
      --implementations triton --no-variants --out /tmp/o_$side$i 2>&1 | grep "^B=" | awk '{print $1,$2,$5,$6,$7,$8,$9}'
  done
done

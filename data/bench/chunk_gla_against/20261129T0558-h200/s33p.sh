# per-kernel forward profile at B1 T64k of main and of gla-forward-next (table mode)
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p /tmp/fwdnext && rm -rf /tmp/fwdnext/workbench /tmp/fwdnext/scripts && tar -xzf .devcache/fwdnext.tgz -C /tmp/fwdnext
mkdir -p /tmp/fwdnext/scripts && cp scripts/op_profile.py /tmp/fwdnext/scripts/
for tree in $PWD /tmp/fwdnext; do
  echo "== $tree"
  (cd $tree && PYTHONPATH=/tmp/t39:$tree WORKBENCH_AUTOTUNE=table timeout 150 python3 scripts/op_profile.py --op chunk_gla \
     --shape B=1,T=65536,H=16,K=64,V=64 --passes ${PASSES:-forward} --iters 10 --reps 10 2>&1 | grep -v "^E1129\|^W1129\|^I1129" | tail -25)
done

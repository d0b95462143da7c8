# The three backward patches applied to workbench/ (gather_x, whole_in_fused, then dl_tf32x3 made over both) and
# the H200 entries tuned for the patched fused and intra kernels (h200_entries.json, 2026-12-01) merged into
# workbench/tuning/NVIDIA_H200.json (the kernels' old-source entries dropped as the new ones are merged); the H100's
# entries of both kernels, made for the old source, deleted (the H100 then takes the H200's: add
# `chunk_kda_bwd_intra_kernel` to the H100's list in workbench/tuning/README.md, "Served by the sibling kind"; the
# fused kernel is there already). Then the grid's remaining points are tuned on an H200 (README.md here).
set -e
root=$(git rev-parse --show-toplevel) && cd "$root"
for p in gather_x whole_in_fused dl_tf32x3_over_both; do
  patch -p1 -s --no-backup-if-mismatch < data/bench/kda_bwd_next/$p.patch
done
python3 -c "
import json
from workbench import tuning_table
kernels = {'chunk_kda_bwd_intra_kernel', 'chunk_kda_bwd_wy_dqkg_fused_kernel'}
entries = json.load(open('data/bench/kda_bwd_next/h200_entries.json'))
print(tuning_table.Table.load('NVIDIA H200').merged(entries).write())
h100 = tuning_table.Table.load('NVIDIA H100 80GB HBM3')
kept = [e for e in h100.entries if e['kernel'] not in kernels]
print(tuning_table.Table(h100.device, kept).write(), len(h100.entries) - len(kept), 'entries dropped')"

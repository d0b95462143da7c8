# The three patches applied to workbench/ and the H200 entries tuned for the patched prep kernel
# (h200_entries.json) merged into workbench/tuning/NVIDIA_H200.json (old-source entries of the kernel dropped),
# as the tunes of 2026-12-01 left the table; the H100's entries of the kernel, made for the old source, deleted
# (the H100 then takes the H200's: add the kernel to the H100's list in workbench/tuning/README.md, "Served by
# the sibling kind"). Then the grid's remaining points are tuned on an H200 (README.md here).
set -e
root=$(git rev-parse --show-toplevel) && cd "$root"
for p in inversion_batched wu_one_loop cumsum_whole; do patch -p1 -s --no-backup-if-mismatch < data/bench/kda_prep_next/$p.patch; done
python3 -c "
import json
from workbench import tuning_table
entries = json.load(open('data/bench/kda_prep_next/h200_entries.json'))
print(tuning_table.Table.load('NVIDIA H200').merged(entries).write())
h100 = tuning_table.Table.load('NVIDIA H100 80GB HBM3')
kept = [e for e in h100.entries if e['kernel'] != 'chunk_kda_fwd_prep_kernel']
print(tuning_table.Table(h100.device, kept).write(), len(h100.entries) - len(kept), 'entries dropped')"

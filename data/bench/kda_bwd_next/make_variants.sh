# A tree of the package (workbench/, scripts/ of HEAD) with gather_x.patch applied, packed for the device as
# .devcache/bwd_variants.tgz; then, carrying .devcache (first configs on both sides, the kernel's line printed):
#   ABL_TGZ=bwd_variants.tgz ABLATIONS=gather_x PASSES=forward_backward \
#     KERNEL=chunk_kda_bwd_wy_dqkg_fused_kernel bash data/bench/kda_prep_regs/device.sh profile_ablate
set -e
root=$(git rev-parse --show-toplevel)
out=${1:-/tmp/kda_bwd_variants}
rm -rf "$out" && mkdir -p "$out/gather_x" "$root/.devcache"
git -C "$root" archive HEAD workbench scripts | tar x -C "$out/gather_x"
(cd "$out/gather_x" && patch -p1 -s --no-backup-if-mismatch < "$root/data/bench/kda_bwd_next/gather_x.patch")
tar czf "$root/.devcache/bwd_variants.tgz" -C "$out" .
echo "$root/.devcache/bwd_variants.tgz: $(ls $out)"

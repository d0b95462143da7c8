# Trees of the package (workbench/, scripts/, tests/, docs/, pyproject.toml of HEAD) with this folder's patches applied, packed for the device
# as .devcache/bwd_variants.tgz (gather_x; whole_in_fused; dl_tf32x3; all three: dl_tf32x3_over_both.patch is the
# third made over the first two); then, carrying .devcache (first configs on both sides, the fused kernel's line):
#   ABL_TGZ=bwd_variants.tgz ABLATIONS=gather_x PASSES=forward_backward \
#     KERNEL=chunk_kda_bwd_wy_dqkg_fused_kernel bash data/bench/kda_prep_regs/device.sh profile_ablate
set -e
root=$(git rev-parse --show-toplevel)
out=${1:-/tmp/kda_bwd_variants}
rm -rf "$out" && mkdir -p "$root/.devcache"
variant() {  # name, then the patches it applies in order
  local name=$1; shift
  mkdir -p "$out/$name" && git -C "$root" archive HEAD workbench scripts tests docs pyproject.toml | tar x -C "$out/$name"
  for p in "$@"; do (cd "$out/$name" && patch -p1 -s --no-backup-if-mismatch < "$root/data/bench/kda_bwd_next/$p.patch"); done
}
variant gather_x gather_x
variant whole_in_fused whole_in_fused
variant dl_tf32x3 dl_tf32x3
variant all gather_x whole_in_fused dl_tf32x3_over_both
tar czf "$root/.devcache/bwd_variants.tgz" -C "$out" .
echo "$root/.devcache/bwd_variants.tgz: $(ls $out)"

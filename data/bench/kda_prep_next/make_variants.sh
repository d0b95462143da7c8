# Trees of the package (workbench/, scripts/ of HEAD) with each patch of this folder applied, packed for the
# device as .devcache/variants.tgz; then, carrying .devcache:
#   ABL_TGZ=variants.tgz ABLATIONS="inversion_batched wu_one_loop both cumsum_whole all" bash data/bench/kda_prep_regs/device.sh profile_ablate
set -e
root=$(git rev-parse --show-toplevel)
out=${1:-/tmp/kda_variants}
rm -rf "$out" && mkdir -p "$out" "$root/.devcache"
for p in inversion_batched wu_one_loop both cumsum_whole all; do
  mkdir -p "$out/$p" && git -C "$root" archive HEAD workbench scripts | tar x -C "$out/$p"
  (cd "$out/$p" && patch -p1 -s < "$root/data/bench/kda_prep_next/$p.patch")
done
tar czf "$root/.devcache/variants.tgz" -C "$out" .
echo "$root/.devcache/variants.tgz: $(ls $out)"

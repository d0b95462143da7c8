# Trees of the package (workbench/, scripts/ of HEAD) with this folder's patches applied, one tree per variant
# (both: the first two; all: the three), packed for the device as .devcache/variants.tgz; then, carrying .devcache:
#   ABL_TGZ=variants.tgz ABLATIONS="inversion_batched wu_one_loop both cumsum_whole all" bash data/bench/kda_prep_regs/device.sh profile_ablate
set -e
root=$(git rev-parse --show-toplevel)
out=${1:-/tmp/kda_variants}
rm -rf "$out" && mkdir -p "$out" "$root/.devcache"
variant() {  # name, then the patches it applies in order
  local name=$1; shift
  mkdir -p "$out/$name" && git -C "$root" archive HEAD workbench scripts | tar x -C "$out/$name"
  for p in "$@"; do (cd "$out/$name" && patch -p1 -s --no-backup-if-mismatch < "$root/data/bench/kda_prep_next/$p.patch"); done
}
variant inversion_batched inversion_batched
variant wu_one_loop wu_one_loop
variant cumsum_whole cumsum_whole
variant both inversion_batched wu_one_loop
variant all inversion_batched wu_one_loop cumsum_whole
tar czf "$root/.devcache/variants.tgz" -C "$out" .
echo "$root/.devcache/variants.tgz: $(ls $out)"

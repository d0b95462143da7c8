# Prepared 2026-11-27 (16th session) for the next. State: main has the Gluon backward opt-in
# (Tuning(backward="gluon"), GPU tests passed on an H200, synccheck/memcheck clean). Two branches wait:
#   gluon-bwd-grid    (on main): grid back to (key blocks, B*HKV), the probes' order (L2 sharing of q/dO), untimed
#   gluon-bwd-default (on main): Tuning(backward=None) -> Gluon where it applies; needs the whole flash GPU suite
#                     and an H100 timing on an idle machine (the one H100 bench was contended: data/bench/
#                     flash_gluon_bwd_probe/20261127T2020-h100-contended read it 12-22 % SLOWER than Triton's)
# Call 1 (this script; `git checkout gluon-bwd-grid`, carry [".devcache"], kind nvidia-h100-x1, ~6 min):
#   the grid A/B (main's kernel copy vs the branch's) with the op's Gluon vs Triton backward, then the target
#   bench with the "gluon backward" variant, on an idle H100. Repeat on an H200 if budget allows.
# Then: keep the faster grid; rebase gluon-bwd-default onto it; if the Gluon backward is faster on the H100 too,
#   run the whole flash GPU test file with it as the default:
#     timeout -s INT 540 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 --dist loadgroup \
#       tests/flash_attention/test_gpu.py -rfE ; pkill -f pytest ; sleep 3      (INT lets xdist stop its workers;
#     the 16th session's `timeout 300` left them running into the bench)
#   then the bench (target + sweep 1024,4096,16384, --variants "triton backward"), then merge.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
. .devcache/env.sh
mkdir -p $OUT/n
nvidia-smi --query-gpu=name --format=csv,noheader
( WORKBENCH_AUTOTUNE=table timeout 300 python3 .devcache/grid/probe_grid.py > $OUT/n/grid.jsonl 2> $OUT/n/grid.err; echo "grid exit $?"; cat $OUT/n/grid.jsonl )
( WORKBENCH_AUTOTUNE=table timeout 220 python3 -m workbench bench --op flash_attention --shapes target --timer copies --peers --implementations triton --variants "gluon backward" --out $OUT/n/bench > $OUT/n/bench.out 2> $OUT/n/bench.err; echo "bench exit $?"; grep -E "triton|cudnn" $OUT/n/bench.out | grep -v xla )
# Call 4 (if budget; `git checkout gla-resweep-o`, issue 48): chunk_gla's fused output on the GPU:
#   WORKBENCH_AUTOTUNE=off pytest -m gpu tests/chunk_gla/test_gpu.py -k fused_output   (4 cases)
#   workbench bench --op chunk_gla --shapes sweep --T 4096,65536 --peers --variants "fused output"
#   and --shapes target; then fill the "Cost" table rows (scripts/op_profile.py) and decide the default.

# Call 2 of the 26th session (carry .devcache; tree = main): issue 48's chunk_gla fused-forward prototype against the
# op's forward (target and B1 T4k-64k). ~4 min.
set -u
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
bash data/bench/chunk_gla_fused_probe/20261128T1930-prototype/run_next.sh

#!/usr/bin/env bash
# Install the wheels of scripts/fetch_peers.sh without a package index, and print the PYTHONPATH line.
#
#   bash scripts/install_peers.sh [DIR] [TARGET]      # DIR defaults to wheels/, TARGET to /tmp/workbench-peers
#   eval "$(bash scripts/install_peers.sh | tail -1)"  # the same, setting PYTHONPATH in this shell
#
# The peers go into TARGET, outside the environment, with no dependency resolution (ejkernel's declared
# jax~=0.10.0 would otherwise fight the environment's JAX); putting TARGET on PYTHONPATH makes fla and
# ejkernel importable. torch, if DIR/torch/ holds it (WITH_TORCH=1 when fetching), is
# installed into the environment itself, from those files only. Use the environment's python
# (activate it first, or set PYTHON).
set -euo pipefail

DIR=${1:-wheels}
TARGET=${2:-/tmp/workbench-peers}
PYTHON=${PYTHON:-python}

shopt -s nullglob
wheels=("$DIR"/*.whl)
if (( ${#wheels[@]} == 0 )); then
    echo "install_peers.sh: no wheels in $DIR (fetch them with scripts/fetch_peers.sh)" >&2
    exit 1
fi
if [[ -d "$DIR/torch" ]]; then
    "$PYTHON" -m pip install --no-index --find-links "$DIR/torch" torch==2.13.0
fi
"$PYTHON" -m pip install --no-index --no-deps --upgrade --target "$TARGET" "${wheels[@]}"
echo "export PYTHONPATH=$TARGET\${PYTHONPATH:+:\$PYTHONPATH}"

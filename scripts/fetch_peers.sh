#!/usr/bin/env bash
# Download the wheels `workbench bench --peers` needs, for a GPU machine without a package index.
#
#   bash scripts/fetch_peers.sh [DIR]                 # on a machine that reaches an index; DIR defaults to wheels/
#   WITH_TORCH=1 bash scripts/fetch_peers.sh [DIR]    # also torch 2.13.0 (CUDA) and its CUDA libraries, in DIR/torch/
#
# Copy DIR to the GPU machine and run scripts/install_peers.sh there. The wheels are for CPython 3.12 on
# x86_64 Linux (PYTHON_VERSION=3.11 etc. to change), fetched without dependency resolution: PEERS below is
# fla-core and ejkernel with every runtime dependency that a JAX + Triton + torch machine does
# not already have, at the versions `pip install ".[cuda12,peers]"` resolves. ejkernel 0.0.80.3 declares
# jax~=0.10.0 but checks no version at run time; installed this way it runs beside JAX 0.11 (how the
# records in data/bench/ were taken).
set -euo pipefail

DIR=${1:-wheels}
PYTHON=${PYTHON:-python3}
PYTHON_VERSION=${PYTHON_VERSION:-3.12}
PLATFORMS=(--platform manylinux2014_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64)
PEERS=(
    fla-core==0.6.0 einops==0.8.2
    ejkernel==0.0.80.3 beartype==0.23.1 chex==0.1.92 toolz==1.2.0 jaxtyping==0.3.11 wadler-lindig==0.1.8
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
    typing-extensions==4.16.0 tqdm==4.70.1
)

mkdir -p "$DIR"
"$PYTHON" -m pip download --no-deps --only-binary=:all: --python-version "$PYTHON_VERSION" "${PLATFORMS[@]}" \
    -d "$DIR" "${PEERS[@]}"
if [[ "${WITH_TORCH:-0}" == 1 ]]; then
    # torch with its dependencies resolved (its CUDA libraries): install_peers.sh installs it into the environment.
    "$PYTHON" -m pip download --only-binary=:all: --python-version "$PYTHON_VERSION" "${PLATFORMS[@]}" \
        -d "$DIR/torch" torch==2.13.0
fi
echo "fetched into $DIR: $(ls "$DIR"/*.whl | wc -l) wheels; on the GPU machine: bash scripts/install_peers.sh $DIR"

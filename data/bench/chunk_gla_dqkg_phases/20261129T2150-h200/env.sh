# source me on the device: slim Triton 3.9 into /tmp/t39 (once per machine), and the variables it needs
if [ ! -d /tmp/t39/triton ]; then
  mkdir -p /tmp/t39 && python3 -c 'import tarfile; tarfile.open(".devcache/triton390.tar.xz", "r:xz").extractall("/tmp/t39")'
fi
export TRITON_BACKENDS_IN_TREE=1 TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas TRITON_PTXAS_BLACKWELL_PATH=/usr/local/cuda/bin/ptxas
export PYTHONPATH=/tmp/t39:$PWD
python3 -c 'import triton, jax; print("triton", triton.__version__, triton.__file__, "jax", jax.__version__, jax.devices())'

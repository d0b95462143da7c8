# source on the device: slim Triton 3.9.0 to /tmp/t39 (once per warm machine), env for it
if [ ! -f /tmp/t39/triton/__init__.py ]; then
  mkdir -p /tmp/t39 && python3 -c "import tarfile,sys; tarfile.open('.devcache/triton390.tar.xz').extractall('/tmp/t39')"
fi
export PYTHONPATH=/tmp/t39:$PWD${PYTHONPATH:+:$PYTHONPATH}
export TRITON_BACKENDS_IN_TREE=1
export TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas
export TRITON_PTXAS_BLACKWELL_PATH=/usr/local/cuda/bin/ptxas
export TRITON_CUOBJDUMP_PATH=/tmp/t39/triton/backends/nvidia/bin/cuobjdump
python3 -c "import triton, jax; print('triton', triton.__version__, triton.__file__, 'jax', jax.__version__)"

"""Global scratch without a fresh mapping per launch: the CUDA memory pool jaxlib takes it from keeps what it frees.

A kernel that makes TMA descriptors on the device (Gluon's `tma.make_tensor_descriptor`, Triton's
`tl.make_tensor_descriptor`; the Hopper flash kernels do) needs a global scratch buffer for each launch. jaxlib
0.11's Triton launch (`_triton.so`) allocates it with `cuMemAllocAsync` on the launch's stream and frees it after
the kernel, from the device's default memory pool. That pool's release threshold is 0 unless someone sets it (CUDA
driver API, `CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`): it keeps nothing of what is freed, handing it back to the system at
its next synchronisation, so an allocation after that has to obtain memory again. On an H200
(`data/bench/launch_overhead/20261128T2220-h200`) a launch of a small copy kernel with scratch cost 241 µs of host
time when issued back to back (360 µs for a call and its wait) against 62 µs (89) for the same copy without, and
our flash forward at a tiny shape 255 µs (406) against cuDNN's 89 (131); with the pool keeping freed memory, 50
(81) and 76 (120).

`keep_freed_memory` raises the release threshold of every visible GPU's default pool to `RELEASE_THRESHOLD` bytes
(a threshold already higher is left alone): the pool keeps up to that much of what is freed, and the next launch's
scratch comes from there. What it keeps is what was freed into the default pool, here a few hundred bytes per
program of each launch. `gpu_call` calls `ensure()` (once per process) when it
builds a launch of a kernel with global scratch; a driver that refuses is a warning, not a failed launch: the
kernels run the same, only slower to launch.
"""

from __future__ import annotations

import ctypes
import functools
import warnings

RELEASE_THRESHOLD = 64 << 20  # bytes each GPU's default pool may keep reserved between synchronisations
ATTR_RELEASE_THRESHOLD = 4  # CU_MEMPOOL_ATTR_RELEASE_THRESHOLD (enum CUmemPool_attribute, cuda.h)


def driver():
    """The CUDA driver library (`ctypes`), as JAX's CUDA plugin loaded it."""
    return ctypes.CDLL("libcuda.so.1")


def _check(what: str, status: int):
    if status != 0:
        raise OSError(f"{what} returned CUDA error {status}")


def _pools(cuda):
    """(ordinal, default memory pool) of every visible GPU."""
    _check("cuInit", cuda.cuInit(0))
    count = ctypes.c_int()
    _check("cuDeviceGetCount", cuda.cuDeviceGetCount(ctypes.byref(count)))
    for ordinal in range(count.value):
        device, pool = ctypes.c_int(), ctypes.c_void_p()
        _check(f"cuDeviceGet({ordinal})", cuda.cuDeviceGet(ctypes.byref(device), ordinal))
        _check(f"cuDeviceGetDefaultMemPool({ordinal})", cuda.cuDeviceGetDefaultMemPool(ctypes.byref(pool), device))
        yield ordinal, pool


def _threshold(cuda, ordinal: int, pool) -> int:
    value = ctypes.c_uint64()
    _check(f"cuMemPoolGetAttribute({ordinal})",
           cuda.cuMemPoolGetAttribute(pool, ATTR_RELEASE_THRESHOLD, ctypes.byref(value)))
    return value.value


def release_thresholds(cuda) -> list[int]:
    """The release threshold of every visible GPU's default memory pool, in bytes, read through `cuda`."""
    return [_threshold(cuda, ordinal, pool) for ordinal, pool in _pools(cuda)]


def keep_freed_memory(cuda, threshold: int = RELEASE_THRESHOLD) -> list[int]:
    """Raise the release threshold of every visible GPU's default memory pool to at least `threshold` bytes through
    `cuda` (the driver library); the thresholds after, one per device. OSError naming the call a driver refuses."""
    kept = []
    for ordinal, pool in _pools(cuda):
        value = _threshold(cuda, ordinal, pool)
        if value < threshold:
            _check(f"cuMemPoolSetAttribute({ordinal})",
                   cuda.cuMemPoolSetAttribute(pool, ATTR_RELEASE_THRESHOLD, ctypes.byref(ctypes.c_uint64(threshold))))
            value = threshold
        kept.append(value)
    return kept


@functools.cache
def ensure() -> list[int] | None:
    """`keep_freed_memory(driver())` once per process; None (and a warning) where the driver refuses."""
    try:
        return keep_freed_memory(driver())
    except OSError as error:  # also a missing libcuda
        warnings.warn(f"workbench: the GPUs' default memory pools could not be set to keep freed memory ({error}); "
                      "each launch of a kernel with global scratch then costs ~0.2 ms more host time (an H200's "
                      "measure)", RuntimeWarning, stacklevel=2)
        return None

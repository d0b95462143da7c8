"""What one launch costs the host: a kernel with global scratch (descriptors made on the device, launched through
jaxlib's API-2 handler, which allocates the scratch with cuMemAllocAsync per launch) against the same copy without
(jaxlib's FFI handler), our flash forward and cuDNN's at a tiny shape; then the same after the device's default
memory pool is told to keep what is freed (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = UINT64_MAX, set with ctypes).

Per program: `b2b` = 200 calls issued back to back, then one wait, per call (the host's dispatch rate when the
kernel is short); `single` = median of 50 (call, wait) pairs (the latency of one call). µs. One JSON line each."""
import ctypes, json, statistics, sys, time
import workbench  # first
import jax, jax.numpy as jnp, triton, triton.language as tl


@triton.jit
def copy_desc_kernel(x, N, y, BLOCK: tl.constexpr):
    dx = tl.make_tensor_descriptor(x, [N // 64, 64], [64, 1], [BLOCK // 64, 64])
    dy = tl.make_tensor_descriptor(y, [N // 64, 64], [64, 1], [BLOCK // 64, 64])
    i = tl.program_id(0) * (BLOCK // 64)
    dy.store([i, 0], dx.load([i, 0]))


@triton.jit
def copy_kernel(x, N, y, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + o, tl.load(x + o, mask=o < N), mask=o < N)


def timings(f, x):
    g = jax.jit(f)
    jax.block_until_ready(g(x)); jax.block_until_ready(g(x))
    t0 = time.perf_counter()
    outs = [g(x) for _ in range(200)]
    jax.block_until_ready(outs)
    b2b = (time.perf_counter() - t0) / 200 * 1e6
    ts = []
    for _ in range(50):
        t0 = time.perf_counter(); jax.block_until_ready(g(x)); ts.append((time.perf_counter() - t0) * 1e6)
    return round(b2b, 1), round(statistics.median(ts), 1)


def keep_freed_memory():
    cuda = ctypes.CDLL("libcuda.so.1")
    dev, pool = ctypes.c_int(), ctypes.c_void_p()
    assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cuda.cuDeviceGetDefaultMemPool(ctypes.byref(pool), dev) == 0
    CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4
    value = ctypes.c_uint64(2 ** 64 - 1)
    return cuda.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, ctypes.byref(value))


def main():
    print(json.dumps({"triton": triton.__version__, "jax": jax.__version__, "device": jax.devices()[0].device_kind}),
          flush=True)
    N, BLOCK = 1 << 16, 1024
    x = jnp.ones((N,), jnp.float32)
    out = jax.ShapeDtypeStruct((N,), jnp.float32)
    progs = {
        "copy, descriptors on the device (scratch)": (lambda x: workbench.triton_call(
            x, N, kernel=copy_desc_kernel, out_shape=out, grid=(N // BLOCK,), BLOCK=BLOCK), x),
        "copy, plain loads": (lambda x: workbench.triton_call(
            x, N, kernel=copy_kernel, out_shape=out, grid=(N // BLOCK,), BLOCK=BLOCK), x),
    }
    q = jax.random.normal(jax.random.key(0), (3, 1, 256, 2, 128), jnp.bfloat16)
    progs["flash forward B1 T256 H2 (ours)"] = (lambda q: workbench.flash_attention(q[0], q[1], q[2]), q)
    progs["flash forward B1 T256 H2 causal (ours)"] = (lambda q: workbench.flash_attention(q[0], q[1], q[2],
                                                                                          causal=True), q)
    progs["flash forward B1 T256 H2 (cuDNN)"] = (lambda q: jax.nn.dot_product_attention(
        q[0], q[1], q[2], implementation="cudnn"), q)
    for stage in ("default pool", "pool keeps freed memory"):
        if stage != "default pool":
            print(json.dumps({"cuMemPoolSetAttribute": keep_freed_memory()}), flush=True)
        for name, (f, a) in progs.items():
            try:
                b2b, single = timings(f, a)
                print(json.dumps(dict(stage=stage, program=name, b2b_us=b2b, single_us=single)), flush=True)
            except Exception as e:
                print(json.dumps(dict(stage=stage, program=name, error=f"{type(e).__name__}: {str(e)[:300]}")),
                      flush=True)


if __name__ == "__main__":
    main()

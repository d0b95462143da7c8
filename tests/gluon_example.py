"""Gluon kernels for the launcher's tests (importable by compile_check's child processes): y = alpha · x, and the
same doubling through a warp-specialized pair (a loading warp fills shared memory by TMA from a descriptor made
on the device, the default partition stores twice what it holds)."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma


@gluon.jit
def scale_rows(x, n, alpha, y, BLOCK: gl.constexpr, NW: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [NW], [0])
    i = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    gl.store(y + i, gl.load(x + i, mask=i < n) * alpha, mask=i < n)


@gluon.jit
def _load_tile(desc, buf, bar, row0):
    mbarrier.expect(bar, desc.block_type.nbytes)
    tma.async_load(desc, [row0, 0], bar, buf)


@gluon.jit
def _store_twice(buf, bar, y, row0, R: gl.constexpr, C: gl.constexpr, NW: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [NW, 1], [1, 0])
    mbarrier.wait(bar, 0)
    tile = buf.load(layout)
    rows = row0 + gl.arange(0, R, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, C, layout=gl.SliceLayout(0, layout))
    gl.store(y + gl.expand_dims(rows, 1) * C + gl.expand_dims(cols, 0), tile * 2.0)


@gluon.jit
def double_rows_specialized(x, n_rows, y, R: gl.constexpr, C: gl.constexpr, NW: gl.constexpr):
    """y = 2x for x [n_rows, C] float32, R rows per program (n_rows a multiple of R)."""
    shared: gl.constexpr = gl.NVMMASharedLayout.get_default_for([R, C], gl.float32)
    desc = tma.make_tensor_descriptor(x, [n_rows, C], [C, 1], [R, C], shared)
    buf = gl.allocate_shared_memory(gl.float32, [R, C], shared)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    row0 = gl.program_id(0) * R
    gl.warp_specialize([(_store_twice, (buf, bar, y, row0, R, C, NW)), (_load_tile, (desc, buf, bar, row0))],
                       [1], [24])

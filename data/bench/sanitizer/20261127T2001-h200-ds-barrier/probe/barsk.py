"""Kernels of bars.py."""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def _body(out, WG: gl.constexpr, MODE: gl.constexpr, N: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    acc = gl.zeros([128], gl.float32, layout)
    if MODE == "turns":
        if WG == 1:
            gl.inline_asm("bar.arrive 14, 256;")
    for i in range(N):
        if MODE == "turns":
            if WG == 0:
                gl.inline_asm("bar.sync 14, 256;")
            else:
                gl.inline_asm("bar.sync 15, 256;")
            acc += 1.0
            if WG == 0:
                gl.inline_asm("bar.arrive 15, 256;")
            elif i < N - 1:
                gl.inline_asm("bar.arrive 14, 256;")
        elif MODE == "nonaligned":
            acc += 1.0
            gl.inline_asm("barrier.sync 13, 256;")
        else:
            acc += 1.0
            gl.inline_asm("bar.sync 13, 256;")
    gl.store(out + WG * 128 + gl.arange(0, 128, layout), acc)


@gluon.jit
def _body1(out, MODE: gl.constexpr, N: gl.constexpr):
    _body(out, 1, MODE, N)


@gluon.jit
def bars_kernel(x, out, MODE: gl.constexpr, N: gl.constexpr):
    gl.warp_specialize([(_body, (out, 0, MODE, N)), (_body1, (out, MODE, N))], [4], [240])


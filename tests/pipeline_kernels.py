"""Small kernels for the pipeline tests (Triton needs @jit functions to live in a source file)."""

import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def unmasked_copy_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs))


@triton.jit
def unmasked_store_kernel(y_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.full([BLOCK], 7.0, tl.float32))


@triton.jit
def modulo_gather_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    # `% n` defeats the affine analysis: the load must fall back to an element gather.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    src = (offs * 7) % n
    tl.store(y_ptr + offs, tl.load(x_ptr + src, mask=offs < n), mask=offs < n)


@triton.jit
def inline_asm_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)
    tl.store(y_ptr + offs, y)


@triton.jit
def row_sum_loop_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    # Loop-carried pointer tensor: becomes a scalar loop-carried byte offset in nmpir.
    row = tl.program_id(0)
    ptrs = x_ptr + row * stride + tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(ptrs, mask=cols < n_cols, other=0.0)
        ptrs += BLOCK
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


@triton.jit
def big_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(out_ptr + offs, x + y, mask=m)


@triton.jit
def dot_loop_kernel(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * K + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * BN + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _k in range(0, K, BK):
        acc += tl.dot(tl.load(a_ptrs), tl.load(b_ptrs))
        a_ptrs += BK
        b_ptrs += BK * BN
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


@triton.jit
def big_sum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, tl.sum(x * x, axis=0))


@triton.jit
def big_center_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # x - max(x): every element needs the reduction first, so the tile must stay whole.
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, x - tl.max(x, axis=0), mask=offs < n)


@triton.jit
def big_cumsum_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    # a scan has no piece-wise form here: its whole input and result must be in the scratchpad at once
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.cumsum(tl.load(x_ptr + offs), axis=0))


@triton.jit
def libdevice_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, libdevice.erf(x) + libdevice.pow(x, 2.0), mask=m)

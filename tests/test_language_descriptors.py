"""Tensor descriptors on nmp: device-side `tl.make_tensor_descriptor` and host-side `TensorDescriptor` arguments.

Both reach nmp as masked pointer accesses (Triton's `rewrite_tensor_descriptor_to_pointer` pass; the
launcher expands a host descriptor into base, shape, strides and flags). What must hold is the GPU
semantics at the edges: the out-of-bounds part of a block loads as zero (or NaN), the out-of-bounds part
of a store is dropped, and neither trips nmp's bounds checks. Outputs go into views of larger
sentinel-filled tensors, so a write outside the described tensor would show. References are torch;
the edge cases are also run under Triton's interpreter, the portable statement of the semantics.
"""

from __future__ import annotations

import contextvars
import re

import pytest
import torch
import triton
import triton.language as tl
from triton.compiler.errors import CompilationError
from triton.tools.tensor_descriptor import TensorDescriptor

import triton_nmp
from tests.test_language_harness import assert_same, check_vs_interp
from triton_nmp.errors import NMPLaunchError, NMPOutOfBoundsError

SENTINEL = -77

# -- helpers ------------------------------------------------------------------------------------------------


def lane(dtype: torch.dtype) -> int:
    """Elements per 16 bytes: descriptors want 16-byte aligned bases and row strides."""
    return 16 // torch.empty((), dtype=dtype).element_size()


def rand(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Values that survive `* 2` exactly in every tested dtype (int8 included), in a view whose row
    strides are padded to 16 bytes (legal for descriptors whatever the last dimension)."""
    g = torch.Generator().manual_seed(seed)
    padded = (*shape[:-1], -(-shape[-1] // lane(dtype)) * lane(dtype))
    if dtype.is_floating_point:
        t = torch.randn(padded, generator=g).to(dtype)
    else:
        t = torch.randint(-50, 50, padded, generator=g).to(dtype)
    return t[..., :shape[-1]]


def padded_view(shape: tuple[int, ...], dtype: torch.dtype) -> tuple[torch.Tensor, tuple[slice, ...]]:
    """A sentinel-filled tensor with a margin around an inner view of `shape`, and the view's index.
    The last dimension's margin is 16 bytes and every row stride a multiple of 16 bytes, so the view
    meets the alignment rules of host descriptors."""
    margins = [1] * (len(shape) - 1) + [lane(dtype)]
    big_shape = [d + 2 * m for d, m in zip(shape, margins)]
    big_shape[-1] = -(-big_shape[-1] // lane(dtype)) * lane(dtype)
    big = torch.full(big_shape, SENTINEL, dtype=dtype)
    return big, tuple(slice(m, m + d) for m, d in zip(margins, shape))


def check_view_written(big: torch.Tensor, idx: tuple[slice, ...], expected: torch.Tensor, what: str) -> None:
    """`big[idx]` must equal `expected` and everything around it must still be the sentinel."""
    ref = torch.full_like(big, SENTINEL)
    ref[idx] = expected
    assert_same(big, ref, what=what)


def overlap(offs: tuple[int, ...], block: tuple[int, ...], shape: tuple[int, ...]) -> tuple[tuple, tuple] | None:
    """Where a block at `offs` meets a tensor of `shape`: (slices in the tensor, slices in the block)."""
    inside, within = [], []
    for o, b, n in zip(offs, block, shape):
        lo, hi = max(o, 0), min(o + b, n)
        if lo >= hi:
            return None
        inside.append(slice(lo, hi))
        within.append(slice(lo - o, hi - o))
    return tuple(inside), tuple(within)


def torch_window(x: torch.Tensor, offs: tuple[int, ...], block: tuple[int, ...], fill: float) -> torch.Tensor:
    """The block of `x` at `offs` as a descriptor load sees it: out-of-range elements are `fill`."""
    out = torch.full(block, fill, dtype=x.dtype)
    hit = overlap(offs, block, tuple(x.shape))
    if hit is not None:
        out[hit[1]] = x[hit[0]]
    return out


def torch_place(y: torch.Tensor, offs: tuple[int, ...], block: torch.Tensor) -> torch.Tensor:
    """`y` after a descriptor store of `block` at `offs`: only the in-range part lands."""
    out = y.clone()
    hit = overlap(offs, tuple(block.shape), tuple(y.shape))
    if hit is not None:
        out[hit[0]] = block[hit[1]]
    return out


def grid_for(shape: tuple[int, ...], block: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(triton.cdiv(n, b) for n, b in zip(shape, block))


# -- device-side descriptors ---------------------------------------------------------------------------------


@triton.jit
def dev_scale_1d(x_ptr, y_ptr, n, B: tl.constexpr):
    xd = tl.make_tensor_descriptor(x_ptr, shape=[n], strides=[1], block_shape=[B])
    yd = tl.make_tensor_descriptor(y_ptr, shape=[n], strides=[1], block_shape=[B])
    off = tl.program_id(0) * B
    yd.store([off], xd.load([off]) * 2)


@triton.jit
def dev_scale_2d(x_ptr, y_ptr, M, N, sxm, sym, BM: tl.constexpr, BN: tl.constexpr):
    xd = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[sxm, 1], block_shape=[BM, BN])
    yd = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[sym, 1], block_shape=[BM, BN])
    om, on = tl.program_id(0) * BM, tl.program_id(1) * BN
    yd.store([om, on], xd.load([om, on]) * 2)


@triton.jit
def dev_window_2d(x_ptr, y_ptr, M, N, sxm, om, on, BM: tl.constexpr, BN: tl.constexpr, PAD: tl.constexpr):
    """y (BM x BN, contiguous) = the block of x at (om, on), which may hang over any edge."""
    xd = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[sxm, 1], block_shape=[BM, BN], padding_option=PAD)
    rows, cols = tl.arange(0, BM)[:, None], tl.arange(0, BN)[None, :]
    tl.store(y_ptr + rows * BN + cols, xd.load([om, on]))


@triton.jit
def dev_store_window_2d(y_ptr, M, N, sym, om, on, BM: tl.constexpr, BN: tl.constexpr):
    """Store 1, 2, 3, ... as the block of y at (om, on); only its in-range part may land."""
    yd = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[sym, 1], block_shape=[BM, BN])
    v = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :] + 1
    yd.store([om, on], v.to(yd.dtype))


@triton.jit
def dev_window_3d(x_ptr, y_ptr, A, B, C, sxa, sxb, oa, ob, oc,
                  BA: tl.constexpr, BB: tl.constexpr, BC: tl.constexpr):
    """y (BA x BB x BC, contiguous) = the block of a strided 3-D x at (oa, ob, oc)."""
    xd = tl.make_tensor_descriptor(x_ptr, shape=[A, B, C], strides=[sxa, sxb, 1], block_shape=[BA, BB, BC])
    yd = tl.make_tensor_descriptor(y_ptr, shape=[BA, BB, BC], strides=[BB * BC, BC, 1], block_shape=[BA, BB, BC])
    yd.store([0, 0, 0], xd.load([oa, ob, oc]))


@triton.jit
def _descriptor_matmul(ad, bd, cd, K, pm, pn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                       B_T: tl.constexpr):
    """The K loop shared by the device- and host-descriptor matmuls: C tile (pm, pn) = A @ B (B^T rows)."""
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = ad.load([pm * BM, k * BK])
        if B_T:
            b = tl.trans(bd.load([pn * BN, k * BK]))
        else:
            b = bd.load([k * BK, pn * BN])
        acc = tl.dot(a, b, acc)
    cd.store([pm * BM, pn * BN], acc.to(cd.dtype))


@triton.jit
def dev_matmul(a_ptr, b_ptr, c_ptr, M, N, K, sam, sbk, sbn, scm,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, B_T: tl.constexpr):
    """C = A @ B with a K loop; with B_T, B is a transposed view (sbk == 1) read as N x K rows."""
    pm, pn = tl.program_id(0), tl.program_id(1)
    ad = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[sam, 1], block_shape=[BM, BK])
    cd = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[scm, 1], block_shape=[BM, BN])
    if B_T:
        bd = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[sbn, sbk], block_shape=[BN, BK])
    else:
        bd = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[sbk, sbn], block_shape=[BK, BN])
    _descriptor_matmul(ad, bd, cd, K, pm, pn, BM, BN, BK, B_T)


@triton.jit
def dev_atomic_add(x_ptr, M, N, om, on, BM: tl.constexpr, BN: tl.constexpr):
    xd = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    xd.atomic_add([om, on], tl.full([BM, BN], 1.0, tl.float32))


@triton.jit
def dev_gather_rows(x_ptr, idx_ptr, y_ptr, M, N, R: tl.constexpr, BN: tl.constexpr):
    """y[r] = x[idx[r], :BN] through a descriptor gather (rows past M read as zero)."""
    xd = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[1, BN])
    rows = tl.load(idx_ptr + tl.arange(0, R))
    tl.store(y_ptr + tl.arange(0, R)[:, None] * BN + tl.arange(0, BN)[None, :], xd.gather(rows, 0))


@triton.jit
def dev_lying_shape(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    """A descriptor that claims M x N elements whatever x really holds."""
    xd = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    tl.store(y_ptr + tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :], xd.load([0, 0]))


def test_device_1d_tail() -> None:
    """50 elements in blocks of 16: the fourth block hangs over by 14, a fifth program's block lies
    wholly outside; neither may read or write there."""
    x = rand((50,), torch.float32)
    big, idx = padded_view((50,), torch.float32)
    dev_scale_1d[(triton.cdiv(50, 16) + 1,)](x, big[idx], 50, B=16)
    check_view_written(big, idx, x * 2, "dev_scale_1d")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int8, torch.int32])
def test_device_2d_dtypes_tails(dtype: torch.dtype) -> None:
    """Tail blocks in both dimensions; the output is a strided view, the input a column slice."""
    M, N, BM = 19, 37, 8
    BN = max(16, lane(dtype))  # >= 16 bytes per block row
    xbig, xidx = padded_view((M, N), dtype)
    x = xbig[xidx]  # strided: row stride > N
    x.copy_(rand((M, N), dtype))
    big, idx = padded_view((M, N), dtype)
    y = big[idx]
    dev_scale_2d[grid_for((M, N), (BM, BN))](x, y, M, N, x.stride(0), y.stride(0), BM=BM, BN=BN)
    check_view_written(big, idx, x * 2, f"dev_scale_2d {dtype}")


# Last offsets are multiples of 16 bytes (fp32: 4 elements), as TMA and the interpreter require.
WINDOWS_2D = [(-3, -4), (13, 20), (-8, 28), (40, 0), (0, -16), (2, 4)]


@pytest.mark.parametrize("pad", ["zero", "nan"])
@pytest.mark.parametrize("offs", WINDOWS_2D)
def test_device_load_boundary(offs: tuple[int, int], pad: str) -> None:
    """Blocks over every edge, and wholly outside, read the padding value; same as torch's window."""
    M, N, BM, BN = 17, 23, 8, 16
    x = rand((M, N), torch.float32, seed=1)
    y = torch.zeros(BM, BN)
    dev_window_2d[(1,)](x, y, M, N, x.stride(0), *offs, BM=BM, BN=BN, PAD=pad)
    fill = float("nan") if pad == "nan" else 0.0
    assert_same(y, torch_window(x, offs, (BM, BN), fill), what=f"window at {offs} pad {pad}")


def test_device_load_boundary_vs_interpreter() -> None:
    """The interpreter (Triton's reference semantics) agrees at the corner where both padding rules show."""
    x = rand((17, 23), torch.float32, seed=2)
    for pad in ("zero", "nan"):
        check_vs_interp(dev_window_2d, (1,), x, torch.zeros(8, 16), 17, 23, x.stride(0), -3, 12,
                        BM=8, BN=16, PAD=pad, outputs=[1])


@pytest.mark.parametrize("offs", WINDOWS_2D)
def test_device_store_clipped(offs: tuple[int, int]) -> None:
    """Only the in-range part of a stored block lands; the view's surroundings keep the sentinel."""
    M, N, BM, BN = 17, 23, 8, 16
    big, idx = padded_view((M, N), torch.float32)
    y = big[idx]
    dev_store_window_2d[(1,)](y, M, N, y.stride(0), *offs, BM=BM, BN=BN)
    block = torch.arange(1, BM * BN + 1, dtype=torch.float32).reshape(BM, BN)
    expected = torch_place(torch.full((M, N), SENTINEL, dtype=torch.float32), offs, block)
    check_view_written(big, idx, expected, f"store at {offs}")


@pytest.mark.parametrize("offs", [(-1, 2, -4), (3, 4, 8), (0, 0, 0), (5, -2, 20)])
def test_device_3d_permuted_view(offs: tuple[int, int, int]) -> None:
    """A 3-D descriptor over a permuted (non-contiguous) view, blocks hanging over all three edges."""
    storage = rand((6, 4, 24), torch.float32, seed=3)
    x = storage.permute(1, 0, 2)[:, :, 2:22]  # shape (4, 6, 20), strides (24, 96, 1)
    block = (2, 4, 8)
    y = torch.zeros(block)
    dev_window_3d[(1,)](x, y, *x.shape, x.stride(0), x.stride(1), *offs, *block)
    assert_same(y, torch_window(x, offs, block, 0.0), what=f"3-D window at {offs}")


def test_device_3d_vs_interpreter() -> None:
    x = rand((4, 6, 20), torch.float32, seed=4)
    check_vs_interp(dev_window_3d, (1,), x, torch.zeros(2, 4, 8), 4, 6, 20, x.stride(0), x.stride(1), 3, -1, 16,
                    BA=2, BB=4, BC=8, outputs=[1])


@pytest.mark.parametrize(
    ("dtype", "M", "N", "K", "b_t"),
    [(torch.float32, 37, 29, 45, False), (torch.float16, 33, 20, 50, True)],
)
def test_device_matmul_k_loop(dtype: torch.dtype, M: int, N: int, K: int, b_t: bool) -> None:
    """Descriptors reused across a K loop feeding tl.dot; every shape has a masked tail, and the fp16
    case reads B from a transposed view through the view's own strides."""
    a = rand((M, K), dtype, seed=5)
    b = rand((N, K), dtype, seed=6).t() if b_t else rand((K, N), dtype, seed=6)
    big, idx = padded_view((M, N), dtype)
    c = big[idx]
    BM, BN, BK = 16, 16, 16
    dev_matmul[grid_for((M, N), (BM, BN))](a, b, c, M, N, K, a.stride(0), b.stride(0), b.stride(1), c.stride(0),
                                            BM=BM, BN=BN, BK=BK, B_T=b_t)
    ref = (a.float() @ b.float()).to(dtype)
    tol = 1e-2 if dtype == torch.float16 else 1e-4
    torch.testing.assert_close(c, ref, atol=tol, rtol=tol)
    check_view_written(big, idx, c.clone(), "matmul surroundings")


def test_device_atomic_add_clipped() -> None:
    """Descriptor atomics apply only to the in-range part of the block."""
    x = torch.zeros(10, 20)
    dev_atomic_add[(1,)](x, 10, 20, 6, 12, BM=8, BN=16)
    ref = torch.zeros(10, 20)
    ref[6:, 12:] = 1.0
    assert_same(x, ref, what="atomic_add")


def test_device_gather_rows() -> None:
    """Descriptor row gather, one index past the last row (reads zeros, like the interpreter)."""
    x = rand((12, 16), torch.float32, seed=7)
    idx = torch.tensor([0, 11, 3, 3, 12, 5, 7, 1], dtype=torch.int32)
    y = torch.zeros(8, 16)
    got, _ = check_vs_interp(dev_gather_rows, (1,), x, idx, y, 12, 16, R=8, BN=16, outputs=[2])
    ref = torch.cat([x, torch.zeros(1, 16)])[idx.long()]
    assert_same(got[2], ref, what="gather")


def test_device_needs_no_allocator() -> None:
    """GPUs need `triton.set_allocator` for device descriptors; nmp lowers them to pointers and never
    asks the allocator (but a set one does no harm)."""
    calls: list[int] = []

    def alloc(size: int, alignment: int, stream: int | None) -> torch.Tensor:
        calls.append(size)
        return torch.empty(size, dtype=torch.int8)

    def run() -> torch.Tensor:
        triton.set_allocator(alloc)
        y = torch.zeros(20)
        dev_scale_1d[(2,)](torch.ones(20), y, 20, B=16)
        return y

    y = contextvars.copy_context().run(run)  # the allocator stays local to this test
    assert_same(y, torch.full((20,), 2.0), what="with allocator")
    assert calls == []


# -- host-side descriptors -------------------------------------------------------------------------------------


@triton.jit
def host_scale(x_desc, y_desc):
    """y = 2 x block by block over a 1-, 2- or 3-D grid; block sizes come from the descriptor."""
    ND: tl.constexpr = len(x_desc.block_shape)
    o0 = tl.program_id(0) * x_desc.block_shape[0]
    if ND == 1:
        y_desc.store([o0], x_desc.load([o0]) * 2)
    elif ND == 2:
        o1 = tl.program_id(1) * x_desc.block_shape[1]
        y_desc.store([o0, o1], x_desc.load([o0, o1]) * 2)
    else:
        o1 = tl.program_id(1) * x_desc.block_shape[1]
        o2 = tl.program_id(2) * x_desc.block_shape[2]
        y_desc.store([o0, o1, o2], x_desc.load([o0, o1, o2]) * 2)


@triton.jit
def host_window_2d(x_desc, y_ptr, om, on):
    """y (contiguous) = the block of x_desc at (om, on)."""
    BM: tl.constexpr = x_desc.block_shape[0]
    BN: tl.constexpr = x_desc.block_shape[1]
    tl.store(y_ptr + tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :], x_desc.load([om, on]))


@triton.jit
def host_matmul(a_desc, b_desc, c_desc, B_T: tl.constexpr):
    """C = A @ B with K taken from A's descriptor; with B_T, b_desc describes B^T (N x K)."""
    BM: tl.constexpr = a_desc.block_shape[0]
    BK: tl.constexpr = a_desc.block_shape[1]
    BN: tl.constexpr = c_desc.block_shape[1]
    _descriptor_matmul(a_desc, b_desc, c_desc, a_desc.shape[1], tl.program_id(0), tl.program_id(1), BM, BN, BK,
                       B_T)


@triton.jit
def host_pair(pair, scale):
    """pair[1] = pair[0] * scale: descriptors inside a tuple argument, next to a scalar."""
    BM: tl.constexpr = pair[0].block_shape[0]
    BN: tl.constexpr = pair[0].block_shape[1]
    om, on = tl.program_id(0) * BM, tl.program_id(1) * BN
    pair[1].store([om, on], pair[0].load([om, on]) * scale)


@triton.jit
def host_tile_to_ptr(x_desc, y_ptr, B: tl.constexpr):
    """Uses the block as B x B: only right when x_desc's block_shape is [B, B]."""
    tl.store(y_ptr + tl.arange(0, B)[:, None] * B + tl.arange(0, B)[None, :], x_desc.load([0, 0]))


def host_desc(t: torch.Tensor, block: list[int], **kw) -> TensorDescriptor:
    return TensorDescriptor(t, list(t.shape), list(t.stride()), block, **kw)


def test_host_1d_tail() -> None:
    x = rand((45,), torch.float32, seed=8)
    big, idx = padded_view((45,), torch.float32)
    host_scale[(triton.cdiv(45, 16) + 1,)](host_desc(x, [16]), host_desc(big[idx], [16]))
    check_view_written(big, idx, x * 2, "host 1-D")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int8, torch.int32])
def test_host_2d_tails_and_narrow_shape(dtype: torch.dtype) -> None:
    """Tail blocks on both axes. The input descriptor is narrower than its tensor (the columns past its
    shape read as zero although memory is there); the output is a strided view whose surroundings
    must stay untouched."""
    M, N, BM = 21, 35, 8
    BN = max(16, lane(dtype))
    x = rand((M, 48), dtype, seed=9)
    xd = TensorDescriptor(x, [M, N - 3], list(x.stride()), [BM, BN])
    big, idx = padded_view((M, N), dtype)
    host_scale[grid_for((M, N), (BM, BN))](xd, host_desc(big[idx], [BM, BN]))
    expected = torch.zeros(M, N, dtype=dtype)
    expected[:, :N - 3] = x[:, :N - 3] * 2
    check_view_written(big, idx, expected, f"host 2-D {dtype}")


def test_host_3d_permuted_view() -> None:
    storage = rand((6, 5, 32), torch.float32, seed=10)
    x = storage.permute(1, 0, 2)  # (5, 6, 32), strides (32, 160, 1)
    block = [2, 4, 8]
    big, idx = padded_view((5, 6, 32), torch.float32)
    host_scale[grid_for((5, 6, 32), block)](host_desc(x, block), host_desc(big[idx], block))
    check_view_written(big, idx, x * 2, "host 3-D")


@pytest.mark.parametrize("pad", ["zero", "nan"])
@pytest.mark.parametrize("offs", [(-3, -4), (13, 20), (40, 0), (2, 4)])
def test_host_load_boundary(offs: tuple[int, int], pad: str) -> None:
    x = rand((17, 23), torch.float32, seed=11)
    y = torch.zeros(8, 16)
    host_window_2d[(1,)](host_desc(x, [8, 16], padding=pad), y, *offs)
    fill = float("nan") if pad == "nan" else 0.0
    assert_same(y, torch_window(x, offs, (8, 16), fill), what=f"host window at {offs} pad {pad}")


@pytest.mark.parametrize(
    ("dtype", "M", "N", "K", "b_t"),
    [(torch.float32, 37, 29, 45, False), (torch.float16, 33, 20, 50, True)],
)
def test_host_matmul(dtype: torch.dtype, M: int, N: int, K: int, b_t: bool) -> None:
    """A, B and C as host descriptors with tails everywhere; C is a view inside a sentinel tensor."""
    a = rand((M, K), dtype, seed=12)
    bt = rand((N, K), dtype, seed=13)
    b = bt.t() if b_t else rand((K, N), dtype, seed=14)
    big, idx = padded_view((M, N), dtype)
    b_desc = host_desc(bt, [16, 16]) if b_t else host_desc(b, [16, 16])  # B^T's rows are B's columns
    host_matmul[grid_for((M, N), (16, 16))](host_desc(a, [16, 16]), b_desc, host_desc(big[idx], [16, 16]), B_T=b_t)
    tol = 1e-2 if dtype == torch.float16 else 1e-4
    torch.testing.assert_close(big[idx], (a.float() @ b.float()).to(dtype), atol=tol, rtol=tol)
    check_view_written(big, idx, big[idx].clone(), "host matmul surroundings")


def test_host_descriptors_in_tuple() -> None:
    x = rand((20, 30), torch.float32, seed=14)
    big, idx = padded_view((20, 30), torch.float32)
    host_pair[grid_for((20, 30), (8, 16))]((host_desc(x, [8, 16]), host_desc(big[idx], [8, 16])), 3.0)
    check_view_written(big, idx, x * 3, "tuple of descriptors")


def test_host_round_f32_to_tf32() -> None:
    """`round_f32_to_tf32` rounds loaded fp32 to 10 mantissa bits (nearest-even), as TMA would."""
    x = rand((8, 16), torch.float32, seed=15)
    y = torch.zeros(8, 16)
    host_window_2d[(1,)](host_desc(x, [8, 16], round_f32_to_tf32=True), y, 0, 0)
    i = x.view(torch.int32)
    ref = ((i + 0xFFF + ((i >> 13) & 1)) & -8192).view(torch.float32)
    assert_same(y, ref, what="tf32 rounding")
    assert not torch.equal(y, x)


def test_host_descriptor_relaunch_uses_new_values() -> None:
    """A second launch with other tensors and shapes of the same block shape reuses the binary."""
    for M, N in ((9, 16), (30, 40)):
        x = rand((M, N), torch.float32, seed=M)
        y = torch.zeros(M, N)
        host_scale[grid_for((M, N), (8, 16))](host_desc(x, [8, 16]), host_desc(y, [8, 16]))
        assert_same(y, x * 2, what=f"host scale {M}x{N}")


# -- lowering: structured DMA, scratchpad ----------------------------------------------------------------------


def memory_ops(compiled) -> set[str]:
    """How a compiled kernel moves data: `dma_load`/`dma_store` (structured) or `gather`/`scatter`."""
    return set(re.findall(r"nmp\.(dma_load|dma_store|gather|scatter) ", compiled.asm["nmpir"]))


def test_program_id_offsets_lower_to_dma() -> None:
    """Offsets built from program ids are provably >= 0, so the rewrite's masks reduce to a DMA box."""
    x, y = torch.zeros(20, 32), torch.zeros(20, 32)
    compiled = dev_scale_2d[(3, 2)](x, y, 20, 32, 32, 32, BM=8, BN=16)
    assert memory_ops(compiled) == {"dma_load", "dma_store"}


def test_loop_offsets_lower_to_dma() -> None:
    """Loop counters from 0 are provably >= 0 as well: the matmul's K loop streams tiles by DMA."""
    a, b, c = (host_desc(torch.zeros(32, 32), [16, 16]) for _ in range(3))
    compiled = host_matmul[(2, 2)](a, b, c, B_T=False)
    assert memory_ops(compiled) == {"dma_load", "dma_store"}


def test_large_fp32_host_blocks_fit() -> None:
    """128 x 128 fp32 blocks (64 KiB each), tails on both axes: the block tiles and the tf32 branch
    of the load fit the 256 KiB scratchpad."""
    x = rand((130, 140), torch.float32, seed=16)
    y = torch.zeros(130, 140)
    compiled = host_scale[(2, 2)](host_desc(x, [128, 128]), host_desc(y, [128, 128]))
    assert_same(y, x * 2, what="128 x 128 blocks")
    assert compiled.metadata.shared <= 256 * 1024


def test_check_config_takes_host_descriptors() -> None:
    """The legality query (used by autotuning's pruning) types a descriptor by its dtype and block shape."""
    d = host_desc(torch.zeros(64, 64), [32, 32])
    verdict = triton_nmp.check_config(host_scale, {"x_desc": d, "y_desc": d})
    assert verdict.legal, verdict.reason
    assert 2 * 32 * 32 * 4 <= verdict.spm_peak_bytes <= 64 * 1024


# -- bad inputs -------------------------------------------------------------------------------------------------


def compiled_window() -> object:
    """host_window_2d compiled for an fp32 [8, 16] descriptor, to relaunch with other arguments."""
    x = torch.zeros(8, 16)
    return host_window_2d.warmup(host_desc(x, [8, 16]), x, 0, 0, grid=(1,))


def test_bad_block_shape_for_kernel_use() -> None:
    """block_shape [8, 16] for a kernel that treats the block as 16 x 16: Triton's shape error."""
    x = torch.zeros(16, 16)
    with pytest.raises(CompilationError, match=r"(?s)def host_tile_to_ptr.*incompatible dimensions at index 0"):
        host_tile_to_ptr[(1,)](host_desc(x, [8, 16]), x, B=16)


def test_bad_block_shape_on_relaunch() -> None:
    """A compiled kernel relaunched with another block shape is refused before anything runs."""
    k, x = compiled_window(), torch.zeros(16, 16)
    msg = (r"kernel 'host_window_2d', argument 'x_desc': has block_shape \[16, 16\]; "
           r"the kernel was compiled for \[8, 16\]")
    with pytest.raises(NMPLaunchError, match=msg):
        k[(1, 1, 1)](host_desc(x, [16, 16]), x, 0, 0)


def test_bad_rank_on_relaunch() -> None:
    k, x = compiled_window(), torch.zeros(2, 8, 16)
    with pytest.raises(NMPLaunchError, match=r"argument 'x_desc': has rank 3 .* compiled for rank 2"):
        k[(1, 1, 1)](host_desc(x, [1, 8, 16]), x, 0, 0)


def test_bad_dtype_on_relaunch() -> None:
    k, x = compiled_window(), torch.zeros(8, 16, dtype=torch.float16)
    msg = r"argument 'x_desc': has a base tensor of dtype torch.float16; the kernel was compiled for tensordesc<fp32"
    with pytest.raises(NMPLaunchError, match=msg):
        k[(1, 1, 1)](host_desc(x, [8, 16]), x, 0, 0)


def test_bad_not_a_descriptor_on_relaunch() -> None:
    k, x = compiled_window(), torch.zeros(8, 16)
    msg = r"kernel 'host_window_2d', argument 'x_desc': expects a triton.tools.tensor_descriptor.TensorDescriptor"
    with pytest.raises(NMPLaunchError, match=msg):
        k[(1, 1, 1)](x, x, 0, 0)


def test_bad_tensor_instead_of_descriptor() -> None:
    """A plain tensor specialises as a pointer, which is no descriptor: Triton says so at compile time."""
    x = torch.zeros(8, 16)
    with pytest.raises(CompilationError, match=r"(?s)def host_window_2d.*'tensor' object has no attribute"):
        host_window_2d[(1,)](x, x, 0, 0)


def test_bad_base_not_on_cpu() -> None:
    x = torch.empty(8, 16, device="meta")
    with pytest.raises(NMPLaunchError, match=r"argument 'x_desc.base': is a tensor on device 'meta'"):
        host_window_2d[(1,)](host_desc(x, [8, 16]), torch.zeros(8, 16), 0, 0)


def test_bad_shape_beyond_base() -> None:
    """A descriptor claiming more rows than its base holds is refused at launch, not caught mid-kernel."""
    x = torch.zeros(8, 16)
    msg = (r"kernel 'host_window_2d', argument 'x_desc': shape \[12, 16\] with strides \[16, 1\] reaches "
           r"768 bytes from the base, but its base tensor holds only 512 bytes")
    with pytest.raises(NMPLaunchError, match=msg):
        host_window_2d[(1,)](TensorDescriptor(x, [12, 16], [16, 1], [8, 16]), torch.zeros(8, 16), 0, 0)


def test_bad_padding_value() -> None:
    d = host_desc(torch.zeros(8, 16), [8, 16])
    d.padding = "inf"  # past TensorDescriptor's own check
    with pytest.raises(NMPLaunchError, match=r"argument 'x_desc': has padding 'inf'; expected 'zero' or 'nan'"):
        host_window_2d[(1,)](d, torch.zeros(8, 16), 0, 0)


def test_bad_nan_padding_for_integers() -> None:
    """Both APIs refuse NaN padding of integer blocks (Triton's own checks)."""
    x = torch.zeros(8, 16, dtype=torch.int32)
    with pytest.raises(AssertionError, match=re.escape("Padding option `nan` is only supported for floating point")):
        host_desc(x, [8, 16], padding="nan")
    with pytest.raises(CompilationError, match=r"(?s)def dev_window_2d.*`nan` is not supported for integer blocks"):
        dev_window_2d[(1,)](x, x, 8, 16, 16, 0, 0, BM=8, BN=16, PAD="nan")


def test_bad_device_descriptor_shape_is_out_of_bounds() -> None:
    """A device descriptor is only as honest as its shape: claiming 16 x 16 over 4 x 4 elements is an
    out-of-bounds access nmp reports (naming the argument) without touching memory outside x."""
    x, y = torch.zeros(4, 4), torch.zeros(16, 16)
    with pytest.raises(NMPOutOfBoundsError, match=r"kernel 'dev_lying_shape': tt.load of argument 'x_ptr'"):
        dev_lying_shape[(1,)](x, y, 16, 16, BM=16, BN=16)

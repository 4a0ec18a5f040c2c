"""Inductor's flattened index math (`xindex // d`, `xindex % n`) on nmp: a strided DMA when the block is
aligned to d (backend/access_split.py), today's gather when it is not; the results match torch either way."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl


@triton.jit
def rows_kernel(in_ptr, out_ptr, xnumel: tl.constexpr, D: tl.constexpr, STRIDE: tl.constexpr, XBLOCK: tl.constexpr):
    """out[x] = in[(x % D) + STRIDE * (x // D)]: Inductor's read of a [rows, D] slice of wider rows."""
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    x0 = xindex % D
    x1 = xindex // D
    tmp = tl.load(in_ptr + (x0 + STRIDE * x1), xmask)
    tl.store(out_ptr + xindex, tmp, xmask)


@triton.jit
def heads_kernel(in_ptr, out_ptr, D: tl.constexpr, XBLOCK: tl.constexpr):
    """The transpose copy of attention heads: out[h, s, d] = in[s, h, d] for 12 heads of D, 32 positions,
    with the coordinates recovered as `x % D`, `(x // D) % 32`, `x // (32 * D)` (no mask: Inductor drops it
    when the block divides the element count)."""
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    x0 = xindex % D
    x1 = (xindex // D) % 32
    x2 = xindex // (32 * D)
    tmp = tl.load(in_ptr + (x0 + D * x2 + 12 * D * x1))
    tl.store(out_ptr + xindex, tmp)


@triton.jit
def kv_write_kernel(pos_ptr, in_ptr, cache_ptr, xnumel: tl.constexpr, XBLOCK: tl.constexpr):
    """Inductor's KV-cache `index_put` of one token: cache[h, pos, d] = in[h * 64 + d] with a loaded
    position wrapped when negative (`where(p < 0, p + 1024, p)`)."""
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    x0 = xindex % 64
    x1 = xindex // 64
    p = tl.broadcast_to(tl.load(pos_ptr), [XBLOCK])
    p = tl.where(p < 0, p + 1024, p)
    tmp = tl.load(in_ptr + xindex, xmask)
    tl.store(cache_ptr + (x0 + 64 * p + 65536 * x1), tmp, xmask)


@triton.jit
def column_sum_kernel(in_ptr, out_ptr, xnumel: tl.constexpr, rnumel: tl.constexpr, D: tl.constexpr,
                      XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    """Inductor's reduction of attention @ V: out[h, d] = sum_r in[h, r, d], xindex over (h, d) of size D."""
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    rbase = tl.arange(0, RBLOCK)[None, :]
    x0 = xindex % D
    x1 = xindex // D
    acc = tl.zeros([XBLOCK, RBLOCK], tl.float32)
    for roffset in tl.range(0, rnumel, RBLOCK):
        rindex = roffset + rbase
        rmask = rindex < rnumel
        tmp = tl.load(in_ptr + (x0 + D * rindex + D * rnumel * x1), rmask & xmask, other=0.0)
        acc = acc + tmp
    tl.store(out_ptr + xindex, tl.sum(acc, 1)[:, None], xmask)


def _accesses(kernel) -> tuple[int, int]:
    """(DMA descriptors, element gathers and scatters) in a compiled kernel's nmpir."""
    text = kernel.asm["nmpir"]
    return (text.count("nmp.dma_load") + text.count("nmp.dma_store"),
            text.count("nmp.gather") + text.count("nmp.scatter"))


@pytest.mark.parametrize("d,xblock,n,aligned", [
    (64, 256, 1024, True),    # d divides the block: rows of 64
    (64, 16, 1024, True),     # the block divides d: one row piece per program
    (64, 256, 1000, False),   # a masked tail ends inside a row (1000 = 15 rows + 40): not a box, gather
    (48, 64, 960, False),     # neither divides: gather
])
def test_rows_of_a_flat_index(d, xblock, n, aligned):
    src = torch.randn(n // d + 1, 3 * d)
    out = torch.empty(n)
    k = rows_kernel[(triton.cdiv(n, xblock),)](src, out, n, D=d, STRIDE=3 * d, XBLOCK=xblock)
    x = torch.arange(n)
    torch.testing.assert_close(out, src.flatten()[x % d + 3 * d * (x // d)])
    assert _accesses(k) == ((2, 0) if aligned else (1, 1)), k.asm["nmpir"]


@pytest.mark.parametrize("d,xblock,aligned", [
    (64, 4096, True),   # two heads of 32 rows of 64 per program: a 3-D descriptor
    (64, 512, True),    # 8 rows of one head
    (64, 32, True),     # half a row
    (48, 512, False),   # 512 elements are 10 2/3 rows of 48: gather
])
def test_head_transpose_copy(d, xblock, aligned):
    src = torch.randn(32, 12, d)
    out = torch.empty(12, 32, d)
    k = heads_kernel[(12 * 32 * d // xblock,)](src, out, D=d, XBLOCK=xblock)
    torch.testing.assert_close(out, src.transpose(0, 1))
    assert _accesses(k) == ((2, 0) if aligned else (1, 1)), k.asm["nmpir"]


@pytest.mark.parametrize("pos", [5, -3])
@pytest.mark.parametrize("xblock", [16, 256])
def test_kv_cache_write_of_a_loaded_position(pos, xblock):
    cache = torch.zeros(12, 1024, 64, dtype=torch.float16)
    new = torch.randn(768).half()
    k = kv_write_kernel[(triton.cdiv(768, xblock),)](torch.tensor([pos], dtype=torch.int32), new, cache, 768,
                                                     XBLOCK=xblock)
    want = torch.zeros_like(cache)
    want[:, pos % 1024] = new.view(12, 64)
    torch.testing.assert_close(cache, want)
    assert _accesses(k) == (3, 0), k.asm["nmpir"]  # the position, the new row, the cache


@pytest.mark.parametrize("d,xblock,aligned", [(64, 128, True), (64, 32, True), (48, 32, False)])
def test_split_reduction_over_heads(d, xblock, aligned):
    src = torch.randn(12, 256, d)
    out = torch.empty(12 * d)
    k = column_sum_kernel[(triton.cdiv(12 * d, xblock),)](src, out, 12 * d, 256, D=d, XBLOCK=xblock, RBLOCK=64)
    torch.testing.assert_close(out, src.sum(1).flatten(), atol=1e-4, rtol=1e-4)
    assert _accesses(k)[1] == (0 if aligned else 1), k.asm["nmpir"]

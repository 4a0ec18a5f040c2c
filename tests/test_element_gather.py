"""Element gathers and scatters in the offsets form: the argument plus a tile of offsets in elements.

An access whose every element is its own address (`tl.load(table + ids)`, `x[perm] = y`, Inductor's
indirect indexing `in_ptr + (x0 + D * tmp)`) moves element by element. Its address is not a tile of
pointers (8 B per element) but the argument, a scalar byte offset and the program's own index tensor
(i32 ids stay i32), or the sum of several index tensors: in i32 when their bounds prove it cannot
overflow, else in i64. Numerics against torch (and Triton's interpreter for the bounded sums),
bounds checks on every element, and the scratchpad the pointer tile no longer takes.
"""

from __future__ import annotations

import re

import pytest
import torch
import triton
import triton.language as tl

from tests.test_language_harness import check_vs_interp
from triton_nmp.errors import NMPOutOfBoundsError


@triton.jit
def embedding_flat(table, ids, out, n, D: tl.constexpr, XBLOCK: tl.constexpr):
    """Inductor's form of an embedding: one flat index, row id loaded, `x0 + D * id` per element."""
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < n
    x0 = xindex % D
    x1 = xindex // D
    tmp0 = tl.load(ids + x1, xmask, other=0)
    tl.store(out + xindex, tl.load(table + (x0 + D * tmp0), xmask, other=-1.0), xmask)


@triton.jit
def scatter_perm(src, perm, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + tl.load(perm + offs, mask=m, other=0), tl.load(src + offs, mask=m), mask=m)


@triton.jit
def gather_normalize_scatter(x, ids, n, BLOCK: tl.constexpr):
    """x[ids] /= x[ids].sum(): one address tile read by a gather and, after a reduction, a scatter."""
    offs = tl.arange(0, BLOCK)
    m = offs < n
    p = x + tl.load(ids + offs, mask=m, other=0)
    v = tl.load(p, mask=m, other=0.0)
    tl.store(p, v / tl.sum(v, axis=0), mask=m)


@triton.jit
def both_axes_indexed(table, rows, cols, out, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    r = tl.load(rows + tl.arange(0, BM))
    c = tl.load(cols + tl.arange(0, BN))
    x = tl.load(table + r[:, None] * D + c[None, :])
    tl.store(out + tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :], x)


@triton.jit
def bounded_sum(x, out, n, WIDE: tl.constexpr, BLOCK: tl.constexpr):
    """Two index tensors added to the pointer: `(offs * 7) % 1000` (|.| < 1000) and an arange."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    k = offs.to(tl.int64) if WIDE else offs
    p = x + (k * 7) % 1000
    tl.store(out + offs, tl.load(p + tl.arange(0, BLOCK), mask=offs < n, other=0.0), mask=offs < n)


@triton.jit
def bag_sum(table, ids, out, n, K, stride, BLOCK: tl.constexpr):
    """sum_k table[k * stride + ids]: the pointer tile is carried by the loop (as a scalar offset)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    p = table + tl.load(ids + offs, mask=m, other=0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for _ in range(K):
        acc += tl.load(p, mask=m, other=0.0)
        p += stride
    tl.store(out + offs, acc, mask=m)


def _gather_lines(compiled) -> list[str]:
    return [ln for ln in compiled.asm["nmpir"].splitlines() if "nmp.gather" in ln or "nmp.scatter" in ln]


def _offsets_operand(line: str) -> str:
    """The offsets tile of a gather or scatter in the offsets form (its third operand)."""
    return re.search(r"nmp\.(?:gather|scatter) %[\w.]+, %[\w.]+, (%[\w.]+)", line).group(1)


def _plan(compiled) -> list[str]:
    return [ln for ln in compiled.asm["nmpir"].splitlines() if ln.startswith("//   [")]


@pytest.mark.parametrize("id_dtype", [torch.int64, torch.int32])
def test_embedding_gather_reads_the_ids_tile_as_offsets(id_dtype):
    D, vocab = 48, 300
    table = torch.randn(vocab, D)
    ids = torch.randint(0, vocab, (37,), dtype=id_dtype)
    out = torch.empty(37, D)
    k = embedding_flat[(triton.cdiv(out.numel(), 256),)](table, ids, out, out.numel(), D=D, XBLOCK=256)
    torch.testing.assert_close(out, table[ids.long()], rtol=0, atol=0)
    ids_gather, row_gather = _gather_lines(k)  # x1 = xindex // D is not affine either
    assert "nmp.gather %ids" in ids_gather and f"scale = {ids.element_size()}" in ids_gather, ids_gather
    assert "nmp.gather %table" in row_gather and "scale = 4" in row_gather, row_gather
    assert "tt.addptr" not in k.asm["nmpir"] and "xptr" not in "\n".join(_plan(k))


def test_scatter_through_a_permutation():
    n = 1000
    src, perm = torch.randn(n), torch.randperm(n)
    out = torch.zeros(n)
    k = scatter_perm[(4,)](src, perm, out, n, BLOCK=256)
    ref = torch.zeros(n)
    ref[perm] = src
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    (scatter,) = _gather_lines(k)
    assert "nmp.scatter %out" in scatter and "scale = 4" in scatter, scatter


@pytest.mark.parametrize("id_dtype", [torch.int64, torch.int32])
def test_a_shared_address_tile_is_the_ids_tile(id_dtype):
    """The gather and the scatter after the reduction both read the ids tile: with int32 ids no
    8-byte pointer tile is kept across the reduction (it used to take 32 KiB of the 80 KiB peak)."""
    n = 4096
    x = torch.rand(2 * n) + 0.5
    ids = torch.randperm(2 * n)[:n].to(id_dtype)
    ref = x.clone()
    ref[ids.long()] = ref[ids.long()] / ref[ids.long()].sum()
    k = gather_normalize_scatter[(1,)](x, ids, n, BLOCK=n)
    torch.testing.assert_close(x, ref)
    assert not any("xptr" in ln for ln in _plan(k)), _plan(k)
    assert k.metadata.shared == (48 if id_dtype == torch.int32 else 64) * 1024


def test_both_axes_indexed_sum_offsets_in_i64():
    D = 256
    table = torch.randn(1000, D)
    rows, cols = torch.randint(0, 1000, (32,)), torch.randperm(D)[:64].contiguous()
    out = torch.empty(32, 64)
    k = both_axes_indexed[(1,)](table, rows, cols, out, D=D, BM=32, BN=64)
    torch.testing.assert_close(out, table[rows][:, cols], rtol=0, atol=0)
    (gather,) = _gather_lines(k)
    offsets = _offsets_operand(gather)
    # loaded int64 ids have no bound: their sum is kept in 64 bits
    assert re.search(rf"{re.escape(offsets)} = nmp\.vec arith\.addi .*tile<32x64xi64>", k.asm["nmpir"])


@pytest.mark.parametrize("wide", [False, True])
def test_bounded_offsets_are_summed_in_i32(wide):
    """|(k * 7) % 1000| < 1000 and the arange < 64: the sum fits 32 bits, even from int64 values."""
    n = 200
    x, out = torch.randn(1100), torch.empty(n)
    got, _ref = check_vs_interp(bounded_sum, (4,), x, out, n, WIDE=wide, BLOCK=64, outputs=[1])
    offs = torch.arange(n)
    torch.testing.assert_close(got[1], x[(offs * 7) % 1000 + offs % 64], rtol=0, atol=0)
    k = bounded_sum[(4,)](x, out, n, WIDE=wide, BLOCK=64)
    (gather,) = _gather_lines(k)
    offsets = _offsets_operand(gather)
    assert re.search(rf"{re.escape(offsets)} = nmp\.vec arith\.addi .*tile<64xi32>", k.asm["nmpir"])


@pytest.mark.parametrize("id_dtype", [torch.int64, torch.int32])
def test_loop_carried_pointer_gathers_through_the_ids_tile(id_dtype):
    n, K, stride = 300, 3, 1000
    table = torch.randn(K * stride)
    ids = torch.randint(0, stride, (n,), dtype=id_dtype)
    out = torch.empty(n)
    k = bag_sum[(3,)](table, ids, out, n, K, stride, BLOCK=128)
    torch.testing.assert_close(out, sum(table[ids.long() + j * stride] for j in range(K)))
    (gather,) = _gather_lines(k)
    # base + the loop's scalar byte offset + the ids tile in elements
    assert re.search(r"nmp\.gather %table, %\w+_off, %\w+, .*scale = 4", gather), gather
    assert f"{_offsets_operand(gather)} = nmp.dma_load %ids" in k.asm["nmpir"]


def test_out_of_range_ids_are_reported_per_element():
    D, vocab = 16, 10
    table = torch.randn(vocab, D)
    ids = torch.tensor([1, 2, vocab, 3])  # row 10 starts at byte 640, the table has 640 bytes
    out = torch.empty(4, D)
    with pytest.raises(NMPOutOfBoundsError, match=r"tt\.load of argument 'table' touches bytes \[640, 644\) "
                       r"but the tensor spans \[0, 640\) bytes, at .*test_element_gather\.py:\d+"):
        embedding_flat[(1,)](table, ids, out, out.numel(), D=D, XBLOCK=64)
    with pytest.raises(NMPOutOfBoundsError, match=r"touches bytes \[-64, -60\)"):
        embedding_flat[(1,)](table, torch.tensor([0, -1]), out, 2 * D, D=D, XBLOCK=64)


def test_out_of_range_scatter_writes_nothing_outside():
    storage = torch.zeros(300)
    out = storage[:256]
    perm = torch.arange(256)
    perm[7] = 256  # one past the end of `out`, inside `storage`
    with pytest.raises(NMPOutOfBoundsError, match=r"tt\.store of argument 'out' touches bytes \[1024, 1028\)"):
        scatter_perm[(1,)](torch.ones(256), perm, out, 256, BLOCK=256)
    assert torch.all(storage[256:] == 0)

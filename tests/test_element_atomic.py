"""Atomics on tiles of addresses in the offsets form: the argument plus a tile of offsets in elements.

`tl.atomic_add(grad_table + idx[:, None] * D + cols[None, :], g, mask=m)` (an embedding's backward) or
`tl.atomic_add(hist + bins, 1)` (a histogram) update element by element, like an element scatter. Their
addresses are the argument, a scalar byte offset and the program's own index tensor (the bins as they
are), or the sum of several index tensors, in i32 only when their bounds prove it. Numerics against
torch (Triton's interpreter for returned old values, compare-and-swap and the bounded sums), bounds
checks on every element, and the IR form.
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
def embedding_backward(grad_out, ids, grad_table, n, D: tl.constexpr, BM: tl.constexpr, BD: tl.constexpr):
    """grad_table[ids[r], :] += grad_out[r, :]: rows of the gradient added at loaded row ids."""
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.arange(0, BD)
    m = (rows < n)[:, None] & (cols < D)[None, :]
    idx = tl.load(ids + rows, mask=rows < n, other=0)
    g = tl.load(grad_out + rows[:, None] * D + cols[None, :], mask=m, other=0.0)
    tl.atomic_add(grad_table + idx[:, None] * D + cols[None, :], g, mask=m)


@triton.jit
def histogram(x, hist, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    bins = tl.load(x + offs, mask=m, other=0)
    tl.atomic_add(hist + bins, 1, mask=m)


@triton.jit
def rank_in_bin(x, hist, rank, n, BLOCK: tl.constexpr):
    """The old counts an atomic returns: each element's rank among the earlier ones of its bin."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    bins = tl.load(x + offs, mask=m, other=0)
    old = tl.atomic_add(hist + bins, 1, mask=m, sem="relaxed", scope="gpu")
    tl.store(rank + offs, old, mask=m)


@triton.jit
def claim_slots(locks, ids, owner, n, BLOCK: tl.constexpr):
    """Compare-and-swap through the ids: the first program to see a free slot (0) takes it."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    slot = tl.load(ids + offs)
    old = tl.atomic_cas(locks + slot, offs * 0, offs + 1, sem="acq_rel")
    tl.store(owner + offs, old)


@triton.jit
def bounded_max(x, v, old_out, n, BLOCK: tl.constexpr):
    """Two bounded index tensors (`(offs * 7) % 13` and an arange below 16): summed in i32."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    val = tl.load(v + offs, mask=m, other=0)
    old = tl.atomic_max(x + (offs * 7) % 13 + tl.arange(0, BLOCK) % 16, val, mask=m)
    tl.store(old_out + offs, old, mask=m)


@triton.jit
def swap_in(x, ids, v, old_out, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    old = tl.atomic_xchg(x + tl.load(ids + offs), tl.load(v + offs))
    tl.store(old_out + offs, old)


@triton.jit
def read_then_add(table, ids, delta, seen, n, BLOCK: tl.constexpr):
    """One address tile read by a gather, then updated by an atomic (a sparse optimizer step)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    p = table + tl.load(ids + offs, mask=m, other=0)
    tl.store(seen + offs, tl.load(p, mask=m, other=0.0), mask=m)
    tl.atomic_add(p, tl.load(delta + offs, mask=m, other=0.0), mask=m)


def _atomic_lines(compiled) -> list[str]:
    return [ln for ln in compiled.asm["nmpir"].splitlines() if "nmp.atomic" in ln]


def _offsets_operand(line: str) -> str:
    """The offsets tile of an atomic in the offsets form (its third operand)."""
    return re.search(r"nmp\.atomic %[\w.]+, %[\w.]+, (%[\w.]+)", line).group(1)


@pytest.mark.parametrize("id_dtype", [torch.int64, torch.int32])
def test_embedding_backward_adds_through_the_offsets_form(id_dtype):
    n, D, vocab = 70, 40, 9  # repeated ids: several rows add into one table row
    g = torch.Generator().manual_seed(0)
    grad_out = torch.randint(-8, 8, (n, D), generator=g).float()  # exact sums in any order
    ids = torch.randint(0, vocab, (n,), generator=g, dtype=id_dtype)
    grad_table = torch.zeros(vocab, D)
    k = embedding_backward[(triton.cdiv(n, 32),)](grad_out, ids, grad_table, n, D=D, BM=32, BD=64)
    torch.testing.assert_close(grad_table, torch.zeros(vocab, D).index_add_(0, ids.long(), grad_out), rtol=0, atol=0)
    (atomic,) = _atomic_lines(k)
    assert "nmp.atomic %grad_table" in atomic and "kind = fadd" in atomic and "scale = 4" in atomic, atomic
    # a loaded id times D has no 32-bit bound: the sum with the columns is kept in 64 bits
    assert re.search(rf"{re.escape(_offsets_operand(atomic))} = nmp\.vec arith\.addi .*tile<32x64xi64>",
                     k.asm["nmpir"])
    assert "tt.addptr" not in k.asm["nmpir"] and "nmp.addptr" not in k.asm["nmpir"]


@pytest.mark.parametrize("bin_dtype", [torch.int64, torch.int32])
def test_histogram_reads_the_bins_as_offsets(bin_dtype):
    n, nbins = 1000, 37
    x = torch.randint(0, nbins, (n,), dtype=bin_dtype)
    hist = torch.zeros(nbins, dtype=torch.int32)
    k = histogram[(triton.cdiv(n, 256),)](x, hist, n, BLOCK=256)
    torch.testing.assert_close(hist, torch.bincount(x.long(), minlength=nbins).int(), rtol=0, atol=0)
    (atomic,) = _atomic_lines(k)
    # the bins tile itself is the offsets tile: no pointer tile, no sum
    assert f"{_offsets_operand(atomic)} = nmp.dma_load %x" in k.asm["nmpir"], atomic
    assert "scale = 4" in atomic and "nmp.addptr" not in k.asm["nmpir"]


def test_returned_old_values_with_sem_and_scope_match_interpreter():
    n = 300
    x = torch.randint(0, 11, (n,), dtype=torch.int32)
    got, _ref = check_vs_interp(rank_in_bin, (3,), x, torch.zeros(11, dtype=torch.int32),
                                torch.full((n,), -1, dtype=torch.int32), n, BLOCK=128, outputs=[1, 2])
    hist, rank = got[1], got[2]
    assert hist.tolist() == torch.bincount(x.long(), minlength=11).tolist()
    for b in range(11):  # the ranks within a bin are 0, 1, 2, ... in element order
        assert rank[x == b].tolist() == list(range(int(hist[b])))


def test_compare_and_swap_through_ids_matches_interpreter():
    ids = torch.tensor([3, 1, 3, 0, 1, 7, 3, 2] * 4, dtype=torch.int32)
    locks, owner = torch.zeros(8, dtype=torch.int32), torch.full((32,), -1, dtype=torch.int32)
    got, _ref = check_vs_interp(claim_slots, (4,), locks, ids, owner, 32, BLOCK=8, outputs=[0, 2])
    assert got[0].tolist() == [4, 2, 8, 1, 0, 0, 0, 6]  # the first element (offs + 1) of each slot
    k = claim_slots[(1,)](torch.zeros(8, dtype=torch.int32), ids, owner, 8, BLOCK=8)
    (cas,) = _atomic_lines(k)
    assert "kind = cas" in cas and "scale = 4" in cas, cas


def test_bounded_offsets_are_summed_in_i32():
    n = 200
    g = torch.Generator().manual_seed(1)
    v = torch.randint(-1000, 1000, (n,), generator=g, dtype=torch.int32)
    got, _ref = check_vs_interp(bounded_max, (4,), torch.full((28,), -5000, dtype=torch.int32), v,
                                torch.zeros(n, dtype=torch.int32), n, BLOCK=64, outputs=[0, 2])
    offs = torch.arange(n)
    ref = torch.full((28,), -5000, dtype=torch.int32).scatter_reduce(0, (offs * 7) % 13 + offs % 16, v, "amax")
    torch.testing.assert_close(got[0], ref, rtol=0, atol=0)
    k = bounded_max[(4,)](torch.zeros(28, dtype=torch.int32), v, torch.zeros(n, dtype=torch.int32), n, BLOCK=64)
    (atomic,) = _atomic_lines(k)
    assert re.search(rf"{re.escape(_offsets_operand(atomic))} = nmp\.vec arith\.addi .*tile<64xi32>",
                     k.asm["nmpir"])


def test_exchange_through_ids_returns_the_old_values():
    x = torch.arange(16, dtype=torch.float32)
    ids = torch.randperm(16)
    v = torch.randn(16)
    old = torch.empty(16)
    swap_in[(1,)](x, ids, v, old, BLOCK=16)
    ref = torch.arange(16, dtype=torch.float32)
    torch.testing.assert_close(old, ref[ids], rtol=0, atol=0)
    ref[ids] = v
    torch.testing.assert_close(x, ref, rtol=0, atol=0)


@pytest.mark.parametrize("id_dtype", [torch.int64, torch.int32])
def test_a_gather_and_an_atomic_share_the_ids_tile(id_dtype):
    n = 500
    table, delta = torch.randn(2 * n), torch.randn(n)
    ids = torch.randperm(2 * n)[:n].to(id_dtype)
    seen = torch.empty(n)
    ref = table.clone()
    k = read_then_add[(triton.cdiv(n, 128),)](table, ids, delta, seen, n, BLOCK=128)
    torch.testing.assert_close(seen, ref[ids.long()], rtol=0, atol=0)
    torch.testing.assert_close(table, ref.index_add_(0, ids.long(), delta), rtol=0, atol=0)
    (atomic,) = _atomic_lines(k)
    assert f"{_offsets_operand(atomic)} = nmp.dma_load %ids" in k.asm["nmpir"], atomic


def test_out_of_range_bins_are_reported_and_nothing_outside_is_touched():
    storage = torch.zeros(40, dtype=torch.int32)
    hist = storage[:32]
    x = torch.tensor([1, 2, 32, 3], dtype=torch.int32)  # bin 32 starts at byte 128, hist has 128 bytes
    with pytest.raises(NMPOutOfBoundsError, match=r"tl\.atomic_add of argument 'hist' touches bytes \[128, 132\) "
                       r"but the tensor spans \[0, 128\) bytes, at .*test_element_atomic\.py:\d+"):
        histogram[(1,)](x, hist, 4, BLOCK=4)
    assert storage[32:].abs().sum() == 0 and storage[1:3].tolist() == [1, 1]  # earlier elements done, in order
    with pytest.raises(NMPOutOfBoundsError, match=r"touches bytes \[-4, 0\)"):
        histogram[(1,)](torch.tensor([0, -1], dtype=torch.int32), hist, 2, BLOCK=2)

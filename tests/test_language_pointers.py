"""Pointer- and mask-analysis robustness on nmp (against Triton's interpreter): offsets through
where/select, // and %, shifts, int64 offsets, negative strides, triangular and equality masks, masks
combined with & | ~, scalar masks, data-dependent indices, loop-carried pointers. Whatever the access
analysis cannot prove structured falls down the ladder to element gathers/scatters: the result is
right either way, never a crash."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from tests.test_language_harness import check_vs_interp


@triton.jit
def pointer_kernel(x_ptr, o_ptr, n, OP: tl.constexpr, M: tl.constexpr, N: tl.constexpr):
    pid = tl.program_id(0)
    rm = tl.arange(0, M)[:, None]
    rn = tl.arange(0, N)[None, :]
    dst = o_ptr + rm * N + rn
    if OP == "where_offsets":
        tl.store(dst, tl.load(x_ptr + tl.where(rn < 4, rm * N + rn, rm * N + N - 1 - rn)))
    elif OP == "where_pointers":
        tl.store(dst, tl.load(tl.where(rn % 2 == 0, x_ptr + rm * N + rn, x_ptr + rm * N + (rn + 1) % N)))
    elif OP == "div_mod":
        k = rm * N + rn
        tl.store(dst, tl.load(x_ptr + ((k // 3) * 2 + k % 3) % (M * N)))
    elif OP == "shift":
        tl.store(dst, tl.load(x_ptr + ((rm << 4) + (rn >> 1)) % (M * N)))
    elif OP == "triangular_load":
        tl.store(dst, tl.load(x_ptr + rm * N + rn, mask=rn <= rm, other=-1.0))
    elif OP == "triangular_store":
        tl.store(dst, tl.load(x_ptr + rm * N + rn), mask=rn > rm)
    elif OP == "mask_or":
        tl.store(dst, tl.load(x_ptr + rm * N + rn, mask=(rn < 3) | (rm > 5), other=7.0))
    elif OP == "mask_and":
        tl.store(dst, tl.load(x_ptr + rm * N + rn, mask=(rn < n) & (rm < 5) & (rn >= 2), other=7.0))
    elif OP == "mask_not":
        tl.store(dst, tl.load(x_ptr + rm * N + rn, mask=~(rn < 3), other=5.0))
    elif OP == "mask_eq":
        tl.store(dst, tl.load(x_ptr + rm * N + rn, mask=rn == rm, other=0.0))
    elif OP == "mask_ge_store_ne":
        tl.store(dst, tl.load(x_ptr + rm * N + rn, mask=rn >= 3, other=7.0), mask=rm != 2)
    elif OP == "negative_strides":
        tl.store(dst, tl.load(x_ptr + (M - 1 - rm) * N + (N - 1 - rn)))
    elif OP == "broadcast_row":
        tl.store(dst, tl.load(x_ptr + rn + rm * 0))
    elif OP == "product_offsets":
        tl.store(dst, tl.load(x_ptr + rm * rn))
    elif OP == "int64_offsets":
        off = rm.to(tl.int64) * N + rn
        tl.store(o_ptr + off, tl.load(x_ptr + off, mask=off < n, other=0.0), mask=off < n)
    elif OP == "loaded_indices":
        idx = (tl.abs(tl.load(x_ptr + rn)) * 50).to(tl.int32) % (M * N)
        tl.store(dst, tl.load(x_ptr + idx + rm * 0))
    elif OP == "scattered_store":
        tl.store(o_ptr + (rm * 5 + rn * 3) % (M * N), tl.load(x_ptr + rm * N + rn) * 0 + rm * N + rn)
    elif OP == "loop_pointer_increment":
        p = x_ptr + rm * N + rn
        acc = tl.zeros((M, N), tl.float32)
        for i in range(3):
            acc += tl.load(p, mask=rn < N - i, other=0.0)
            p += 1
        tl.store(dst, acc)
    elif OP == "loop_pointer_rebuilt":
        p = x_ptr + rm * N + rn
        acc = tl.zeros((M, N), tl.float32)
        for i in range(3):
            acc += tl.load(p)
            p = x_ptr + (rm * N + rn + i * 5) % (M * N)
        tl.store(dst, acc)
    elif OP == "loop_offsets_modulo":
        acc = tl.zeros((M, N), tl.float32)
        for i in range(n % 4 + 1):
            acc += tl.load(x_ptr + (rm * N + rn + i * N) % (M * N))
        tl.store(dst, acc)
    elif OP == "select_base":
        p = x_ptr if pid == 0 else x_ptr + 1
        tl.store(dst, tl.load(p + rm * N + rn, mask=rm * N + rn < M * N - 1, other=0.0))


OPS = ["where_offsets", "where_pointers", "div_mod", "shift", "triangular_load", "triangular_store", "mask_or",
       "mask_and", "mask_not", "mask_eq", "mask_ge_store_ne", "negative_strides", "broadcast_row",
       "product_offsets", "int64_offsets", "loaded_indices", "scattered_store", "loop_pointer_increment",
       "loop_pointer_rebuilt", "loop_offsets_modulo", "select_base"]


# A fused elementwise run reads a tile the scratchpad planner let a later op of the same run overwrite
# in place (core: scratchpad._elementwise_in_place with codegen fusion): wrong addresses, caught by the
# bounds check.


@pytest.mark.parametrize("op", [op for op in OPS])
def test_pointer_patterns_match_interpreter(op: str) -> None:
    M, N = 8, 16
    x = torch.randn(M * N, generator=torch.Generator().manual_seed(0))
    check_vs_interp(pointer_kernel, (1,), x, torch.zeros(M * N), N, OP=op, M=M, N=N, outputs=[1])


@pytest.mark.parametrize("n", [0, 5, 16, 100, 128])
@pytest.mark.parametrize("op", ["mask_and", "int64_offsets"])
def test_mask_bounds_match_interpreter(op: str, n: int) -> None:
    M, N = 8, 16
    x = torch.randn(M * N, generator=torch.Generator().manual_seed(1))
    check_vs_interp(pointer_kernel, (1,), x, torch.zeros(M * N), n, OP=op, M=M, N=N, outputs=[1])


@triton.jit
def scalar_mask_kernel(x_ptr, o_ptr, N: tl.constexpr):
    pid = tl.program_id(0)
    r = tl.arange(0, N)
    tl.store(o_ptr + pid * N + r, tl.load(x_ptr + r, mask=(r < N) & (pid < 1), other=3.0))


def test_scalar_mask_guard() -> None:
    # a scalar condition in a mask becomes a guard of the DMA (the interpreter cannot run this one)
    x = torch.arange(8, dtype=torch.float32)
    o = torch.zeros(16)
    scalar_mask_kernel[(2,)](x, o, N=8)
    assert o.tolist() == list(range(8)) + [3.0] * 8


@triton.jit
def pick_source_kernel(flag_ptr, a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    src = tl.where(tl.load(flag_ptr), a_ptr, b_ptr)  # a run-time choice between two arguments
    tl.store(out_ptr + offs, tl.load(src + offs, mask=m), mask=m)
    dst = tl.where(tl.load(flag_ptr), b_ptr, a_ptr)
    tl.store(dst + offs, tl.load(out_ptr + offs, mask=m) * 2, mask=m)
    tl.atomic_add(tl.where(tl.load(flag_ptr), a_ptr, b_ptr), 1.0)


@pytest.mark.parametrize("flag", [True, False])
def test_access_through_a_runtime_choice_of_argument(flag: bool) -> None:
    """`tl.where(flag, a_ptr, b_ptr)` with a scalar flag: each access becomes a branch over two ordinary
    (DMA) accesses of one argument each; loads, stores and atomics; vs torch."""
    a, b = torch.randn(1000), torch.randn(1000)
    src, dst = (a, b) if flag else (b, a)
    ref_src = src.clone()
    out = torch.empty(1000)
    k = pick_source_kernel[(4,)](torch.tensor([flag]), a, b, out, 1000, BLOCK=256)
    assert torch.equal(out, ref_src)
    assert torch.equal(dst, ref_src * 2)
    expected_first = ref_src[0] + 4  # four programs each add 1.0 to src[0]
    assert src[0].item() == pytest.approx(expected_first.item()) and torch.equal(src[1:], ref_src[1:])
    assert "nmp.gather" not in k.asm["nmpir"]

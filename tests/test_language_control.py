"""Control flow on nmp against Triton's interpreter: scf.while with tensors, early returns (Triton emits
a CFG of cf.cond_br/cf.br for them), nested and dynamic loops, tl.static_range, tl.range with its
scheduling hints, data-dependent branches."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from tests.test_language_harness import check_vs_interp


@triton.jit
def control_kernel(x_ptr, o_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    out = o_ptr + pid * BLOCK + offs
    if OP == "while_tensor":
        acc = x + pid
        i = 0
        while tl.max(acc) < 100.0:
            acc = acc * 2 + 1
            i += 1
        tl.store(out, acc + i, mask=m)
    elif OP == "while_scalar":
        i = pid
        s = 0.0
        while i < n:
            s += tl.load(x_ptr + i)
            i += 2
        tl.store(o_ptr + pid, s)
    elif OP == "early_return":
        if pid == 1:
            return
        tl.store(out, x + pid, mask=m)
    elif OP == "early_return_data":
        if tl.sum(x) + pid > 0:
            tl.store(out, x, mask=m)
            return
        tl.store(out, -x, mask=m)
    elif OP == "nested_early_returns":
        if pid > 0:
            if tl.load(x_ptr + pid) > 0:
                tl.store(out, x * 3, mask=m)
                return
            tl.store(out, x * 2, mask=m)
            if pid == 2:
                return
            tl.store(out + 1, x * 5, mask=offs < n - 1)
            return
        tl.store(out, x, mask=m)
    elif OP == "nested_loops":
        acc = tl.zeros((BLOCK,), tl.float32)
        for i in range(3):
            for j in range(i, 4):
                acc += x * (i + 1) + j
        tl.store(out, acc, mask=m)
    elif OP == "static_range":
        acc = tl.zeros((BLOCK,), tl.float32)
        for i in tl.static_range(4):
            acc += x * i
        tl.store(out, acc, mask=m)
    elif OP == "tl_range":
        acc = tl.zeros((BLOCK,), tl.float32)
        for i in tl.range(0, n, 3, num_stages=2, loop_unroll_factor=2):
            acc += tl.load(x_ptr + (offs + i) % n, mask=m)
        tl.store(out, acc, mask=m)
    elif OP == "if_tensor":
        if pid % 2 == 0:
            y = x * 2
        else:
            y = x - 1
        tl.store(out, y, mask=m)
    elif OP == "if_data":
        if tl.load(x_ptr + pid) > 0:
            y = x * 2
        else:
            y = x - 1
        tl.store(out, y, mask=m)
    elif OP == "loop_with_if":
        acc = x
        for _i in range(10):
            if tl.max(acc) < 1000.0:
                acc = acc * 3
        tl.store(out, acc, mask=m)
    elif OP == "dynamic_for":
        acc = tl.zeros((BLOCK,), tl.float32)
        for i in range(pid, n, 2):
            acc += tl.load(x_ptr + i)
        tl.store(out, acc, mask=m)
    elif OP == "while_no_carried":
        # nothing is loop-carried: TTIR prints `scf.while : () -> ()`
        while tl.load(o_ptr + 40 + pid) < n:
            tl.atomic_add(o_ptr + 40 + pid, 1.0)
    elif OP == "while_ptr":
        p = x_ptr
        s = 0.0
        k = 0
        while k < n:
            s += tl.load(p)
            p += 1
            k += 1
        tl.store(o_ptr + pid, s)


OPS = ["while_tensor", "while_scalar", "early_return", "early_return_data", "nested_early_returns", "nested_loops",
       "static_range", "tl_range", "if_tensor", "if_data", "loop_with_if", "dynamic_for", "while_no_carried"]


@pytest.mark.parametrize("op", OPS)
def test_control_flow_matches_interpreter(op: str) -> None:
    x = (torch.randn(16, generator=torch.Generator().manual_seed(0)) * 4).round()
    x[1], x[2] = 3.0, -2.0
    check_vs_interp(control_kernel, (3,), x, torch.zeros(3 * 16), 13, OP=op, BLOCK=16, outputs=[1])


def test_pointer_carried_through_while_loop() -> None:
    x = torch.arange(16, dtype=torch.float32)
    check_vs_interp(control_kernel, (3,), x, torch.zeros(3 * 16), 13, OP="while_ptr", BLOCK=16, outputs=[1])


@triton.jit
def assume_kernel(out_ptr, N: tl.constexpr, BLOCK_N: tl.constexpr):
    remaining = N - tl.program_id(0) * BLOCK_N
    tl.assume(remaining >= BLOCK_N)
    if remaining >= BLOCK_N:
        tl.store(out_ptr + tl.program_id(0), remaining)
    else:
        tl.store(out_ptr + tl.program_id(0), -1)


def test_assume_becomes_llvm_assume() -> None:
    """`tl.assume` reaches LLVM as `llvm.assume` (the optimiser may use it) and changes no result."""
    out = torch.zeros(8, dtype=torch.int32)
    compiled = assume_kernel[(8,)](out, N=1024, BLOCK_N=128)
    assert "llvm.assume" in compiled.asm["llir"]
    assert "nmp.assume" in compiled.asm["nmpir"]
    assert out.tolist() == [1024 - 128 * i for i in range(8)]


@triton.jit(noinline=True)
def _noinline_scaled(x, k):
    return tl.where(k > 1, x * k, x) + 1


@triton.jit(noinline=True)
def _noinline_store(z_ptr, v):
    tl.store(z_ptr, _noinline_scaled(v, 2))


@triton.jit
def noinline_caller_kernel(x_ptr, o_ptr, k):
    i = tl.program_id(0)
    v = _noinline_scaled(tl.load(x_ptr + i), k)
    tl.debug_barrier()
    _noinline_store(o_ptr + i, v)


def test_noinline_functions_are_inlined_and_barriers_accepted() -> None:
    """`@triton.jit(noinline=True)` callees (also nested) run: nmp inlines them, a program has no call
    stack of tiles; `tl.debug_barrier()` is a no-op on a PU that runs one program's ops in order."""
    x = torch.arange(8, dtype=torch.float32)
    out = torch.empty_like(x)
    k = noinline_caller_kernel[(8,)](x, out, 3)
    assert torch.equal(out, (x * 3 + 1) * 2 + 1)
    assert "tt.call" not in k.asm["ttir"]


@triton.jit
def split_to_scalars_kernel(x_ptr, a_ptr, b_ptr):
    a, b = tl.split(tl.load(x_ptr + tl.arange(0, 2)))
    tl.static_assert(a.shape == [])
    tl.store(a_ptr, a)
    tl.store(b_ptr, b)


def test_split_down_to_scalars() -> None:
    """`tl.split` of a 2-element tensor yields scalars through `tt.unsplat`."""
    x = torch.tensor([7, -3], dtype=torch.int64)
    a, b = torch.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64)
    split_to_scalars_kernel[(1,)](x, a, b)
    assert (a.item(), b.item()) == (7, -3)


@triton.jit
def _pick(x, k):
    if k == 0:
        return x + 1
    else:
        return x * k


@triton.jit
def early_return_callee_kernel(x_ptr, o_ptr, n):
    i = tl.program_id(0)
    v = tl.load(x_ptr + i)
    if i < n:  # called inside a branch: Triton's inliner leaves the multi-block callee as a call
        v = _pick(v, i % 3)
    for j in range(2):
        v = _pick(v, j)
    tl.store(o_ptr + i, v)


def test_callee_with_early_returns_inside_branches_and_loops() -> None:
    x = torch.arange(8, dtype=torch.int32)
    out = torch.empty_like(x)
    early_return_callee_kernel[(8,)](x, out, 5)

    def pick(v: int, k: int) -> int:
        return v + 1 if k == 0 else v * k

    ref = []
    for i, v in enumerate(x.tolist()):
        if i < 5:
            v = pick(v, i % 3)
        for j in range(2):
            v = pick(v, j)
        ref.append(v)
    assert out.tolist() == ref

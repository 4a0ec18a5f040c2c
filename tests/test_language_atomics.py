"""Atomics on nmp against Triton's interpreter: add/max/min/and/or/xor/xchg/cas, masked, scalar and tensor,
int and float, across programs (they run one after another on the simulator, so every atomic is
atomic); each returns the old values. Out-of-bounds atomics raise before touching memory."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from tests.test_language_harness import check_vs_interp, run_nmp
from triton_nmp.errors import NMPOutOfBoundsError


@triton.jit
def atomic_kernel(x_ptr, v_ptr, o_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr, SCALAR: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(v_ptr + pid * BLOCK + offs, mask=m)
    idx = (offs * 7 + pid) % 4
    if SCALAR:
        vs = tl.load(v_ptr + pid)
        p = x_ptr + pid % 4
        if OP == "add":
            old = tl.atomic_add(p, vs)
        elif OP == "max":
            old = tl.atomic_max(p, vs)
        elif OP == "min":
            old = tl.atomic_min(p, vs)
        elif OP == "xchg":
            old = tl.atomic_xchg(p, vs)
        elif OP == "cas":
            old = tl.atomic_cas(p, vs * 0 + 3, vs)
        elif OP == "and":
            old = tl.atomic_and(p, vs)
        elif OP == "or":
            old = tl.atomic_or(p, vs)
        else:
            old = tl.atomic_xor(p, vs)
        tl.store(o_ptr + pid, old)
    else:
        p = x_ptr + idx
        if OP == "add":
            old = tl.atomic_add(p, v, mask=m)
        elif OP == "max":
            old = tl.atomic_max(p, v, mask=m)
        elif OP == "min":
            old = tl.atomic_min(p, v, mask=m)
        elif OP == "xchg":
            old = tl.atomic_xchg(p, v, mask=m)
        elif OP == "cas":
            old = tl.atomic_cas(p, v * 0 + 3, v)
        elif OP == "and":
            old = tl.atomic_and(p, v, mask=m)
        elif OP == "or":
            old = tl.atomic_or(p, v, mask=m)
        else:
            old = tl.atomic_xor(p, v, mask=m)
        tl.store(o_ptr + pid * BLOCK + offs, old, mask=m)


INT_OPS = ["add", "max", "min", "xchg", "cas", "and", "or", "xor"]
FLOAT_OPS = ["add", "max", "min", "cas"]  # the interpreter has no float xchg
CASES = ([(op, torch.int32) for op in INT_OPS] + [(op, torch.int64) for op in ("add", "max", "cas", "xor")]
         + [(op, torch.float32) for op in FLOAT_OPS] + [("add", torch.float16), ("add", torch.float64)])


@pytest.mark.parametrize("scalar", [False, True], ids=["tensor", "scalar"])
@pytest.mark.parametrize("op,dt", CASES, ids=[f"{op}-{str(dt)[6:]}" for op, dt in CASES])
def test_atomics_match_interpreter(op: str, dt: torch.dtype, scalar: bool) -> None:
    B, grid = 16, 5
    g = torch.Generator().manual_seed(len(op))
    if dt.is_floating_point:
        v = (torch.randn(grid * B, generator=g) * 8).round().to(dt)  # exact sums in any order
    else:
        v = torch.randint(-40, 40, (grid * B,), generator=g).to(dt)
    v[::5] = 3  # some compare-and-swaps succeed
    x = torch.full((4,), 3, dtype=dt)
    check_vs_interp(atomic_kernel, (grid,), x, v, torch.zeros(grid * B, dtype=dt), 13, OP=op, BLOCK=B,
                    SCALAR=scalar, outputs=[0, 2])


@triton.jit
def atomic_2d_kernel(x_ptr, v_ptr, o_ptr, M: tl.constexpr, N: tl.constexpr):
    rm = tl.arange(0, M)[:, None]
    rn = tl.arange(0, N)[None, :]
    v = tl.load(v_ptr + rm * N + rn)
    tri = rn <= rm  # lower triangle only
    old = tl.atomic_add(x_ptr + (rm + rn) % 5, v, mask=tri)
    tl.store(o_ptr + rm * N + rn, tl.where(tri, old, -1.0))


def test_2d_masked_atomics_match_interpreter() -> None:
    v = torch.arange(64, dtype=torch.float32)
    check_vs_interp(atomic_2d_kernel, (3,), torch.zeros(5), v, torch.zeros(64), M=8, N=8, outputs=[0, 2])


@triton.jit
def atomic_oob_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.atomic_add(x_ptr + offs * 2, offs.to(tl.float32), mask=offs < n)


def test_out_of_bounds_atomic_raises_and_leaves_memory() -> None:
    x = torch.zeros(16)
    with pytest.raises(NMPOutOfBoundsError, match=r"tl.atomic_add of argument 'x_ptr'"):
        atomic_oob_kernel[(1,)](x, 16, BLOCK=16)
    # the elements before the failing one (element 8 -> x[16]) were updated in order; nothing outside
    assert x[::2].tolist() == list(map(float, range(8))) and x[1::2].abs().sum() == 0
    y = run_nmp(atomic_oob_kernel, (1,), torch.zeros(16), 8, BLOCK=16)[0]  # masked to the tensor: fine
    assert y[::2].tolist() == list(map(float, range(8)))


@triton.jit
def counter_kernel(c_ptr, o_ptr):
    # the classic "ticket" pattern: each program takes the next slot
    t = tl.atomic_add(c_ptr, 1)
    tl.store(o_ptr + t, tl.program_id(0))


def test_atomic_ticket_counter_orders_programs() -> None:
    c, o = torch.zeros(1, dtype=torch.int32), torch.full((10,), -1, dtype=torch.int32)
    counter_kernel[(10,)](c, o)
    assert c.item() == 10 and sorted(o.tolist()) == list(range(10))

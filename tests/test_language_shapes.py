"""Shape ops on nmp against Triton's interpreter: reshape, trans/permute, join/split, interleave, cat,
gather, histogram, sort/topk/flip (written in the language with reshapes and xor), broadcasts."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from tests.test_language_harness import check_vs_interp, run_nmp
from triton_nmp.errors import NMPDeviceAssertError


@triton.jit
def shape_kernel(x_ptr, o_ptr, OP: tl.constexpr, M: tl.constexpr, N: tl.constexpr):
    rm = tl.arange(0, M)[:, None]
    rn = tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + rm * N + rn)
    rows_t = tl.arange(0, N)[:, None] * M + tl.arange(0, M)[None, :]
    wide = tl.arange(0, M)[:, None] * (2 * N) + tl.arange(0, 2 * N)[None, :]
    if OP == "reshape":
        tl.store(o_ptr + rows_t, tl.reshape(x, (N, M)))
    elif OP == "reshape_reorder":
        tl.store(o_ptr + tl.arange(0, M * N), tl.reshape(x, (M * N,), can_reorder=True) * 2)
    elif OP == "ravel":
        tl.store(o_ptr + tl.arange(0, M * N), tl.ravel(x))
    elif OP == "trans":
        tl.store(o_ptr + rows_t, tl.trans(x) + 1)
    elif OP == "permute3":
        y = tl.permute(tl.reshape(x, (2, M // 2, N)), (2, 0, 1))
        tl.store(o_ptr + rows_t, tl.reshape(y, (N, M)))
    elif OP == "trans3":
        y = tl.trans(tl.reshape(x, (2, M // 2, N)), 1, 0, 2)
        tl.store(o_ptr + rm * N + rn, tl.reshape(y, (M, N)))
    elif OP == "join":
        tl.store(o_ptr + wide, tl.reshape(tl.join(x, x * 2), (M, 2 * N)))
    elif OP == "split":
        a, b = tl.split(tl.reshape(x, (M, N // 2, 2)))
        tl.store(o_ptr + tl.arange(0, M)[:, None] * (N // 2) + tl.arange(0, N // 2)[None, :], a - b * 3)
    elif OP == "interleave":
        tl.store(o_ptr + wide, tl.interleave(x, x + 100))
    elif OP == "flip":
        tl.store(o_ptr + rm * N + rn, tl.flip(x, 1))
    elif OP == "sort":
        tl.store(o_ptr + rm * N + rn, tl.sort(x, 1))
    elif OP == "sort_desc":
        tl.store(o_ptr + rm * N + rn, tl.sort(x, 1, descending=True))
    elif OP == "topk":
        tl.store(o_ptr + rm * 4 + tl.arange(0, 4)[None, :], tl.topk(x, 4, 1))
    elif OP == "gather":
        idx = tl.broadcast_to((N - 1 - rn + rm) % N, (M, N))
        tl.store(o_ptr + rm * N + rn, tl.gather(x, idx, 1))
    elif OP == "gather0":
        idx = tl.broadcast_to((rm * 3 + rn) % M, (M, N))
        tl.store(o_ptr + rm * N + rn, tl.gather(x, idx, 0))
    elif OP == "full":
        tl.store(o_ptr + rm * N + rn, tl.full((M, N), 3, x.dtype) + tl.zeros_like(x) + x)
    elif OP == "broadcast_scalar":
        tl.store(o_ptr + rm * N + rn, tl.broadcast_to(tl.load(x_ptr + 5), (M, N)))
    elif OP == "expand":
        tl.store(o_ptr + rm * N + rn, tl.max(x, 1)[:, None] - x + tl.min(x, 0)[None, :])


OPS = ["reshape", "reshape_reorder", "ravel", "trans", "permute3", "trans3", "join", "split", "interleave", "flip",
       "sort", "sort_desc", "topk", "gather", "gather0", "full", "broadcast_scalar", "expand"]


CASES = [(op, torch.float32) for op in OPS] + [(op, torch.int16) for op in ("join", "split", "trans3", "sort",
                                                                             "gather", "interleave")]


@pytest.mark.parametrize("op,dt", CASES, ids=[f"{op}-{str(dt)[6:]}" for op, dt in CASES])
def test_shape_op_matches_interpreter(op: str, dt: torch.dtype) -> None:
    M, N = 8, 16
    x = (torch.randn(M * N, generator=torch.Generator().manual_seed(0)) * 100).to(dt)
    check_vs_interp(shape_kernel, (1,), x, torch.zeros(2 * M * N, dtype=dt), OP=op, M=M, N=N, outputs=[1])


@triton.jit
def cat_kernel(x_ptr, y_ptr, o_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    tl.store(o_ptr + tl.arange(0, 2 * N), tl.cat(tl.load(x_ptr + r), tl.load(y_ptr + r) * 2, can_reorder=True))


def test_cat_matches_interpreter() -> None:
    x, y = torch.arange(16, dtype=torch.float32), torch.arange(16, dtype=torch.float32) + 100
    check_vs_interp(cat_kernel, (1,), x, y, torch.zeros(32), N=16, outputs=[2])


@triton.jit
def histogram_kernel(x_ptr, o_ptr, n, N: tl.constexpr, BINS: tl.constexpr, MASKED: tl.constexpr):
    r = tl.arange(0, N)
    x = tl.load(x_ptr + r, mask=r < n, other=0)
    if MASKED:
        h = tl.histogram(x, BINS, mask=r < n)
    else:
        h = tl.histogram(x, BINS)
    tl.store(o_ptr + tl.arange(0, BINS), h)


@pytest.mark.parametrize("masked", [False, True])
def test_histogram_matches_interpreter(masked: bool) -> None:
    # values outside [0, BINS) are dropped, like on GPUs
    x = torch.randint(-3, 20, (64,), generator=torch.Generator().manual_seed(1), dtype=torch.int32)
    check_vs_interp(histogram_kernel, (1,), x, torch.zeros(16, dtype=torch.int32), 50, N=64, BINS=16,
                    MASKED=masked, outputs=[1])


@triton.jit
def gather_oob_kernel(x_ptr, i_ptr, o_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    tl.store(o_ptr + r, tl.gather(tl.load(x_ptr + r), tl.load(i_ptr + r), 0))


def test_gather_index_out_of_range_raises() -> None:
    x = torch.arange(8, dtype=torch.float32)
    idx = torch.tensor([0, 1, 2, 3, 4, 5, 6, 8], dtype=torch.int32)
    with pytest.raises(NMPDeviceAssertError, match=r"tl.gather index out of range \[0, 8\)"):
        run_nmp(gather_oob_kernel, (1,), x, idx, torch.zeros(8), N=8)
    out = run_nmp(gather_oob_kernel, (1,), x, idx.flip(0) - 1 + (idx.flip(0) == 0) * 1, torch.zeros(8), N=8)[2]
    assert out.tolist() == [7.0, 5.0, 4.0, 3.0, 2.0, 1.0, 0.0, 0.0]

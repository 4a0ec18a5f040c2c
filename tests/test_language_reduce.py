"""Reductions and scans on nmp against Triton's interpreter: user combine functions, several operands,
argmin/argmax (ties give the smallest index), xor_sum, cumsum/cumprod/associative_scan forward and
reverse, along either axis."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from tests.test_language_harness import check_vs_interp


@triton.jit
def _add_mul(a0, a1, b0, b1):
    return a0 + b0, a1 * b1


@triton.jit
def _first_max(v0, i0, v1, i1):
    take0 = (v0 > v1) | ((v0 == v1) & (i0 < i1))
    return tl.where(take0, v0, v1), tl.where(take0, i0, i1)


@triton.jit
def _max_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _affine(a0, a1, b0, b1):
    # composition of x -> a0*x + a1 with x -> b0*x + b1 (associative, not commutative)
    return a0 * b0, a1 * b0 + b1


@triton.jit
def reduce_kernel(x_ptr, o_ptr, i_ptr, OP: tl.constexpr, M: tl.constexpr, N: tl.constexpr, AXIS: tl.constexpr):
    rm = tl.arange(0, M)[:, None]
    rn = tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + rm * N + rn)
    if AXIS == 1:
        ro = tl.arange(0, M)
    else:
        ro = tl.arange(0, N)
    if OP == "argmax":
        tl.store(i_ptr + ro, tl.argmax(x, AXIS))
    elif OP == "argmin":
        tl.store(i_ptr + ro, tl.argmin(x, AXIS))
    elif OP == "max_idx":
        v, i = tl.max(x, AXIS, return_indices=True)
        tl.store(o_ptr + ro, v)
        tl.store(i_ptr + ro, i)
    elif OP == "min_idx":
        v, i = tl.min(x, AXIS, return_indices=True, return_indices_tie_break_left=True)
        tl.store(o_ptr + ro, v)
        tl.store(i_ptr + ro, i)
    elif OP == "xor_sum":
        tl.store(i_ptr + ro, tl.xor_sum(x.to(tl.int32), AXIS))
    elif OP == "sum_int8":
        tl.store(i_ptr + ro, tl.sum(x.to(tl.int8), AXIS))
    elif OP == "max_min":
        tl.store(o_ptr + ro, tl.max(x, AXIS) - tl.min(x, AXIS))
    elif OP == "multi":
        a, b = tl.reduce((x, x * 0 + 1.5), AXIS, _add_mul)
        tl.store(o_ptr + ro, a + b)
    elif OP == "user_argmax":
        idx = tl.broadcast_to(rn, (M, N)) if AXIS == 1 else tl.broadcast_to(rm, (M, N))
        v, i = tl.reduce((x, idx), AXIS, _first_max)
        tl.store(o_ptr + ro, v)
        tl.store(i_ptr + ro, i)
    elif OP == "max_nan":
        tl.store(o_ptr + ro, tl.reduce(x, AXIS, _max_nan))
    elif OP == "sum_all":
        tl.store(o_ptr, tl.sum(x))
    elif OP == "cumsum":
        tl.store(o_ptr + rm * N + rn, tl.cumsum(x, AXIS))
    elif OP == "cumprod":
        tl.store(o_ptr + rm * N + rn, tl.cumprod(x * 0.125, AXIS))
    elif OP == "cumsum_rev":
        tl.store(o_ptr + rm * N + rn, tl.cumsum(x, AXIS, reverse=True))
    elif OP == "cumsum_int":
        tl.store(i_ptr + rm * N + rn, tl.cumsum(x.to(tl.int32), AXIS))
    elif OP == "scan_pair":
        a, b = tl.associative_scan((x, x * 0 + 1.25), AXIS, _add_mul)
        tl.store(o_ptr + rm * N + rn, a * b)
    elif OP == "scan_affine_rev":
        a, b = tl.associative_scan((x * 0.25 + 0.5, x), AXIS, _affine, reverse=True)
        tl.store(o_ptr + rm * N + rn, a + b)
    elif OP == "scan_max_rev":
        tl.store(o_ptr + rm * N + rn, tl.associative_scan(x, AXIS, _max_nan, reverse=True))


EXACT = ["argmax", "argmin", "max_idx", "min_idx", "xor_sum", "sum_int8", "max_min", "user_argmax", "max_nan",
         "cumsum_int", "scan_max_rev", "scan_affine_rev"]
FLOAT = ["multi", "sum_all", "cumsum", "cumprod", "cumsum_rev", "scan_pair"]


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("op", EXACT + FLOAT)
def test_reduce_and_scan_match_interpreter(op: str, axis: int) -> None:
    M, N = 8, 16
    g = torch.Generator().manual_seed(axis)
    # small integers in floats: many ties (argmin/argmax must pick the smallest index) and exact
    # sums; `+ 0.0` keeps zeros positive (max of -0.0 and 0.0 is unspecified)
    x = (torch.randn(M * N, generator=g) * 3).round() + 0.0
    if op == "max_nan":
        x[5] = float("nan")
    tol = 1e-5 if op in FLOAT else 0.0
    check_vs_interp(reduce_kernel, (1,), x, torch.zeros(M * N), torch.zeros(M * N, dtype=torch.int32), OP=op,
                    M=M, N=N, AXIS=axis, atol=tol, rtol=tol, outputs=[1, 2])


@triton.jit
def reduce_3d_kernel(x_ptr, o_ptr, AXIS: tl.constexpr, A: tl.constexpr, B: tl.constexpr, C: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, A * B * C))
    x3 = tl.reshape(x, (A, B, C))
    s = tl.cumsum(x3, AXIS)
    m = tl.argmax(x3, AXIS)
    tl.store(o_ptr + tl.arange(0, A * B * C), tl.reshape(s, (A * B * C,)))
    if AXIS == 0:
        tl.store(o_ptr + A * B * C + tl.arange(0, B * C), tl.reshape(m, (B * C,)).to(tl.float32))
    elif AXIS == 1:
        tl.store(o_ptr + A * B * C + tl.arange(0, A * C), tl.reshape(m, (A * C,)).to(tl.float32))
    else:
        tl.store(o_ptr + A * B * C + tl.arange(0, A * B), tl.reshape(m, (A * B,)).to(tl.float32))


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_3d_scan_and_argmax_match_interpreter(axis: int) -> None:
    x = (torch.randn(64, generator=torch.Generator().manual_seed(5)) * 4).round() + 0.0
    check_vs_interp(reduce_3d_kernel, (1,), x, torch.zeros(64 + 32), AXIS=axis, A=2, B=4, C=8, outputs=[1])


@triton.jit
def scan_1d_kernel(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + r, mask=r < n, other=0)
    tl.store(o_ptr + r, tl.cumsum(x, 0), mask=r < n)
    tl.store(o_ptr + BLOCK + r, tl.cumprod(x, 0, reverse=True), mask=r < n)


@pytest.mark.parametrize("dt", [torch.int32, torch.int64, torch.float64])
def test_1d_scans_match_interpreter(dt: torch.dtype) -> None:
    x = torch.randint(-3, 4, (50,), generator=torch.Generator().manual_seed(6)).to(dt)
    check_vs_interp(scan_1d_kernel, (1,), x, torch.zeros(128, dtype=dt), 50, BLOCK=64, outputs=[1])



@triton.jit
def _narrow_sum_kernel(x_ptr, s_ptr, c_ptr, p_ptr, t_ptr, M: tl.constexpr, N: tl.constexpr):
    r = tl.program_id(0) * M + tl.arange(0, M)
    x = tl.load(x_ptr + r[:, None] * N + tl.arange(0, N)[None, :])
    tl.store(s_ptr + r, tl.sum(x, 1))
    tl.store(c_ptr + r[:, None] * N + tl.arange(0, N)[None, :], tl.cumsum(x, 1))
    tl.store(p_ptr + r[:, None] * N + tl.arange(0, N)[None, :], tl.cumprod(1.0 + x * 0.01, 1).to(x.dtype))
    tl.store(t_ptr + tl.program_id(0), tl.sum(tl.sum(x, 1), 0))  # a scalar result rounds once too


@pytest.mark.parametrize("dt", [torch.float16, torch.bfloat16])
def test_narrow_float_sums_and_scans_round_once(dt: torch.dtype) -> None:
    """fp16/bf16 tl.sum/cumsum/cumprod accumulate in fp32 and round each result once, as torch does
    (and the interpreter's numpy row sum): 200 rows of 256 terms are then correctly rounded (the
    fp32 partial sums carry 13 bits more than fp16 needs), where fp16 partial sums left 80 rows off
    by up to 1.4 ulp. Scans: prefix k is the fp32 running value rounded once, as torch.cumsum/cumprod
    give for fp16/bf16 tensors (its fp32 value may differ in the last bit by summation order)."""
    m, n, rows = 200, 256, 8
    x = torch.randn(m, n, generator=torch.Generator().manual_seed(16)).to(dt)
    s, t = torch.empty(m, dtype=dt), torch.empty(m // rows, dtype=dt)
    cs, cp = torch.empty_like(x), torch.empty_like(x)
    _narrow_sum_kernel[(m // rows,)](x, s, cs, cp, t, M=rows, N=n)
    exact = x.double().sum(1).to(dt)
    assert torch.equal(s, exact), f"{int((s != exact).sum())} of {m} rows not correctly rounded"
    assert torch.equal(t, s.double().view(m // rows, rows).sum(1).to(dt))  # the sum of the rounded row sums
    assert (cs != x.float().cumsum(1).to(dt)).float().mean().item() < 1e-3
    assert (cs != x.cumsum(1)).float().mean().item() < 1e-3
    c = torch.tensor(0.01).to(dt).float()  # the kernel's factor, rounded after each op as the kernel does
    factor = ((x.float() * c).to(dt).float() + 1.0).to(dt)
    assert (cp != factor.float().cumprod(1).to(dt)).float().mean().item() < 1e-3


@triton.jit
def _scan2d_kernel(X, Z, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, AXIS: tl.constexpr, PROD: tl.constexpr,
                   REVERSE: tl.constexpr):
    offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    x = tl.load(X + offs)
    if PROD:
        z = tl.cumprod(x, axis=AXIS, reverse=REVERSE)
    else:
        z = tl.cumsum(x, axis=AXIS, reverse=REVERSE)
    tl.store(Z + offs, z)


@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
@pytest.mark.parametrize("shape, axis", [((2, 1024), 1), ((1024, 2), 0), ((32, 32), 0), ((8, 32), 1)])
def test_bf16_scan2d_conformance_cases(op: str, shape: tuple[int, int], axis: int) -> None:
    """Triton's test_core.py::test_scan2d for bf16, as it runs them: bf16-exact normal(0, 1) inputs
    (`numpy_random(..., "bfloat16")`, seed 17), numpy's fp32 scan as the reference, the bf16 result
    stored to an fp32 tensor, rtol 0.01 (cumprod: atol 1e-3). With bf16 partial sums 46 of these cases
    failed (cancelling long sums); accumulating in fp32 and rounding once they pass."""
    from numpy.random import RandomState
    from triton._internal_testing import numpy_random

    np_op = {"cumsum": np.cumsum, "cumprod": np.cumprod}[op]
    for reverse in (False, True):
        x = numpy_random(shape, dtype_str="bfloat16", rs=RandomState(17))
        x_in = np.flip(x, axis) if reverse else x
        z_ref = np_op(x_in, axis=axis).astype(np.float32)
        z_ref = np.flip(z_ref, axis) if reverse else z_ref
        z = torch.empty(shape, dtype=torch.float32)
        _scan2d_kernel[(1,)](torch.tensor(x).bfloat16(), z, BLOCK_M=shape[0], BLOCK_N=shape[1], AXIS=axis,
                             PROD=op == "cumprod", REVERSE=reverse)
        np.testing.assert_allclose(z_ref, z.numpy(), rtol=0.01, atol=1e-3 if op == "cumprod" else 0)

"""fp8 on nmp: Triton's float8e5 / float8e4nv / float8e4b15 stored as bytes, computed in fp32.

Decoding is checked exhaustively (all 256 codes) against torch's float8 types, encoding against torch's
round-to-nearest-even on values in range, and the GPU `satfinite` rule on values out of range.
float8e4b15 (Triton's own format, bias 15, no inf/NaN) has no torch twin: a Python reference of the
format is the oracle.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import triton
import triton.language as tl


@triton.jit
def to_f32_kernel(X, Y, N: tl.constexpr):
    tl.store(Y + tl.arange(0, N), tl.load(X + tl.arange(0, N)).to(tl.float32))


@triton.jit
def cast_kernel(X, Y, N: tl.constexpr):
    tl.store(Y + tl.arange(0, N), tl.load(X + tl.arange(0, N)).to(Y.dtype.element_ty))


@triton.jit
def copy_kernel(X, Y, N: tl.constexpr):
    tl.store(Y + tl.arange(0, N), tl.load(X + tl.arange(0, N)))


@triton.jit
def e4b15_roundtrip_kernel(X, Y, N: tl.constexpr):
    tl.store(Y + tl.arange(0, N), tl.load(X + tl.arange(0, N)).to(tl.float8e4b15).to(tl.float32))


@triton.jit
def fp8_dot_kernel(A, B, C, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    a = tl.load(A + tl.arange(0, M)[:, None] * K + tl.arange(0, K)[None, :])
    b = tl.load(B + tl.arange(0, K)[:, None] * N + tl.arange(0, N)[None, :])
    tl.store(C + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :], tl.dot(a, b))


TORCH_FP8 = [torch.float8_e5m2, torch.float8_e4m3fn]
CODES = torch.arange(256, dtype=torch.int32).to(torch.uint8)


@pytest.mark.parametrize("dtype", TORCH_FP8, ids=str)
def test_decode_every_code(dtype: torch.dtype) -> None:
    y = torch.empty(256)
    to_f32_kernel[(1,)](CODES.view(dtype), y, N=256)
    ref = CODES.view(dtype).float()
    assert torch.equal(y.isnan(), ref.isnan())
    assert torch.equal(y[~ref.isnan()], ref[~ref.isnan()])


@pytest.mark.parametrize("dtype", TORCH_FP8, ids=str)
def test_copy_keeps_every_byte(dtype: torch.dtype) -> None:
    """A load and a store move the byte unchanged, NaN payloads included."""
    out = torch.empty(256, dtype=dtype)
    copy_kernel[(1,)](CODES.view(dtype), out, N=256)
    assert torch.equal(out.view(torch.uint8), CODES)


@pytest.mark.parametrize("dtype", TORCH_FP8, ids=str)
def test_encode_rounds_to_nearest_even(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1 << 15, generator=g) * torch.exp2(torch.randint(-20, 12, (1 << 15,), generator=g).float())
    x = x[x.abs() <= torch.finfo(dtype).max][:4096]
    assert x.numel() == 4096
    out = torch.empty(4096, dtype=dtype)
    cast_kernel[(1,)](x, out, N=4096)
    assert torch.equal(out.view(torch.uint8), x.to(dtype).view(torch.uint8))


@pytest.mark.parametrize("dtype", TORCH_FP8, ids=str)
def test_encode_saturates_like_gpus(dtype: torch.dtype) -> None:
    """Out of range (infinities too) -> +-max finite (`cvt.rn.satfinite`); NaN stays NaN."""
    x = torch.zeros(16)
    x[:5] = torch.tensor([1e9, -1e9, float("inf"), float("-inf"), float("nan")])
    out = torch.empty(16, dtype=dtype)
    cast_kernel[(1,)](x, out, N=16)
    big = torch.finfo(dtype).max
    assert out[:4].float().tolist() == [big, -big, big, -big]
    assert out[4].float().isnan()


def _e4b15(code: int) -> float:
    sign = -1.0 if code & 0x80 else 1.0
    e, m = (code >> 3) & 15, code & 7
    return sign * (m * 2.0**-17 if e == 0 else (8 + m) * 2.0 ** (e - 18))


def test_e4b15_decode_every_code() -> None:
    y = torch.empty(256)
    to_f32_kernel[(1,)](triton.reinterpret(CODES, tl.float8e4b15), y, N=256)
    assert y.tolist() == [_e4b15(c) for c in range(256)]


def test_e4b15_encode_rounds_to_nearest_even_and_saturates() -> None:
    grid = np.array([_e4b15(c) for c in range(128)])

    def rne(v: float) -> float:
        if v != v:
            return 1.875  # no NaN in the format: saturates like an overflow
        a = min(abs(v), 1.875)
        i = int(np.searchsorted(grid, a))
        best = min((j for j in (i - 1, i) if 0 <= j < 128), key=lambda j: (abs(grid[j] - a), j & 1))
        return float(np.copysign(grid[best], v))

    g = torch.Generator().manual_seed(1)
    x = torch.randn(2048, generator=g) * torch.exp2(torch.randint(-18, 2, (2048,), generator=g).float())
    x[:3] = torch.tensor([5.0, -7.0, float("nan")])
    x[3:6] = torch.tensor([1.0 + 1 / 16, 1.0 + 3 / 16, 2.0**-17 * 0.5])  # ties: to even
    out = torch.empty(2048)
    e4b15_roundtrip_kernel[(1,)](x, out, N=2048)
    assert out.tolist() == [rne(v) for v in x.tolist()]


@pytest.mark.parametrize("dtype", TORCH_FP8, ids=str)
def test_fp8_dot_accumulates_in_fp32(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(2)
    a = torch.randn(16, 32, generator=g).to(dtype)
    b = torch.randn(32, 16, generator=g).to(dtype)
    c = torch.empty(16, 16)
    fp8_dot_kernel[(1,)](a, b, c, M=16, N=16, K=32)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-5, atol=1e-5)


@triton.jit
def e4b15_rtz_kernel(X, Y, N: tl.constexpr):
    x = tl.load(X + tl.arange(0, N))
    tl.store(Y + tl.arange(0, N), x.to(tl.float8e4b15, fp_downcast_rounding="rtz").to(tl.float32))


def test_e4b15_other_rounding_modes_are_refused_clearly() -> None:
    with pytest.raises(triton.CompilationError) as info:
        e4b15_rtz_kernel[(1,)](torch.zeros(16), torch.zeros(16), N=16)
    assert "round to nearest even on nmp" in str(info.value.__cause__)

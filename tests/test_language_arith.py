"""Arithmetic, comparisons, casts, math and libdevice on nmp, against Triton's interpreter or torch.

Every kernel runs on nmp and, in a subprocess, under `TRITON_INTERPRET=1` (see
`test_language_harness`); integer results must be bit-identical, float results too unless a libm
difference allows a tolerance. Where the interpreter is not a reference (it wraps out-of-range
float->int casts through numpy, truncates fp32->bf16 and has no libdevice) the test says so and
checks against torch or the documented semantics instead.
"""

from __future__ import annotations

import math

import pytest
import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import libdevice

from tests.test_language_harness import assert_same, check_vs_interp, run_nmp
from triton_nmp.errors import NMPCompilationError

N = 37


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def make(dt: torch.dtype, seed: int = 0, n: int = N, scale: float = 50.0, nonzero: bool = False) -> torch.Tensor:
    g = _gen(seed)
    if dt == torch.bool:
        return torch.rand(n, generator=g) > 0.5
    if dt.is_floating_point:
        x = (torch.randn(n, generator=g) * scale).to(dt)
    else:
        info = torch.iinfo(dt)
        lo, hi = max(info.min, -(2**40)), min(info.max, 2**40)
        x = torch.randint(lo, hi, (n,), generator=g, dtype=torch.int64).to(dt)
    if nonzero:
        x = torch.where(x == 0, torch.ones_like(x), x)
    return x


# ----------------------------------------------------------------------------------------------
# Binary operators with Triton's promotion rules


@triton.jit
def binary_kernel(x_ptr, y_ptr, add_ptr, sub_ptr, mul_ptr, div_ptr, mod_ptr, fdiv_ptr, cmp_ptr, max_ptr, bit_ptr, n,
                  INT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(add_ptr + offs, x + y, mask=m)
    tl.store(sub_ptr + offs, x - y, mask=m)
    tl.store(mul_ptr + offs, x * y, mask=m)
    tl.store(div_ptr + offs, x / y, mask=m)
    tl.store(mod_ptr + offs, x % y, mask=m)
    tl.store(cmp_ptr + offs, (x < y) ^ (x == y) ^ (x >= y * 2), mask=m)
    tl.store(max_ptr + offs, tl.maximum(x, y) + tl.minimum(x, y) * 3, mask=m)
    if INT:
        tl.store(fdiv_ptr + offs, x // y, mask=m)
        tl.store(bit_ptr + offs, (x & y) ^ (x | 3) ^ (y >> 2) ^ (x << 1), mask=m)


def _promoted(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    """Triton's result type for an arithmetic op (computed once by the interpreter, here hard-coded)."""
    if a.is_floating_point or b.is_floating_point:
        if a == torch.float64 or b == torch.float64:
            return torch.float64
        fa = a if a.is_floating_point else None
        fb = b if b.is_floating_point else None
        if fa and fb and fa != fb:
            return torch.float32
        return fa or fb
    return torch.promote_types(a, b)


PAIRS = [
    (torch.int8, torch.int8), (torch.int8, torch.int32), (torch.int16, torch.int64), (torch.int32, torch.int32),
    (torch.int64, torch.int64), (torch.uint8, torch.uint8), (torch.uint8, torch.float32),
    (torch.int32, torch.float32), (torch.float16, torch.float16), (torch.float16, torch.float32),
    (torch.float32, torch.float32), (torch.float32, torch.float64), (torch.int64, torch.float16),
    (torch.float64, torch.float64),
]


@pytest.mark.parametrize("a,b", PAIRS, ids=[f"{str(a)[6:]}-{str(b)[6:]}" for a, b in PAIRS])
def test_binary_ops_match_interpreter(a: torch.dtype, b: torch.dtype) -> None:
    x, y = make(a, 1), make(b, 2, nonzero=True)
    is_int = not (a.is_floating_point or b.is_floating_point)
    rt = _promoted(a, b)
    div_t = torch.float32 if is_int else rt
    outs = [torch.zeros(N, dtype=t) for t in (rt, rt, rt, div_t, rt, rt, torch.bool, rt, rt)]
    check_vs_interp(binary_kernel, (1,), x, y, *outs, N, INT=is_int, BLOCK=64, atol=0, rtol=0,
                    outputs=list(range(2, 11)))


@triton.jit
def unsigned_kernel(x_ptr, y_ptr, o_ptr, n, UT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m).to(UT, bitcast=True)
    y = tl.load(y_ptr + offs, mask=m).to(UT, bitcast=True)
    et = x_ptr.dtype.element_ty
    tl.store(o_ptr + offs, (x // y).to(et, bitcast=True), mask=m)
    tl.store(o_ptr + n + offs, (x % y).to(et, bitcast=True), mask=m)
    tl.store(o_ptr + 2 * n + offs, (x < y).to(et), mask=m)
    tl.store(o_ptr + 3 * n + offs, (x >> (y & 7)).to(et, bitcast=True), mask=m)
    tl.store(o_ptr + 4 * n + offs, tl.maximum(x, y).to(et, bitcast=True), mask=m)
    tl.store(o_ptr + 5 * n + offs, x.to(tl.float32).to(UT).to(et, bitcast=True), mask=m)
    tl.store(o_ptr + 6 * n + offs, tl.cdiv(x, y).to(et, bitcast=True), mask=m)
    if UT == tl.uint32 or UT == tl.uint64:
        tl.store(o_ptr + 7 * n + offs, tl.umulhi(x, y).to(et, bitcast=True), mask=m)


@pytest.mark.parametrize("dt,ut", [(torch.int8, tl.uint8), (torch.int16, tl.uint16), (torch.int32, tl.uint32),
                                   (torch.int64, tl.uint64)], ids=["u8", "u16", "u32", "u64"])
def test_unsigned_ops_match_interpreter(dt, ut) -> None:
    info = torch.iinfo(dt)
    x = torch.randint(info.min, info.max, (N,), generator=_gen(3), dtype=dt)
    y = torch.randint(info.min, info.max, (N,), generator=_gen(4), dtype=dt)
    y[y == 0] = 1
    check_vs_interp(unsigned_kernel, (1,), x, y, torch.zeros(8 * N, dtype=dt), N, UT=ut, BLOCK=64, outputs=[2])


def test_umulhi_against_python() -> None:
    x = torch.randint(-(2**31), 2**31 - 1, (N,), generator=_gen(5), dtype=torch.int64).to(torch.int32)
    y = torch.randint(-(2**31), 2**31 - 1, (N,), generator=_gen(6), dtype=torch.int64).to(torch.int32)
    out = run_nmp(unsigned_kernel, (1,), x, y, torch.zeros(8 * N, dtype=torch.int32), N, UT=tl.uint32,
                     BLOCK=64)[2]
    ux, uy = (x.long() & 0xFFFFFFFF), (y.long() & 0xFFFFFFFF)
    expect = ((ux * uy) >> 32).to(torch.int64)
    expect = torch.where(expect >= 2**31, expect - 2**32, expect).to(torch.int32)
    assert torch.equal(out[7 * N:], expect)


@triton.jit
def scalar_kernel(o_ptr, a, b):
    tl.store(o_ptr, a + b)
    tl.store(o_ptr + 1, a * b)
    tl.store(o_ptr + 2, a / b)
    tl.store(o_ptr + 3, a % b)
    tl.store(o_ptr + 4, tl.maximum(a, b))
    tl.store(o_ptr + 5, a - 3.5)
    tl.store(o_ptr + 6, a * 2 - b)


# Float scalars stay Python floats in the interpreter (Python's `%` differs from fmod for negative
# operands, and they compute in double precision), so float cases use exact positive operands.
@pytest.mark.parametrize("a,b", [(3, 4), (-7, 2), (7, -2), (2**35, 3), (-(2**35), 7), (3.5, 2), (3.75, 0.5)])
def test_scalar_arguments_match_interpreter(a, b) -> None:
    check_vs_interp(scalar_kernel, (1,), torch.zeros(7, dtype=torch.float64), a, b)


# ----------------------------------------------------------------------------------------------
# Casts


@triton.jit
def cast_kernel(x_ptr, o_ptr, n, DT: tl.constexpr, BITCAST: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(o_ptr + offs, x.to(DT, bitcast=BITCAST), mask=m)


TL = {torch.bool: tl.int1, torch.int8: tl.int8, torch.int16: tl.int16, torch.int32: tl.int32,
      torch.int64: tl.int64, torch.uint8: tl.uint8, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16,
      torch.float32: tl.float32, torch.float64: tl.float64}
CAST_DTYPES = [torch.bool, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.float16,
               torch.float32, torch.float64]


def _in_range_floats(dt: torch.dtype, dst: torch.dtype) -> torch.Tensor:
    """Floats a float->int cast keeps in range (the interpreter wraps out-of-range values through numpy)."""
    x = make(dt, 7, scale=40.0)
    if not dst.is_floating_point and dst != torch.bool:
        info = torch.iinfo(dst)
        x = x.double().clamp(max(info.min, -1e18), min(info.max, 1e18)).to(dt)
        if dst == torch.uint8:
            x = x.abs()
    x[:4] = torch.tensor([0.5, -0.5, 2.5, -0.0], dtype=dt)
    return x


@pytest.mark.parametrize("src", CAST_DTYPES, ids=[str(d)[6:] for d in CAST_DTYPES])
def test_casts_match_interpreter(src: torch.dtype) -> None:
    for dst in CAST_DTYPES:
        x = _in_range_floats(src, dst) if src.is_floating_point else make(src, 8)
        check_vs_interp(cast_kernel, (1,), x, torch.zeros(N, dtype=dst), N, DT=TL[dst], BITCAST=False, BLOCK=64,
                        outputs=[1])


def test_float_to_int_casts_saturate() -> None:
    # Triton's fptosi/fptoui lower to saturating conversions on GPUs (PTX cvt.rzi); nmp does the same:
    # out-of-range values clamp to the type's range, NaN becomes 0.
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 1e10, -1e10, 300.0, -300.0, 2.9, -2.9])
    n = x.numel()
    for dst, lo, hi in [(torch.int8, -128, 127), (torch.int32, -(2**31), 2**31 - 1), (torch.uint8, 0, 255),
                        (torch.int64, -(2**63), 2**63 - 1)]:
        out = run_nmp(cast_kernel, (1,), x, torch.zeros(n, dtype=dst), n, DT=TL[dst], BITCAST=False, BLOCK=16)[1]
        expect = [0, hi, lo, min(hi, 10**10), max(lo, -(10**10)), min(hi, 300), max(lo, -300), 2, max(lo, -2)]
        assert out.tolist() == expect, (dst, out.tolist())


def test_bf16_casts_round_to_nearest_even() -> None:
    # The interpreter truncates fp32 -> bf16; Triton on GPUs (and torch) round to nearest even.
    x = make(torch.float32, 9, n=64, scale=3.0)
    x[:3] = torch.tensor([float("nan"), float("inf"), 1.0 + 2**-8])
    out = run_nmp(cast_kernel, (1,), x, torch.zeros(64, dtype=torch.bfloat16), 64, DT=tl.bfloat16,
                     BITCAST=False, BLOCK=64)[1]
    assert_same(out, x.to(torch.bfloat16), what="fp32->bf16")
    back = run_nmp(cast_kernel, (1,), out, torch.zeros(64), 64, DT=tl.float32, BITCAST=False, BLOCK=64)[1]
    assert_same(back, out.float(), what="bf16->fp32")


@triton.jit
def bf16_arith_kernel(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(o_ptr + offs, x * y + x, mask=m)
    tl.store(o_ptr + n + offs, x / y, mask=m)
    tl.store(o_ptr + 2 * n + offs, tl.maximum(x, y), mask=m)


def test_bf16_arithmetic_matches_torch() -> None:
    # Each bf16 op rounds to bf16 (the interpreter computes bf16 on raw uint16 bits and is no reference).
    x, y = make(torch.bfloat16, 10, scale=4.0), make(torch.bfloat16, 11, scale=4.0, nonzero=True)
    out = run_nmp(bf16_arith_kernel, (1,), x, y, torch.zeros(3 * N, dtype=torch.bfloat16), N, BLOCK=64)[2]
    assert_same(out[:N], x * y + x, what="x*y+x")
    assert_same(out[N:2 * N], x / y, what="x/y")
    assert_same(out[2 * N:], torch.maximum(x, y), what="max")


@triton.jit
def narrow_const_kernel(x_ptr, o_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(o_ptr + offs, x - 0.1)
    tl.store(o_ptr + BLOCK + offs, x * 0.3)


@pytest.mark.parametrize("dt", [torch.float16, torch.bfloat16])
def test_narrow_float_constants_are_the_types_values(dt: torch.dtype) -> None:
    """`x - 0.1` on an fp16/bf16 tensor subtracts 0.1 as the narrow type holds it (Triton converts the
    scalar to the tensor's type first); TTIR prints it as a short decimal (bf16 `1.000980e-01`), and
    computing with that decimal rounded ties the other way: bf16 -0.125 - 0.1 gave -0.2256 instead of
    -0.2246 (found by scripts/fuzz.py, seed 346). Every value on a 1/64 grid in [-4, 4)."""
    x = (torch.arange(-256, 256) / 64).to(dt)
    out = run_nmp(narrow_const_kernel, (1,), x, torch.zeros(2 * 512, dtype=dt), BLOCK=512)[1]
    c1, c3 = torch.tensor(0.1).to(dt).float(), torch.tensor(0.3).to(dt).float()
    assert_same(out[:512], (x.float() - c1).to(dt), what="x - 0.1")
    assert_same(out[512:], (x.float() * c3).to(dt), what="x * 0.3")


@pytest.mark.parametrize("src,dst", [(torch.float32, torch.int32), (torch.int32, torch.float32),
                                     (torch.float16, torch.int16), (torch.int64, torch.float64),
                                     (torch.uint8, torch.int8), (torch.float64, torch.int64),
                                     (torch.bfloat16, torch.int16)])
def test_bitcasts(src: torch.dtype, dst: torch.dtype) -> None:
    x = make(src, 12)
    out = run_nmp(cast_kernel, (1,), x, torch.zeros(N, dtype=dst), N, DT=TL[dst], BITCAST=True, BLOCK=64)[1]
    assert torch.equal(out.view(src), x)


def test_bitcast_between_widths_is_a_compile_error() -> None:
    x = make(torch.float32, 13)
    with pytest.raises(Exception, match="[Bb]itcast"):
        run_nmp(cast_kernel, (1,), x, torch.zeros(N, dtype=torch.int16), N, DT=tl.int16, BITCAST=True, BLOCK=64)


@triton.jit
def bool_kernel(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(o_ptr + offs, (x & ~y) | (x ^ y), mask=m)


def test_bool_tensors_load_and_store() -> None:
    # Triton reads and writes `bool` through `*i8` pointer bitcasts; the access stays a DMA.
    x, y = make(torch.bool, 14), make(torch.bool, 15)
    check_vs_interp(bool_kernel, (1,), x, y, torch.zeros(N, dtype=torch.bool), N, BLOCK=64, outputs=[2])


# ----------------------------------------------------------------------------------------------
# math


@triton.jit
def math_kernel(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    ax = tl.abs(x) + 0.25
    tl.store(o_ptr + 0 * n + offs, tl.exp(x), mask=m)
    tl.store(o_ptr + 1 * n + offs, tl.exp2(x), mask=m)
    tl.store(o_ptr + 2 * n + offs, tl.log(ax), mask=m)
    tl.store(o_ptr + 3 * n + offs, tl.log2(ax), mask=m)
    tl.store(o_ptr + 4 * n + offs, tl.sqrt(ax), mask=m)
    if x.dtype == tl.float32:
        tl.store(o_ptr + 5 * n + offs, tl.sqrt_rn(ax), mask=m)
        tl.store(o_ptr + 13 * n + offs, tl.div_rn(x, ax), mask=m)
    tl.store(o_ptr + 6 * n + offs, tl.rsqrt(ax), mask=m)
    tl.store(o_ptr + 7 * n + offs, tl.sin(x), mask=m)
    tl.store(o_ptr + 8 * n + offs, tl.cos(x), mask=m)
    tl.store(o_ptr + 9 * n + offs, tl.floor(x) + tl.ceil(x) * 3, mask=m)
    tl.store(o_ptr + 10 * n + offs, tl.erf(x), mask=m)
    tl.store(o_ptr + 11 * n + offs, tl.sigmoid(x), mask=m)
    tl.store(o_ptr + 12 * n + offs, tl.fma(x, ax, x), mask=m)
    tl.store(o_ptr + 14 * n + offs, tl.clamp(x, -0.5, 0.75), mask=m)
    tl.store(o_ptr + 15 * n + offs, -x, mask=m)
    tl.store(o_ptr + 16 * n + offs, tl.softmax(x), mask=m)
    tl.store(o_ptr + 17 * n + offs, tl.maximum(x, ax * 0.5, propagate_nan=tl.PropagateNan.ALL), mask=m)


@pytest.mark.parametrize("dt", [torch.float32, torch.float64])
def test_math_functions_match_interpreter(dt: torch.dtype) -> None:
    x = make(dt, 16, scale=2.0)
    x[3] = float("nan")
    x[4] = -0.0
    check_vs_interp(math_kernel, (1,), x, torch.zeros(18 * N, dtype=dt), N, BLOCK=64, outputs=[1],
                    atol=1e-6, rtol=1e-6 if dt == torch.float32 else 1e-12)


def _ulps_apart(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Distance in units of the last place, through the ordered integer view of the bits."""
    ib = {torch.float32: torch.int32, torch.float64: torch.int64}[a.dtype]
    ia, ib_ = a.view(ib).to(torch.int64), b.view(ib).to(torch.int64)
    ia = torch.where(ia < 0, -(ia & (2 ** (a.element_size() * 8 - 1) - 1)), ia)
    ib_ = torch.where(ib_ < 0, -(ib_ & (2 ** (b.element_size() * 8 - 1) - 1)), ib_)
    return (ia - ib_).abs()


@pytest.mark.parametrize("dt", [torch.float32, torch.float64])
def test_transcendentals_keep_subnormal_results(dt: torch.dtype) -> None:
    """Results below the smallest normal are subnormal, as torch gives, not flushed to 0: exp/exp2
    (fp32 uses the inline vectorisable exp, fp64 libm) near underflow, and log/sqrt/sin/... of
    subnormal inputs. 1 ulp (of the subnormal spacing) for libm-vs-torch differences."""
    if dt == torch.float32:
        x = torch.tensor([-87.78, -88.5, -95.0, -100.0, -103.5, -103.97, -104.0, -120.0, -87.3, -126.5, -140.0,
                          -149.4, -149.6, -150.2, -1e4, 1.0e-40, 3.0e-39, 1.4e-45, 1.1e-38, 2.5, -0.5], dtype=dt)
    else:
        x = torch.tensor([-708.5, -710.0, -730.0, -744.0, -745.1, -746.0, -1e4, 1e-310, 3e-320, 4.9e-324,
                          2e-308, 2.5, -0.5, -1022.5, -1060.0, -1074.4, -1074.6, -1080.0, -1e5, 0.1, 7.0], dtype=dt)
    n = x.numel()
    got = run_nmp(math_kernel, (1,), x, torch.zeros(18 * n, dtype=dt), n, BLOCK=32)[1].view(18, n)
    ax = x.abs() + 0.25
    expect = {0: torch.exp(x), 1: torch.exp2(x), 7: torch.sin(x), 8: torch.cos(x), 15: -x}
    for row, ref in expect.items():
        assert int(_ulps_apart(got[row], ref).max()) <= 1, (row, got[row].tolist(), ref.tolist())
    exp_sub, exp2_sub = (slice(0, 6), slice(9, 13)) if dt == torch.float32 else (slice(0, 5), slice(13, 17))
    assert bool((got[0][exp_sub] > 0).all()) and bool((got[1][exp2_sub] > 0).all())  # the subnormals themselves
    assert int(_ulps_apart(got[4], torch.sqrt(ax)).max()) <= 1 and int(_ulps_apart(got[2], torch.log(ax)).max()) <= 1
    tiny = x[x.abs() < torch.finfo(dt).tiny]
    y = torch.zeros(18 * tiny.numel(), dtype=dt)
    sub = run_nmp(math_kernel, (1,), tiny * 1.0, y, tiny.numel(), BLOCK=32)[1].view(18, -1)
    assert torch.equal(sub[7], torch.sin(tiny)) and torch.equal(sub[15], -tiny)  # sin(x) = x: kept


@triton.jit
def int_math_kernel(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(o_ptr + offs, tl.abs(x), mask=m)
    tl.store(o_ptr + n + offs, -x, mask=m)
    tl.store(o_ptr + 2 * n + offs, ~x, mask=m)
    tl.store(o_ptr + 3 * n + offs, tl.cdiv(x, 3), mask=m)
    tl.store(o_ptr + 4 * n + offs, tl.where(x > 0, x, x * 2), mask=m)


@pytest.mark.parametrize("dt", [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8])
def test_integer_unary_ops_match_interpreter(dt: torch.dtype) -> None:
    check_vs_interp(int_math_kernel, (1,), make(dt, 17), torch.zeros(5 * N, dtype=dt), N, BLOCK=64, outputs=[1])


# ----------------------------------------------------------------------------------------------
# libdevice (the interpreter has none: references are torch and Python)


@triton.jit
def libdevice1_kernel(x_ptr, o_ptr, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, FN(tl.load(x_ptr + offs, mask=m)), mask=m)


@triton.jit
def libdevice2_kernel(x_ptr, y_ptr, o_ptr, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(o_ptr + offs, FN(x, y), mask=m)


def _cbrt(t):
    return t.sign() * t.abs() ** (1 / 3)


LIBDEVICE_FLOAT = {
    "tanh": torch.tanh, "erf": torch.erf, "erfinv": torch.erfinv, "exp10": lambda t: 10**t,
    "sinpi": lambda t: torch.sin(math.pi * t), "rsqrt": lambda t: t.abs().rsqrt(), "cbrt": _cbrt,
    "lgamma": torch.lgamma, "normcdf": torch.special.ndtr, "atanh": torch.atanh, "expm1": torch.expm1,
    "log1p": torch.log1p, "rint": torch.round, "nearbyint": torch.round, "j0": torch.special.bessel_j0,
    "asinh": torch.asinh, "trunc": torch.trunc, "round": lambda t: torch.sign(t) * torch.floor(t.abs() + 0.5),
}


@pytest.mark.parametrize("dt", [torch.float32, torch.float64])
def test_libdevice_float_functions(dt: torch.dtype) -> None:
    x = (torch.rand(N, generator=_gen(18)) * 1.8 - 0.9).to(dt)
    tol = 2e-6 if dt == torch.float32 else 1e-12
    for name, ref in LIBDEVICE_FLOAT.items():
        xin = x.abs() if name == "rsqrt" else x
        out = run_nmp(libdevice1_kernel, (1,), xin, torch.zeros(N, dtype=dt), N, FN=getattr(libdevice, name),
                         BLOCK=64)[1]
        torch.testing.assert_close(out, ref(xin), atol=tol, rtol=tol, msg=lambda m, name=name: f"{name}: {m}")


def test_libdevice_classification_and_bits() -> None:
    x = torch.tensor([0.0, -0.0, 1.5, -2.0, float("inf"), -float("inf"), float("nan"), 3e-39])
    n = x.numel()
    for name, ref in [("isnan", torch.isnan), ("isinf", torch.isinf), ("signbit", torch.signbit),
                      ("finitef", torch.isfinite)]:
        out = run_nmp(libdevice1_kernel, (1,), x, torch.zeros(n, dtype=torch.int32), n,
                         FN=getattr(libdevice, name), BLOCK=8)[1]
        assert out.tolist() == ref(x).int().tolist(), name
    bits = run_nmp(libdevice1_kernel, (1,), x, torch.zeros(n, dtype=torch.int32), n, FN=libdevice.float_as_int,
                      BLOCK=8)[1]
    assert torch.equal(bits, x.view(torch.int32))


def _u32(v: int) -> int:
    return v & 0xFFFFFFFF


LIBDEVICE_INT = {
    "clz": lambda v: 32 - _u32(v).bit_length(),
    "popc": lambda v: bin(_u32(v)).count("1"),
    "brev": lambda v: int(f"{_u32(v):032b}"[::-1], 2),
    "ffs": lambda v: (v & -v).bit_length(),
    "abs": lambda v: abs(v),
}


def test_libdevice_integer_functions() -> None:
    x = torch.randint(-(2**31), 2**31 - 1, (N,), generator=_gen(19), dtype=torch.int64).to(torch.int32)
    x[0], x[1] = 0, -1
    for name, ref in LIBDEVICE_INT.items():
        out = run_nmp(libdevice1_kernel, (1,), x, torch.zeros(N, dtype=torch.int32), N,
                         FN=getattr(libdevice, name), BLOCK=64)[1]
        expect = [ref(v) for v in x.tolist()]
        expect = [e - 2**32 if e >= 2**31 else e for e in expect]
        assert out.tolist() == expect, name
    y = torch.randint(-(2**31), 2**31 - 1, (N,), generator=_gen(20), dtype=torch.int64).to(torch.int32)
    hi = run_nmp(libdevice2_kernel, (1,), x, y, torch.zeros(N, dtype=torch.int32), N, FN=libdevice.mulhi,
                    BLOCK=64)[2]
    assert torch.equal(hi, ((x.long() * y.long()) >> 32).int())


@pytest.mark.parametrize("op", ["add", "mul", "div"])
def test_libdevice_directed_rounding(op: str) -> None:
    a, b = torch.randn(N, generator=_gen(21)), torch.randn(N, generator=_gen(22))
    exact = {"add": a.double() + b.double(), "mul": a.double() * b.double(), "div": a.double() / b.double()}[op]
    outs = {}
    for mode in ("rn", "rz", "rd", "ru"):
        outs[mode] = run_nmp(libdevice2_kernel, (1,), a, b, torch.zeros(N), N, FN=getattr(libdevice, f"{op}_{mode}"),
                                BLOCK=64)[2]
    assert torch.equal(outs["rn"], exact.float())
    assert bool((outs["rd"].double() <= exact).all()) and bool((outs["ru"].double() >= exact).all())
    assert bool((outs["rz"].double().abs() <= exact.abs()).all())
    # rd and ru are neighbours (or equal when exact)
    gap = (outs["ru"].view(torch.int32).long() - outs["rd"].view(torch.int32).long()).abs()
    assert bool((gap <= 1).all())


def test_libdevice_float_to_int_rounding_modes() -> None:
    x = torch.randn(N, generator=_gen(23)) * 10
    x[:4] = torch.tensor([0.5, 1.5, -2.5, -0.5])
    for mode, ref in [("rn", torch.round), ("rz", torch.trunc), ("rd", torch.floor), ("ru", torch.ceil)]:
        out = run_nmp(libdevice1_kernel, (1,), x, torch.zeros(N, dtype=torch.int32), N,
                         FN=getattr(libdevice, f"float2int_{mode}"), BLOCK=64)[1]
        assert torch.equal(out, ref(x).int()), mode


def test_libdevice_unknown_symbol_is_a_clear_error() -> None:
    x = torch.rand(N)
    with pytest.raises(NMPCompilationError, match="libdevice function '__nv_cyl_bessel_i0f'"):
        run_nmp(libdevice1_kernel, (1,), x, torch.zeros(N), N, FN=libdevice.cyl_bessel_i0, BLOCK=64)

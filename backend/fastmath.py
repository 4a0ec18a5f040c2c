"""Vectorisable fp32 exp/exp2 emitted inline as LLVM IR.

`llvm.exp.f32` becomes a call to libm's scalar `expf`, which keeps LLVM from vectorising the loop
around it; softmax and attention spend most of their simulation time there. This is Cephes' expf
scheme: n = round(x / ln 2), r = x - n ln 2 (ln 2 split in two for precision), exp(r) by a degree-5
polynomial, then the exponent bits scaled by n. Accurate to about 1 ulp over the normal range.
Results below the smallest normal stay subnormal (gradual underflow, as libm and torch give): the
scaling by 2**n is done in two exact steps there, so the result is rounded once, by the last multiply.
+-inf and NaN behave as in libm.
"""

from __future__ import annotations

from llvmlite import ir

F32 = ir.FloatType()
I32 = ir.IntType(32)

_LOG2E = 1.44269504088896341
_LN2_HI = 0.693359375
_LN2_LO = -2.12194440e-4
_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
_MAX_X = 88.7228391  # exp overflows to inf above
_MIN_X = -110.0  # below: smaller than half the smallest subnormal (e**-103.98), rounds to 0
_MIN_X2 = -160.0  # the same for 2**x (2**-150)


def _f(v: float) -> ir.Constant:
    return ir.Constant(F32, v)


def _intrinsic(b: ir.IRBuilder, name: str, args: list[ir.Value]) -> ir.Value:
    full = f"llvm.{name}.f32"
    fn = b.module.globals.get(full) or ir.Function(b.module, ir.FunctionType(F32, [F32] * len(args)), full)
    return b.call(fn, args)


def _scaled(b: ir.IRBuilder, r: ir.Value, n: ir.Value) -> ir.Value:
    """exp(r) * 2**n for |r| <= ln(2)/2 and integral n in [-160, 128]."""
    p = _f(_POLY[0])
    for c in _POLY[1:]:
        p = b.fadd(b.fmul(p, r), _f(c))
    y = b.fadd(b.fadd(b.fmul(b.fmul(p, r), r), r), _f(1.0))
    # n can be 128 just below overflow: scale by 2**127 and double y instead of building 2**128 (inf).
    top = b.fcmp_ordered(">", n, _f(127.0))
    y = b.select(top, b.fmul(y, _f(2.0)), y)
    n = b.select(top, _f(127.0), n)
    # n below -126: 2**n is not a normal float. Scale y by 2**-64 first (exact: y is near 1) and the
    # rest by 2**(n + 64) (normal), so the one inexact step is the final multiply into the subnormals.
    low = b.fcmp_ordered("<", n, _f(-126.0))
    y = b.select(low, b.fmul(y, _f(2.0 ** -64)), y)
    n = b.select(low, b.fadd(n, _f(64.0)), n)
    scale = b.bitcast(b.shl(b.add(b.fptosi(n, I32), ir.Constant(I32, 127)), ir.Constant(I32, 23)), F32)
    return b.fmul(y, scale)


def _edges(b: ir.IRBuilder, x: ir.Value, out: ir.Value, lo: float, hi: float) -> ir.Value:
    out = b.select(b.fcmp_ordered(">", x, _f(hi)), _f(float("inf")), out)
    out = b.select(b.fcmp_ordered("<", x, _f(lo)), _f(0.0), out)
    return b.select(b.fcmp_unordered("uno", x, x), x, out)


def exp_f32(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """e**x for an fp32 value, branch-free (selects only), so loops around it vectorise."""
    xc = _intrinsic(b, "minnum", [_intrinsic(b, "maxnum", [x, _f(_MIN_X)]), _f(_MAX_X)])
    n = _intrinsic(b, "rint", [b.fmul(xc, _f(_LOG2E))])
    r = b.fsub(b.fsub(xc, b.fmul(n, _f(_LN2_HI))), b.fmul(n, _f(_LN2_LO)))
    return _edges(b, x, _scaled(b, r, n), _MIN_X, _MAX_X)


def exp2_f32(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """2**x for an fp32 value: n = round(x) exactly, exp((x - n) ln 2) by the same polynomial."""
    xc = _intrinsic(b, "minnum", [_intrinsic(b, "maxnum", [x, _f(_MIN_X2)]), _f(128.0)])
    n = _intrinsic(b, "rint", [xc])
    r = b.fmul(b.fsub(xc, n), _f(0.6931471805599453))
    return _edges(b, x, _scaled(b, r, n), _MIN_X2, 128.0)

"""8-bit float formats: decoding to and encoding from the fp32 compute representation.

Triton's fp8 types are stored as one byte and computed in fp32 (like fp16/bf16, see `codegen_scalar`).
Decoding is a 256-entry table lookup (exact by construction); encoding rounds to nearest even and
saturates to the largest finite value (NVIDIA's `cvt.rn.satfinite` semantics: a GPU never produces an
fp8 infinity from a conversion). NaN codes decode to fp32 NaNs that carry the code in their payload, so a
load followed by a store moves the byte unchanged; any other NaN encodes to the format's canonical NaN.

Formats (MLIR name: exponent bits, mantissa bits, bias, special values):
  f8E5M2         tl.float8e5     5, 2, 15  IEEE-like: 0x7C inf, 0x7D..0x7F NaN
  f8E4M3FN       tl.float8e4nv   4, 3, 7   no inf, 0x7F NaN
  f8E4M3B11FNUZ  tl.float8e4b15  4, 3, 15  Triton's e4b15: every code finite (bias 15, max 1.875)
  f8E4M3FNUZ     tl.float8e4b8   4, 3, 8   no inf, no -0, 0x80 NaN
  f8E5M2FNUZ     tl.float8e5b16  5, 2, 16  no inf, no -0, 0x80 NaN
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from llvmlite import ir

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
F32 = ir.FloatType()

_NAN_TAG = 0x7FC00100  # fp32 NaN payload pattern whose low byte is the fp8 code
_NAN_TAG_MASK = 0x7FFFFF00


@dataclass(frozen=True)
class Fp8Format:
    name: str
    exp_bits: int
    man_bits: int
    bias: int
    kind: str  # "ieee" (inf + NaNs), "fn" (one NaN per sign), "fnuz" (0x80 NaN), "finite"

    def is_nan_code(self, code: int) -> bool:
        e = (code >> self.man_bits) & ((1 << self.exp_bits) - 1)
        m = code & ((1 << self.man_bits) - 1)
        if self.kind == "ieee":
            return e == (1 << self.exp_bits) - 1 and m != 0
        if self.kind == "fn":
            return code & 0x7F == 0x7F
        if self.kind == "fnuz":
            return code == 0x80
        return False

    def value(self, code: int) -> float:
        """The real value of `code` (NaN for NaN codes)."""
        if self.is_nan_code(code):
            return math.nan
        sign = -1.0 if code & 0x80 else 1.0
        e = (code >> self.man_bits) & ((1 << self.exp_bits) - 1)
        m = code & ((1 << self.man_bits) - 1)
        if self.kind == "ieee" and e == (1 << self.exp_bits) - 1:
            return sign * math.inf
        if e == 0:
            return sign * m * 2.0 ** (1 - self.bias - self.man_bits)
        return sign * ((1 << self.man_bits) | m) * 2.0 ** (e - self.bias - self.man_bits)

    @property
    def max_finite(self) -> float:
        return max(v for v in (self.value(c) for c in range(128)) if math.isfinite(v))

    @property
    def canonical_nan(self) -> int | None:
        return {"ieee": 0x7E, "fn": 0x7F, "fnuz": 0x80}.get(self.kind)


FORMATS: dict[str, Fp8Format] = {
    f.name: f
    for f in (
        Fp8Format("f8E5M2", 5, 2, 15, "ieee"),
        Fp8Format("f8E4M3FN", 4, 3, 7, "fn"),
        Fp8Format("f8E4M3B11FNUZ", 4, 3, 15, "finite"),
        Fp8Format("f8E4M3FNUZ", 4, 3, 8, "fnuz"),
        Fp8Format("f8E5M2FNUZ", 5, 2, 16, "fnuz"),
    )
}


def _f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def decode_bits(fmt: Fp8Format, code: int) -> int:
    """fp32 bit pattern `code` decodes to (NaN codes keep their code in the payload)."""
    if fmt.is_nan_code(code):
        return (0x80000000 if code & 0x80 else 0) | _NAN_TAG | code
    return _f32_bits(fmt.value(code))


def _lut(module: ir.Module, fmt: Fp8Format) -> ir.GlobalVariable:
    name = f"nmp_{fmt.name}_to_f32"
    g = module.globals.get(name)
    if g is None:
        ty = ir.ArrayType(I32, 256)
        g = ir.GlobalVariable(module, ty, name)
        g.initializer = ir.Constant(ty, [decode_bits(fmt, c) for c in range(256)])
        g.global_constant = True
        g.linkage = "internal"
    return g


def decode(b: ir.IRBuilder, code: ir.Value, fmt: Fp8Format) -> ir.Value:
    """i8 storage -> fp32 compute value."""
    ptr = b.gep(_lut(b.module, fmt), [ir.Constant(I32, 0), b.zext(code, I64)], inbounds=True)
    return b.bitcast(b.load(ptr), F32)


def _c32(v: int) -> ir.Constant:
    return ir.Constant(I32, v)


def encode(b: ir.IRBuilder, v: ir.Value, fmt: Fp8Format) -> ir.Value:
    """fp32 compute value -> i8 storage: round to nearest even, saturate to +-max finite."""
    m, bias = fmt.man_bits, fmt.bias
    bits = b.bitcast(v, I32)
    sign = b.and_(b.lshr(bits, _c32(24)), _c32(0x80))
    a = b.bitcast(b.and_(bits, _c32(0x7FFFFFFF)), F32)
    maxf = ir.Constant(F32, fmt.max_finite)
    a = b.select(b.fcmp_ordered(">", a, maxf), maxf, a)
    # quantum of a's binade in the fp8 format (the subnormal quantum below the normal range)
    e = b.sub(b.lshr(b.bitcast(a, I32), _c32(23)), _c32(127))
    e_min = _c32(1 - bias)
    e = b.select(b.icmp_signed("<", e, e_min), e_min, e)
    q = b.bitcast(b.shl(b.add(e, _c32(127 - m)), _c32(23)), F32)
    # a + q*2^23 has an ulp of exactly q: the fp32 add rounds a to a multiple of q, ties to even
    c = b.fmul(q, ir.Constant(F32, float(1 << 23)))
    r = b.fsub(b.fadd(a, c), c)
    rb = b.bitcast(r, I32)
    er = b.sub(b.lshr(rb, _c32(23)), _c32(127))
    normal = b.or_(b.shl(b.add(er, _c32(bias)), _c32(m)), b.lshr(b.and_(rb, _c32(0x7FFFFF)), _c32(23 - m)))
    sub = b.fptoui(b.fmul(r, ir.Constant(F32, 2.0 ** (bias + m - 1))), I32)
    code = b.select(b.icmp_signed(">=", er, e_min), normal, sub)
    if fmt.kind == "fnuz":  # no negative zero: 0x80 is the NaN
        sign = b.select(b.icmp_unsigned("==", code, _c32(0)), _c32(0), sign)
    code = b.or_(code, sign)
    is_nan = b.fcmp_unordered("uno", v, v)
    nan_code = _nan_code(b, bits, sign, fmt)
    return b.trunc(b.select(is_nan, nan_code, code), I8)


def _nan_code(b: ir.IRBuilder, bits: ir.Value, sign: ir.Value, fmt: Fp8Format) -> ir.Value:
    """The code a NaN encodes to: the code its payload carries if that is a NaN of this format, else
    the canonical NaN (e4b15 has no NaN: it saturates like an overflow)."""
    canonical = fmt.canonical_nan
    if canonical is None:
        return b.or_(_c32(0x7F), sign)
    fallback = _c32(canonical) if fmt.kind == "fnuz" else b.or_(_c32(canonical), sign)
    tagged = b.icmp_unsigned("==", b.and_(bits, _c32(_NAN_TAG_MASK)), _c32(_NAN_TAG))
    carried = b.and_(bits, _c32(0xFF))
    if fmt.kind == "ieee":
        exp_all = _c32(((1 << fmt.exp_bits) - 1) << fmt.man_bits)
        ok = b.and_(b.icmp_unsigned("==", b.and_(carried, exp_all), exp_all),
                    b.icmp_unsigned("!=", b.and_(carried, _c32((1 << fmt.man_bits) - 1)), _c32(0)))
    elif fmt.kind == "fn":
        ok = b.icmp_unsigned("==", b.and_(carried, _c32(0x7F)), _c32(0x7F))
    else:
        ok = b.icmp_unsigned("==", carried, _c32(0x80))
    return b.select(b.and_(tagged, ok), carried, fallback)


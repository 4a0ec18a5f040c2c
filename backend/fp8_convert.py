"""The `convert_custom_types` code-generation hook: casts to and from Triton's `tl.float8e4b15`.

Triton's front end has no generic lowering for fp8e4b15 (its IR type is a plain i8) and asks the
backend; NVIDIA answers with PTX inline assembly. Here the conversion is written with ordinary tensor
ops (bit manipulation plus one exact fp32 rounding step), so it lowers like any other code. Semantics:
bias 15, 3 mantissa bits, every code finite (max 1.875); downcasts round to nearest even and saturate
to +-1.875, NaN becomes +-1.875 (the format has no NaN). Imported lazily: `triton.language` cannot be
imported while Triton is still discovering backends.
"""

from __future__ import annotations

from triton._C.libtriton import ir
from triton.language import core


@core.builtin
def convert_custom_types(arg, dst_ty, fp_downcast_rounding=None, _semantic=None):
    """Cast `arg` to `dst_ty`, one of the two being fp8e4b15."""
    s = _semantic
    if arg.type.scalar.is_fp8e4b15():
        # e4b15 has fp16's exponent bias: its byte is the top of an fp16 (sign, exponent, 3 mantissa bits)
        code = s.cast(s.bitcast(s.tensor(arg.handle, _retyped(arg.type, core.int8)), core.uint8), core.int32)
        h = s.or_(s.shl(s.and_(code, 0x80), 8), s.shl(s.and_(code, 0x7F), 7))
        half = s.bitcast(s.cast(h, core.int16), core.float16)
        return half if dst_ty.scalar.is_fp16() else s.cast(half, dst_ty.scalar)
    if fp_downcast_rounding not in (None, ir.ROUNDING_MODE.RTNE):
        raise ValueError("casts to float8e4b15 round to nearest even on nmp; drop fp_downcast_rounding")
    x = s.cast(arg, core.float32)
    bits = s.bitcast(x, core.int32)
    sign = s.and_(s.lshr(bits, 24), 0x80)
    a = s.bitcast(s.and_(bits, 0x7FFFFFFF), core.float32)
    a = s.minimum(a, 1.875, core.PropagateNan.NONE)
    # round a to the e4b15 grid: a + q*2^23 has an fp32 ulp of exactly q (the grid step at a's binade)
    e = s.sub(s.lshr(s.bitcast(a, core.int32), 23), 127, False)
    e = s.maximum(e, -14, core.PropagateNan.NONE)
    q = s.bitcast(s.shl(s.add(e, 127 - 3, False), 23), core.float32)
    c = s.mul(q, 8388608.0, False)
    r = s.sub(s.add(a, c, False), c, False)
    h = s.cast(s.bitcast(s.cast(r, core.float16), core.int16), core.int32)  # exact: r is on the grid
    code = s.or_(s.and_(s.lshr(h, 7), 0x7F), sign)
    code = s.where(s.not_equal(x, x), s.or_(sign, 0x7F), code)
    byte = s.cast(code, core.int8)
    return s.tensor(byte.handle, dst_ty)


def _retyped(ty, scalar):
    return core.block_type(scalar, ty.get_block_shapes()) if ty.is_block() else scalar

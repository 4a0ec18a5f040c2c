"""Scalar semantics of elementwise ops, emitted as LLVM IR.

Tile ops (`nmp.vec`) and scalar ops share these emitters, so a value computes the same in a tile as
in a scalar. Values are held in a *compute* representation: integers as iN, fp32/fp64 natively,
fp16/bf16/fp8 widened to fp32 (each op rounds back to the narrow type when it stores, which gives the
same result as native fp16 arithmetic for + - * / since fp32 carries enough extra bits), pointers as
i64 addresses. Integer division by zero and INT_MIN / -1 are defined (0 and wrap-around) instead of
trapping, so garbage in masked-off lanes can never crash the simulator.
"""

from __future__ import annotations

import math
import struct

from llvmlite import ir

from . import fp8
from .fastmath import exp2_f32, exp_f32
from .ir import Ty

I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))
F32, F64 = ir.FloatType(), ir.DoubleType()
HALF = ir.HalfType()


def compute_type(t: Ty) -> ir.Type:
    e = t.elem
    if e == "ptr":
        return I64
    if e in ("i1", "i8", "i16", "i32", "i64"):
        return ir.IntType(int(e[1:]))
    if e == "f64":
        return F64
    if e in ("f32", "f16", "bf16") or e in fp8.FORMATS:
        return F32
    raise NotImplementedError(f"element type {e} is not supported on nmp")


def storage_type(t: Ty) -> ir.Type:
    e = t.elem
    if e == "i1":
        return I8
    if e in ("f16", "bf16"):
        return I16
    if e in fp8.FORMATS:
        return I8
    return compute_type(t)


def to_compute(b: ir.IRBuilder, v: ir.Value, t: Ty) -> ir.Value:
    """Storage -> compute representation."""
    e = t.elem
    if e == "i1":
        return b.trunc(v, I1)
    if e == "f16":
        return b.fpext(b.bitcast(v, HALF), F32)
    if e == "bf16":
        return b.bitcast(b.shl(b.zext(v, I32), ir.Constant(I32, 16)), F32)
    if e in fp8.FORMATS:
        return fp8.decode(b, v, fp8.FORMATS[e])
    return v


def to_storage(b: ir.IRBuilder, v: ir.Value, t: Ty) -> ir.Value:
    e = t.elem
    if e == "i1":
        return b.zext(v, I8)
    if e == "f16":
        return b.bitcast(b.fptrunc(v, HALF), I16)
    if e == "bf16":
        return f32_to_bf16_bits(b, v)
    if e in fp8.FORMATS:
        return fp8.encode(b, v, fp8.FORMATS[e])
    return v


def f32_to_bf16_bits(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """Round-to-nearest-even fp32 -> bf16, NaN stays NaN."""
    bits = b.bitcast(v, I32)
    lsb = b.and_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 1))
    rounded = b.add(bits, b.add(ir.Constant(I32, 0x7FFF), lsb))
    is_nan = b.fcmp_unordered("uno", v, v)
    out = b.select(is_nan, b.or_(bits, ir.Constant(I32, 0x400000)), rounded)
    return b.trunc(b.lshr(out, ir.Constant(I32, 16)), I16)


def round_to(b: ir.IRBuilder, v: ir.Value, t: Ty) -> ir.Value:
    """Round an fp32 compute value to the precision of a narrow float type (identity otherwise)."""
    if t.elem in ("f16", "bf16") or t.elem in fp8.FORMATS:
        return to_compute(b, to_storage(b, v, t), t)
    return v


def narrow_constant(value: float, elem: str) -> float:
    """A float constant as an fp16/bf16 value holds it. TTIR prints such constants as short decimals
    (bf16 0.1, which is 0.10009765625, prints as `1.000980e-01`); computing with the decimal instead of
    the type's value rounds ties the other way (bf16 -0.125 - 0.1 gave -0.2256, not -0.2246)."""
    if value != value or value in (math.inf, -math.inf):
        return value
    try:
        if elem == "f16":
            return struct.unpack("<e", struct.pack("<e", value))[0]
        if elem == "bf16":
            bits = struct.unpack("<I", struct.pack("<f", value))[0]
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
            return struct.unpack("<f", struct.pack("<I", bits))[0]
    except OverflowError:
        return math.copysign(math.inf, value)
    return value


def _intrinsic(b: ir.IRBuilder, name: str, args: list[ir.Value], ty: ir.Type | None = None) -> ir.Value:
    mod = b.module
    ty = ty or args[0].type
    suffix = {F32: "f32", F64: "f64"}.get(ty) or f"i{ty.width}"
    full = f"llvm.{name}.{suffix}"
    fn = mod.globals.get(full)
    if fn is None:
        fn = ir.Function(mod, ir.FunctionType(ty, [a.type for a in args]), full)
    return b.call(fn, args)


def _libm(b: ir.IRBuilder, name: str, args: list[ir.Value]) -> ir.Value:
    ty = args[0].type
    full = name + ("f" if ty == F32 else "")
    mod = b.module
    fn = mod.globals.get(full)
    if fn is None:
        fn = ir.Function(mod, ir.FunctionType(ty, [a.type for a in args]), full)
    return b.call(fn, args)


_ICMP = {"eq": ("==", True), "ne": ("!=", True), "slt": ("<", True), "sle": ("<=", True), "sgt": (">", True),
         "sge": (">=", True), "ult": ("<", False), "ule": ("<=", False), "ugt": (">", False), "uge": (">=", False)}
_FCMP_ORD = {"oeq": "==", "one": "!=", "olt": "<", "ole": "<=", "ogt": ">", "oge": ">=", "ord": "ord"}
_FCMP_UNO = {"ueq": "==", "une": "!=", "ult": "<", "ule": "<=", "ugt": ">", "uge": ">=", "uno": "uno"}

_INT_BIN = {"arith.addi": "add", "arith.subi": "sub", "arith.muli": "mul", "arith.andi": "and_",
            "arith.ori": "or_", "arith.xori": "xor"}
_FLOAT_BIN = {"arith.addf": "fadd", "arith.subf": "fsub", "arith.mulf": "fmul", "arith.divf": "fdiv",
              "arith.remf": "frem", "tt.precise_divf": "fdiv"}
_FLOAT_UNARY_INTR = {"math.exp": "exp", "math.exp2": "exp2", "math.log": "log", "math.log2": "log2",
                     "math.sqrt": "sqrt", "tt.precise_sqrt": "sqrt", "math.sin": "sin", "math.cos": "cos",
                     "math.absf": "fabs", "math.floor": "floor", "math.ceil": "ceil", "math.trunc": "trunc",
                     "math.round": "round", "math.roundeven": "roundeven", "math.log10": "log10",
                     "math.exp10": "exp10"}
_FLOAT_UNARY_LIBM = {"math.erf": "erf", "math.tanh": "tanh", "math.tan": "tan", "math.atan": "atan",
                     "math.asin": "asin", "math.acos": "acos", "math.sinh": "sinh", "math.cosh": "cosh",
                     "math.log1p": "log1p", "math.expm1": "expm1", "math.cbrt": "cbrt", "math.erfc": "erfc"}
_MINMAX_INTR = {"arith.maxnumf": "maxnum", "arith.minnumf": "minnum", "arith.maximumf": "maximum",
                "arith.minimumf": "minimum", "arith.maxsi": "smax", "arith.minsi": "smin",
                "arith.maxui": "umax", "arith.minui": "umin"}
_CASTS = {"arith.extsi", "arith.extui", "arith.trunci", "arith.extf", "arith.truncf", "arith.sitofp",
          "arith.uitofp", "arith.fptosi", "arith.fptoui", "arith.bitcast", "arith.index_cast",
          "tt.fp_to_fp", "tt.bitcast", "tt.int_to_ptr", "tt.ptr_to_int"}

ELEMENTWISE_OPS = (set(_INT_BIN) | set(_FLOAT_BIN) | set(_FLOAT_UNARY_INTR) | set(_FLOAT_UNARY_LIBM)
                   | set(_MINMAX_INTR) | _CASTS
                   | {"arith.divsi", "arith.divui", "arith.remsi", "arith.remui", "arith.ceildivsi",
                      "arith.floordivsi", "arith.shli", "arith.shrsi", "arith.shrui", "arith.negf",
                      "arith.cmpi", "arith.cmpf", "arith.select", "math.rsqrt", "math.absi", "math.fma",
                      "tt.addptr", "tt.clampf", "tt.mulhiui", "math.copysign", "math.powf", "arith.remf",
                      "tt.extern_elementwise"})


def _const_like(v: ir.Value, x) -> ir.Constant:
    return ir.Constant(v.type, x)


def _int_div(b: ir.IRBuilder, fn: str, x: ir.Value, y: ir.Value) -> ir.Value:
    zero, one = _const_like(y, 0), _const_like(y, 1)
    is_zero = b.icmp_signed("==", y, zero)
    if fn in ("arith.divui", "arith.remui"):
        d = b.select(is_zero, one, y)
        r = b.udiv(x, d) if fn == "arith.divui" else b.urem(x, d)
        return b.select(is_zero, zero, r)
    minus1 = _const_like(y, -1)
    is_m1 = b.icmp_signed("==", y, minus1)
    d = b.select(b.or_(is_zero, is_m1), one, y)
    if fn == "arith.divsi":
        r = b.sdiv(x, d)
        r = b.select(is_m1, b.sub(zero, x), r)
    elif fn == "arith.remsi":
        r = b.srem(x, d)
        r = b.select(is_m1, zero, r)
    else:
        q = b.sdiv(x, d)
        rem = b.srem(x, d)
        has_rem = b.icmp_signed("!=", rem, zero)
        neg = b.icmp_signed("<", b.xor(x, d), zero)
        if fn == "arith.floordivsi":
            q = b.select(b.and_(has_rem, neg), b.sub(q, one), q)
        else:  # ceildivsi
            q = b.select(b.and_(has_rem, b.not_(neg)), b.add(q, one), q)
        r = b.select(is_m1, b.sub(zero, x), q)
    return b.select(is_zero, zero, r)


def emit_cast(b: ir.IRBuilder, fn: str, x: ir.Value, src: Ty, dst: Ty, attrs: dict) -> ir.Value:
    ct = compute_type(dst)
    if fn in ("arith.extsi", "arith.index_cast"):
        if src.elem == "i1" and fn == "arith.extsi":
            return b.sext(x, ct)
        if ct.width == x.type.width:
            return x
        return b.sext(x, ct) if ct.width > x.type.width else b.trunc(x, ct)
    if fn == "arith.extui":
        return b.zext(x, ct)
    if fn == "arith.trunci":
        return b.trunc(x, ct) if ct.width < x.type.width else x
    if fn in ("arith.extf", "arith.truncf", "tt.fp_to_fp"):
        if x.type == ct:
            return round_to(b, x, dst)
        if ct == F64:
            return b.fpext(x, F64)
        if dst.elem == "f16" and x.type == F64:
            # f64 -> f16 directly (one rounding), not through f32.
            return b.fpext(b.fptrunc(x, HALF), F32)
        return round_to(b, b.fptrunc(x, F32), dst)
    if fn == "arith.sitofp":
        v = b.uitofp(x, ct) if src.elem == "i1" else b.sitofp(x, ct)
        return round_to(b, v, dst)
    if fn == "arith.uitofp":
        return round_to(b, b.uitofp(x, ct), dst)
    if fn in ("arith.fptosi", "arith.fptoui"):
        name = "fptosi.sat" if fn == "arith.fptosi" else "fptoui.sat"
        src_suffix = "f64" if x.type == F64 else "f32"
        full = f"llvm.{name}.i{ct.width}.{src_suffix}"
        f = b.module.globals.get(full) or ir.Function(b.module, ir.FunctionType(ct, [x.type]), full)
        return b.call(f, [x])
    if fn in ("arith.bitcast", "tt.bitcast"):
        if src.is_ptr or dst.is_ptr:
            return x
        st = storage_type(src)
        raw = to_storage(b, x, src)
        if st.width if isinstance(st, ir.IntType) else None:
            pass
        dt = storage_type(dst)
        if isinstance(raw.type, ir.IntType) and isinstance(dt, ir.IntType) and raw.type.width != dt.width:
            raise NotImplementedError("bitcast between types of different widths")
        return to_compute(b, b.bitcast(raw, dt), dst)
    if fn in ("tt.int_to_ptr", "tt.ptr_to_int"):
        if x.type.width == ct.width:
            return x
        return b.zext(x, ct) if ct.width > x.type.width else b.trunc(x, ct)
    raise NotImplementedError(fn)


def emit_elementwise(b: ir.IRBuilder, fn: str, attrs: dict, args: list[ir.Value], arg_tys: list[Ty],
                     res_ty: Ty) -> ir.Value:
    """One element of `fn` applied to compute-representation `args`; returns compute representation."""
    if fn in _INT_BIN:
        return getattr(b, _INT_BIN[fn])(args[0], args[1])
    if fn in _FLOAT_BIN:
        r = getattr(b, _FLOAT_BIN[fn])(args[0], args[1])
        return round_to(b, r, res_ty)
    if fn in ("arith.divsi", "arith.divui", "arith.remsi", "arith.remui", "arith.ceildivsi", "arith.floordivsi"):
        return _int_div(b, fn, args[0], args[1])
    if fn in ("arith.shli", "arith.shrsi", "arith.shrui"):
        x, s = args
        width = x.type.width
        big = b.icmp_unsigned(">=", s, _const_like(s, width))
        sh = b.select(big, _const_like(s, 0), s)
        if fn == "arith.shli":
            return b.select(big, _const_like(x, 0), b.shl(x, sh))
        if fn == "arith.shrui":
            return b.select(big, _const_like(x, 0), b.lshr(x, sh))
        return b.ashr(x, b.select(big, _const_like(s, width - 1), s))
    if fn == "arith.negf":
        return b.fneg(args[0])
    if fn == "arith.cmpi":
        op, signed = _ICMP[attrs["pred"]]
        return (b.icmp_signed if signed else b.icmp_unsigned)(op, args[0], args[1])
    if fn == "arith.cmpf":
        pred = attrs["pred"]
        if pred == "false":
            return ir.Constant(I1, 0)
        if pred == "true":
            return ir.Constant(I1, 1)
        if pred in _FCMP_ORD:
            return b.fcmp_ordered(_FCMP_ORD[pred], args[0], args[1])
        return b.fcmp_unordered(_FCMP_UNO[pred], args[0], args[1])
    if fn == "arith.select":
        return b.select(args[0], args[1], args[2])
    if fn in ("arith.maxnumf", "arith.minnumf"):
        # numpy's fmax/fmin (what the interpreter runs): NaN-ignoring, the second operand on ties, so
        # signed zeros agree too. Written as compare+select rather than llvm.maxnum: LLVM 22's loop
        # vectorizer miscompiles maxnum/minnum reductions (its NaN early exit drops the tail elements).
        x, y = args
        better = b.fcmp_ordered(">" if fn == "arith.maxnumf" else "<", x, y)
        return b.select(b.or_(better, b.fcmp_unordered("uno", y, y)), x, y)
    if fn in _MINMAX_INTR:
        return _intrinsic(b, _MINMAX_INTR[fn], args)
    if fn in ("math.exp", "math.exp2") and args[0].type == F32:
        # inline and branch-free, so the loops around it vectorise (libm's expf is a scalar call)
        return round_to(b, (exp_f32 if fn == "math.exp" else exp2_f32)(b, args[0]), res_ty)
    if fn in _FLOAT_UNARY_INTR:
        name = _FLOAT_UNARY_INTR[fn]
        if name in ("log10", "exp10"):
            return round_to(b, _libm(b, name, args), res_ty)
        return round_to(b, _intrinsic(b, name, args), res_ty)
    if fn in _FLOAT_UNARY_LIBM:
        return round_to(b, _libm(b, _FLOAT_UNARY_LIBM[fn], args), res_ty)
    if fn == "math.rsqrt":
        return round_to(b, b.fdiv(_const_like(args[0], 1.0), _intrinsic(b, "sqrt", args)), res_ty)
    if fn == "math.absi":
        return _intrinsic(b, "abs", [args[0], ir.Constant(I1, 0)], args[0].type)
    if fn == "math.fma":
        return round_to(b, _intrinsic(b, "fma", args), res_ty)
    if fn == "math.copysign":
        return _intrinsic(b, "copysign", args)
    if fn == "math.powf":
        return round_to(b, _intrinsic(b, "pow", args), res_ty)
    if fn == "tt.clampf":
        x, lo, hi = args
        if attrs.get("propagateNan") in ("all", "ALL"):
            return _intrinsic(b, "minimum", [_intrinsic(b, "maximum", [x, lo]), hi])
        return _intrinsic(b, "minnum", [_intrinsic(b, "maxnum", [x, lo]), hi])
    if fn == "tt.mulhiui":
        x, y = args
        w = x.type.width
        wide = ir.IntType(2 * w)
        p = b.mul(b.zext(x, wide), b.zext(y, wide))
        return b.trunc(b.lshr(p, ir.Constant(wide, w)), x.type)
    if fn == "tt.addptr":
        ptr, off = args
        off64 = b.sext(off, I64) if off.type.width < 64 else off
        return b.add(ptr, b.mul(off64, ir.Constant(I64, int(attrs["elem_bytes"]))))
    if fn in _CASTS:
        return emit_cast(b, fn, args[0], arg_tys[0], res_ty, attrs)
    if fn == "tt.extern_elementwise":
        return round_to(b, emit_extern(b, str(attrs.get("symbol", "")), args, arg_tys, res_ty), res_ty)
    raise NotImplementedError(f"elementwise op {fn}")


# -- libdevice (`tt.extern_elementwise`) ---------------------------------------------------------------
# Triton's `triton.language.extra.libdevice` maps (through the backend's module map) to the CUDA
# libdevice wrappers, which emit `tt.extern_elementwise` with `__nv_*` symbols. nmp implements those
# symbols here: libm where the C library has the function, LLVM intrinsics or a few lines of IR
# elsewhere. Directed-rounding variants (_rz/_rd/_ru) round the nearest result and step one ulp when
# an exact residual (fma / two-sum) says the exact value lies on the other side.

_LIBM_1 = {"sin", "cos", "tan", "exp", "exp2", "exp10", "log", "log2", "log10", "log1p", "expm1", "sinh", "cosh",
           "tanh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "cbrt", "erf", "erfc", "lgamma", "tgamma",
           "j0", "j1", "y0", "y1", "logb", "nearbyint", "rint", "round", "trunc", "floor", "ceil", "sqrt"}
_LIBM_2 = {"atan2", "hypot", "fmod", "remainder", "pow", "nextafter", "fdim", "copysign"}
_INTR_1 = {"floor": "floor", "ceil": "ceil", "trunc": "trunc", "sqrt": "sqrt", "fabs": "fabs", "rint": "rint",
           "nearbyint": "nearbyint", "round": "round", "exp2": "exp2"}


def _fdecl(b: ir.IRBuilder, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    fn = b.module.globals.get(name)
    if fn is None:
        fn = ir.Function(b.module, ir.FunctionType(ret, args), name)
    return fn


def _libm_call(b: ir.IRBuilder, base: str, args: list[ir.Value], ty: ir.Type) -> ir.Value:
    name = base + ("f" if ty == F32 else "")
    return b.call(_fdecl(b, name, ty, [a.type for a in args]), args)


def _fconst(ty: ir.Type, x: float) -> ir.Constant:
    return ir.Constant(ty, x)


def _next_toward(b: ir.IRBuilder, r: ir.Value, up: ir.Value) -> ir.Value:
    """The float next to `r` towards +inf where `up`, towards -inf elsewhere (nextafter by bits)."""
    ity = I32 if r.type == F32 else I64
    bits = b.bitcast(r, ity)
    neg = b.icmp_signed("<", bits, ir.Constant(ity, 0))
    is_zero = b.fcmp_ordered("==", r, _fconst(r.type, 0.0))
    # moving away from zero increments the magnitude bits, towards zero decrements them
    away = b.xor(up, neg)
    step = b.select(away, b.add(bits, ir.Constant(ity, 1)), b.sub(bits, ir.Constant(ity, 1)))
    tiny = b.select(up, ir.Constant(ity, 1), ir.Constant(ity, 1 << (ity.width - 1) | 1))
    out = b.bitcast(b.select(is_zero, tiny, step), r.type)
    finite = b.fcmp_ordered("!=", _intrinsic(b, "fabs", [r]), _fconst(r.type, float("inf")))
    return b.select(finite, out, r)


def _directed(b: ir.IRBuilder, mode: str, r: ir.Value, err_sign: ir.Value) -> ir.Value:
    """Adjust a round-to-nearest result `r` for `mode` given sign(exact - r) as an f value (<0, 0, >0)."""
    if mode == "rn":
        return r
    zero = _fconst(r.type, 0.0)
    below = b.fcmp_ordered("<", err_sign, zero)  # exact < r
    above = b.fcmp_ordered(">", err_sign, zero)  # exact > r
    if mode == "rd":
        return b.select(below, _next_toward(b, r, ir.Constant(I1, 0)), r)
    if mode == "ru":
        return b.select(above, _next_toward(b, r, ir.Constant(I1, 1)), r)
    # rz: step towards zero when the exact value is closer to zero than r
    pos = b.fcmp_ordered(">", r, zero)
    negr = b.fcmp_ordered("<", r, zero)
    down = b.and_(pos, below)
    upw = b.and_(negr, above)
    r = b.select(down, _next_toward(b, r, ir.Constant(I1, 0)), r)
    return b.select(upw, _next_toward(b, r, ir.Constant(I1, 1)), r)


def _rounded_arith(b: ir.IRBuilder, op: str, mode: str, args: list[ir.Value]) -> ir.Value:
    """add/sub/mul/div/sqrt/rcp/fma in the arguments' precision with rounding `mode`."""
    if op == "rcp":
        op, args = "div", [_fconst(args[0].type, 1.0), args[0]]
    if op == "sub":
        op, args = "add", [args[0], b.fneg(args[1])]
    ty = args[0].type
    if op == "add":
        x, y = args
        r = b.fadd(x, y)
        # two-sum: the exact error of the rounded sum
        yv = b.fsub(r, x)
        xv = b.fsub(r, yv)
        err = b.fadd(b.fsub(x, xv), b.fsub(y, yv))
    elif op == "mul":
        x, y = args
        r = b.fmul(x, y)
        err = _intrinsic(b, "fma", [x, y, b.fneg(r)])
    elif op == "div":
        x, y = args
        r = b.fdiv(x, y)
        res = _intrinsic(b, "fma", [b.fneg(r), y, x])  # x - r*y, exact
        neg_y = b.fcmp_ordered("<", y, _fconst(ty, 0.0))
        err = b.select(neg_y, b.fneg(res), res)
    elif op == "sqrt":
        (x,) = args
        r = _intrinsic(b, "sqrt", [x])
        err = _intrinsic(b, "fma", [b.fneg(r), r, x])
    elif op == "fma":
        x, y, z = args
        r = _intrinsic(b, "fma", [x, y, z])
        if ty == F32:
            exact = b.fadd(b.fmul(b.fpext(x, F64), b.fpext(y, F64)), b.fpext(z, F64))
            err = b.fsub(exact, b.fpext(r, F64))
            err = b.fptrunc(b.select(b.fcmp_ordered("<", err, _fconst(F64, 0.0)), _fconst(F64, -1.0),
                                     b.select(b.fcmp_ordered(">", err, _fconst(F64, 0.0)), _fconst(F64, 1.0),
                                              _fconst(F64, 0.0))), F32)
        else:
            err = _fconst(ty, 0.0)  # f64 fma: nearest only (no wider type to check against)
    else:
        raise NotImplementedError(op)
    return _directed(b, mode, r, err)


def _float_to_int(b: ir.IRBuilder, x: ir.Value, mode: str, width: int, signed: bool) -> ir.Value:
    rounder = {"rn": "roundeven", "rz": "trunc", "rd": "floor", "ru": "ceil"}[mode]
    v = _intrinsic(b, rounder, [x])
    ity = ir.IntType(width)
    name = f"llvm.{'fptosi' if signed else 'fptoui'}.sat.i{width}.{'f64' if x.type == F64 else 'f32'}"
    return b.call(_fdecl(b, name, ity, [x.type]), [v])


def _int_to_float(b: ir.IRBuilder, x: ir.Value, mode: str, ty: ir.Type, signed: bool) -> ir.Value:
    r = b.sitofp(x, ty) if signed else b.uitofp(x, ty)
    if mode == "rn":
        return r
    # compare r with x exactly in 128-bit integers (|r| <= 2^64 always fits)
    wide = ir.IntType(128)
    xw = b.sext(x, wide) if signed else b.zext(x, wide)
    rw = b.fptosi(r, wide)
    sign = b.select(b.icmp_signed("<", xw, rw), _fconst(ty, -1.0),
                    b.select(b.icmp_signed(">", xw, rw), _fconst(ty, 1.0), _fconst(ty, 0.0)))
    return _directed(b, mode, r, sign)


def _f64_to_f32(b: ir.IRBuilder, x: ir.Value, mode: str) -> ir.Value:
    r = b.fptrunc(x, F32)
    back = b.fpext(r, F64)
    diff = b.fptrunc(b.fsub(x, back), F32)
    sign = b.select(b.fcmp_ordered("<", x, back), _fconst(F32, -1.0),
                    b.select(b.fcmp_ordered(">", x, back), _fconst(F32, 1.0), _fconst(F32, 0.0)))
    del diff
    return _directed(b, mode, r, sign)


def _erfinv(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """Inverse error function: Giles' single-precision approximation, refined by two Newton steps
    on erf from libm (accurate to a few ulp in f64)."""
    ty = x.type
    d = F64
    xd = b.fpext(x, d) if ty == F32 else x
    w = b.fneg(_libm_call(b, "log", [b.fmul(b.fsub(_fconst(d, 1.0), xd), b.fadd(_fconst(d, 1.0), xd))], d))

    def poly(t, coeffs):
        acc = _fconst(d, coeffs[0])
        for c in coeffs[1:]:
            acc = b.fadd(b.fmul(acc, t), _fconst(d, c))
        return acc

    small = poly(b.fsub(w, _fconst(d, 2.5)), [2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                                               0.00021858087, -0.00125372503, -0.00417768164, 0.246640727,
                                               1.50140941])
    big = poly(b.fsub(_intrinsic(b, "sqrt", [w]), _fconst(d, 3.0)),
               [-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
                0.00943887047, 1.00167406, 2.83297682])
    p = b.select(b.fcmp_ordered("<", w, _fconst(d, 5.0)), small, big)
    y = b.fmul(p, xd)
    two_over_sqrtpi = 1.1283791670955126
    for _ in range(2):
        err = b.fsub(_libm_call(b, "erf", [y], d), xd)
        deriv = b.fmul(_fconst(d, two_over_sqrtpi), _libm_call(b, "exp", [b.fneg(b.fmul(y, y))], d))
        step = b.fdiv(err, deriv)
        finite = b.fcmp_ordered("<", _intrinsic(b, "fabs", [y]), _fconst(d, float("inf")))
        y = b.select(finite, b.fsub(y, step), y)
    # exact endpoints: erfinv(+-1) = +-inf, |x| > 1 -> nan
    ax = _intrinsic(b, "fabs", [xd])
    y = b.select(b.fcmp_ordered("==", ax, _fconst(d, 1.0)), b.fmul(xd, _fconst(d, float("inf"))), y)
    y = b.select(b.fcmp_unordered(">", ax, _fconst(d, 1.0)), _fconst(d, float("nan")), y)
    return b.fptrunc(y, F32) if ty == F32 else y


_NV_NAMED = (_LIBM_1 | _LIBM_2 | set(_INTR_1)
             | {"isnan", "isinf", "finite", "signbit", "ilogb", "ldexp", "scalbn", "powi", "jn", "yn", "fma",
                "rsqrt", "rcbrt", "rhypot", "norm3d", "norm4d", "rnorm3d", "rnorm4d", "sinpi", "cospi", "erfinv",
                "erfcinv", "erfcx", "normcdf", "normcdfinv"})


def _nv_base(symbol: str, arg_ty: ir.Type | None) -> str:
    """`__nv_sinf` -> `sin`, `__nv_fast_expf` -> `exp`, `__nv_erf` -> `erf`: the function's base name."""
    name = symbol[len("__nv_"):] if symbol.startswith("__nv_") else symbol
    if name.startswith("fast_"):
        name = name[len("fast_"):]
    if arg_ty == F32 and name.endswith("f") and name[:-1] in _NV_NAMED:
        return name[:-1]
    return name


def emit_extern(b: ir.IRBuilder, symbol: str, args: list[ir.Value], arg_tys: list[Ty], res_ty: Ty) -> ir.Value:
    """One element of a libdevice function (`__nv_*` symbol), compute representation in and out."""
    rt = compute_type(res_ty)
    fty = next((a.type for a in args if a.type in (F32, F64)), None)
    sym = symbol[len("__nv_"):] if symbol.startswith("__nv_") else symbol
    x = args[0] if args else None
    unsigned = sym.startswith("u") and sym[1:] in ("mulhi", "mul64hi", "mul24", "sad", "hadd", "rhadd")

    # -- integer functions
    if sym in ("clz", "clzll"):
        return _cast_int(b, b.ctlz(x, ir.Constant(I1, 0)), rt)
    if sym in ("popc", "popcll"):
        return _cast_int(b, b.ctpop(x), rt)
    if sym in ("brev", "brevll"):
        return b.bitreverse(x)
    if sym in ("ffs", "ffsll"):
        tz = b.cttz(x, ir.Constant(I1, 0))
        one = b.add(tz, ir.Constant(x.type, 1))
        r = b.select(b.icmp_signed("==", x, ir.Constant(x.type, 0)), ir.Constant(x.type, 0), one)
        return _cast_int(b, r, rt)
    if sym in ("mulhi", "umulhi", "mul64hi", "umul64hi"):
        w = x.type.width
        wide = ir.IntType(2 * w)
        ext = b.zext if unsigned else b.sext
        p = b.mul(ext(x, wide), ext(args[1], wide))
        return b.trunc(b.lshr(p, ir.Constant(wide, w)), x.type)
    if sym in ("mul24", "umul24"):
        mask = lambda v: (b.and_(v, ir.Constant(I32, 0xFFFFFF)) if unsigned  # noqa: E731
                          else b.ashr(b.shl(v, ir.Constant(I32, 8)), ir.Constant(I32, 8)))
        return b.mul(mask(x), mask(args[1]))
    if sym in ("sad", "usad"):
        y, z = args[1], args[2]
        gt = b.icmp_unsigned(">", x, y) if unsigned else b.icmp_signed(">", x, y)
        return b.add(z, b.select(gt, b.sub(x, y), b.sub(y, x)))
    if sym in ("hadd", "uhadd", "rhadd", "urhadd"):
        wide = I64
        ext = b.zext if unsigned else b.sext
        s = b.add(ext(x, wide), ext(args[1], wide))
        if sym.endswith("rhadd"):
            s = b.add(s, ir.Constant(wide, 1))
        s = b.lshr(s, ir.Constant(wide, 1)) if unsigned else b.ashr(s, ir.Constant(wide, 1))
        return b.trunc(s, I32)
    if sym == "byte_perm":
        y, sel = args[1], args[2]
        both = b.or_(b.zext(x, I64), b.shl(b.zext(y, I64), ir.Constant(I64, 32)))
        out = ir.Constant(I32, 0)
        for k in range(4):
            nib = b.and_(b.lshr(sel, ir.Constant(I32, 4 * k)), ir.Constant(I32, 7))
            byte = b.trunc(b.and_(b.lshr(both, b.zext(b.mul(nib, ir.Constant(I32, 8)), I64)),
                                  ir.Constant(I64, 0xFF)), I32)
            out = b.or_(out, b.shl(byte, ir.Constant(I32, 8 * k)))
        return out
    if sym in ("abs", "llabs"):
        return _intrinsic(b, "abs", [x, ir.Constant(I1, 0)], x.type)

    # -- bit reinterpretation
    if sym in ("int_as_float", "uint_as_float"):
        return b.bitcast(x, F32)
    if sym in ("float_as_int", "float_as_uint"):
        return b.bitcast(x, I32)
    if sym == "longlong_as_double":
        return b.bitcast(x, F64)
    if sym == "double_as_longlong":
        return b.bitcast(x, I64)
    if sym == "hiloint2double":
        hi, lo = b.zext(args[0], I64), b.zext(args[1], I64)
        return b.bitcast(b.or_(b.shl(hi, ir.Constant(I64, 32)), lo), F64)
    if sym in ("double2loint", "double2hiint"):
        bits = b.bitcast(x, I64)
        if sym == "double2hiint":
            bits = b.lshr(bits, ir.Constant(I64, 32))
        return b.trunc(bits, I32)

    # -- conversions with a rounding mode
    import re

    m = re.fullmatch(r"(double|float|int|uint|ll|ull)2(float|double|int|uint|ll|ull)_(rn|rz|rd|ru)", sym)
    if m:
        src, dst, mode = m.groups()
        if src in ("double", "float") and dst in ("int", "uint", "ll", "ull"):
            width = 32 if dst in ("int", "uint") else 64
            return _float_to_int(b, x, mode, width, dst in ("int", "ll"))
        if src in ("int", "uint", "ll", "ull"):
            return _int_to_float(b, x, mode, rt, src in ("int", "ll"))
        if src == "double" and dst == "float":
            return _f64_to_f32(b, x, mode)
    if sym in ("llrint", "llrintf"):
        return _float_to_int(b, x, "rn", 64, True)
    if sym in ("llround", "llroundf"):
        r = _intrinsic(b, "round", [x])
        return b.call(_fdecl(b, f"llvm.fptosi.sat.i64.{'f64' if x.type == F64 else 'f32'}", I64, [x.type]), [r])

    # -- arithmetic with a rounding mode
    m = re.fullmatch(r"([fd])?(add|sub|mul|div|rcp|sqrt|fma|fmaf|frcp|fsqrt|frsqrt)_(rn|rz|rd|ru)", sym)
    if m:
        op, mode = m.group(2), m.group(3)
        op = {"fmaf": "fma", "frcp": "rcp", "fsqrt": "sqrt"}.get(op, op)
        if op == "frsqrt":
            return b.fdiv(_fconst(x.type, 1.0), _intrinsic(b, "sqrt", [x]))
        return _rounded_arith(b, op, mode, args)
    if sym == "fast_fdividef":
        return b.fdiv(x, args[1])
    if sym == "saturatef":
        return _intrinsic(b, "minnum", [_intrinsic(b, "maxnum", [x, _fconst(x.type, 0.0)]), _fconst(x.type, 1.0)])
    if sym == "rcp64h":
        return b.fdiv(_fconst(F64, 1.0), x)

    base = _nv_base(symbol, fty)
    # -- classification
    if base in ("isnan", "isnand"):
        return b.zext(b.fcmp_unordered("uno", x, x), rt)
    if base in ("isinf", "isinfd"):
        return b.zext(b.fcmp_ordered("==", _intrinsic(b, "fabs", [x]), _fconst(x.type, float("inf"))), rt)
    if base in ("finite", "isfinited"):
        return b.zext(b.fcmp_ordered("<", _intrinsic(b, "fabs", [x]), _fconst(x.type, float("inf"))), rt)
    if base in ("signbit", "signbitd"):
        ity = I32 if x.type == F32 else I64
        neg = b.icmp_signed("<", b.bitcast(x, ity), ir.Constant(ity, 0))
        return b.zext(neg, rt)
    if base == "ilogb":
        r = _libm_call_ret(b, "ilogb", [x], I32)
        return r
    if base in ("ldexp", "scalbn"):
        return _libm_call_ret(b, "ldexp" + ("f" if x.type == F32 else ""), [x, args[1]], x.type, raw=True)
    if base == "powi":
        return _libm_call(b, "pow", [x, b.sitofp(args[1], x.type)], x.type)
    if base in ("jn", "yn"):
        n, v = args
        return _libm_call_ret(b, base + ("f" if v.type == F32 else ""), [n, v], v.type, raw=True)

    # -- float functions
    if base == "fabs":
        return _intrinsic(b, "fabs", [x])
    if base == "fma":
        return _intrinsic(b, "fma", args)
    if base == "rsqrt":
        return b.fdiv(_fconst(x.type, 1.0), _intrinsic(b, "sqrt", [x]))
    if base == "rcbrt":
        return b.fdiv(_fconst(x.type, 1.0), _libm_call(b, "cbrt", [x], x.type))
    if base == "rhypot":
        return b.fdiv(_fconst(x.type, 1.0), _libm_call(b, "hypot", args, x.type))
    if base in ("norm3d", "norm4d", "rnorm3d", "rnorm4d"):
        acc = _fconst(x.type, 0.0)
        for a in args:
            acc = _intrinsic(b, "fma", [a, a, acc])
        r = _intrinsic(b, "sqrt", [acc])
        return b.fdiv(_fconst(x.type, 1.0), r) if base.startswith("r") else r
    if base in ("sinpi", "cospi"):
        return _libm_call(b, base[:3], [b.fmul(x, _fconst(x.type, 3.141592653589793))], x.type)
    if base == "erfinv":
        return _erfinv(b, x)
    if base == "erfcinv":
        return _erfinv(b, b.fsub(_fconst(x.type, 1.0), x))
    if base == "erfcx":
        d = b.fpext(x, F64) if x.type == F32 else x
        r = b.fmul(_libm_call(b, "exp", [b.fmul(d, d)], F64), _libm_call(b, "erfc", [d], F64))
        return b.fptrunc(r, F32) if x.type == F32 else r
    if base == "normcdf":
        return b.fmul(_fconst(x.type, 0.5), _libm_call(b, "erfc", [b.fmul(x, _fconst(x.type, -0.7071067811865476))],
                                                           x.type))
    if base == "normcdfinv":
        e = _erfinv(b, b.fsub(_fconst(x.type, 1.0), b.fmul(x, _fconst(x.type, 2.0))))
        return b.fmul(e, _fconst(x.type, -1.4142135623730951))
    if base in _INTR_1:
        return _intrinsic(b, _INTR_1[base], [x])
    if base in _LIBM_1 and len(args) == 1:
        return _libm_call(b, base, [x], x.type)
    if base in _LIBM_2 and len(args) == 2:
        return _libm_call(b, base, args, x.type)
    raise NotImplementedError(f"libdevice function '{symbol}'")


def _cast_int(b: ir.IRBuilder, v: ir.Value, rt: ir.Type) -> ir.Value:
    if v.type.width == rt.width:
        return v
    return b.trunc(v, rt) if v.type.width > rt.width else b.zext(v, rt)


def _libm_call_ret(b: ir.IRBuilder, name: str, args: list[ir.Value], ret: ir.Type, raw: bool = False) -> ir.Value:
    if not raw and args[0].type == F32:
        name += "f"
    return b.call(_fdecl(b, name, ret, [a.type for a in args]), args)

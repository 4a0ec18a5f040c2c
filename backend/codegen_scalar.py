"""Scalar semantics of elementwise ops, emitted as LLVM IR.

Tile ops (`nmp.vec`) and scalar ops share these emitters, so a value computes the same in a tile as
in a scalar. Values are held in a *compute* representation: integers as iN, fp32/fp64 natively,
fp16/bf16 widened to fp32 (each op rounds back to the narrow type when it stores, which gives the
same result as native fp16 arithmetic for + - * / since fp32 carries enough extra bits), pointers as
i64 addresses. Integer division by zero and INT_MIN / -1 are defined (0 and wrap-around) instead of
trapping, so garbage in masked-off lanes can never crash the simulator.
"""

from __future__ import annotations

from llvmlite import ir

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
    if e in ("f32", "f16", "bf16"):
        return F32
    raise NotImplementedError(f"element type {e} is not supported on nmp")


def storage_type(t: Ty) -> ir.Type:
    e = t.elem
    if e == "i1":
        return I8
    if e in ("f16", "bf16"):
        return I16
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
    return v


def to_storage(b: ir.IRBuilder, v: ir.Value, t: Ty) -> ir.Value:
    e = t.elem
    if e == "i1":
        return b.zext(v, I8)
    if e == "f16":
        return b.bitcast(b.fptrunc(v, HALF), I16)
    if e == "bf16":
        return f32_to_bf16_bits(b, v)
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
    if t.elem in ("f16", "bf16"):
        return to_compute(b, to_storage(b, v, t), t)
    return v


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
                      "tt.addptr", "tt.clampf", "tt.mulhiui", "math.copysign", "math.powf", "arith.remf"})


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
    if fn in _MINMAX_INTR:
        return _intrinsic(b, _MINMAX_INTR[fn], args)
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
    raise NotImplementedError(f"elementwise op {fn}")

"""Types of the program IR under Triton's rules, and the validity check the minimiser relies on.

`infer(expr, env)` gives an expression's `VT` (dtype name, dims) or raises `TypeError` for what
Triton would reject (a bitwise op on floats, a math function on an integer, mismatched shapes, a
loop-carried value that changes type). `check(program)` types a whole program and returns the type
of every write, which the runner needs to allocate outputs.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import combine
from .dtypes import BOOL, DTYPES, F32, I32, I64, computation_type, dt, scalar_type
from .program import (
    Atomic,
    Bin,
    Call,
    Cast,
    Const,
    Dot,
    Expand,
    Full,
    Let,
    Load,
    Loop,
    Program,
    Reduce,
    Scan,
    Store,
    Un,
    Var,
)

FLOAT_MATH = {"exp", "exp2", "log", "log2", "sin", "cos", "sqrt", "rsqrt", "erf", "floor", "ceil", "sqrt_rn",
              "sigmoid"}  # sigmoid is 1 / (1 + exp(-x)): fp32/fp64 only, as exp
CMP = {"<", "<=", ">", ">=", "==", "!="}
BITWISE = {"&", "|", "^", "<<", ">>"}
ATOMIC_DTYPES = {"add": {"int32", "uint32", "int64", "uint64", "float16", "float32", "float64"},
                 "max": {"int32", "uint32", "int64", "uint64", "float32", "float64"},
                 "min": {"int32", "uint32", "int64", "uint64", "float32", "float64"},
                 "xchg": {"int32", "uint32", "int64", "uint64", "float32", "float64"},
                 "cas": {"int32", "int64", "uint32", "uint64"}}


@dataclass(frozen=True)
class VT:
    dtype: str
    dims: tuple[str, ...]

    @property
    def d(self):
        return dt(self.dtype)


def broadcast(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    if len(a) < len(b):
        a = ("1",) * (len(b) - len(a)) + a
    if len(b) < len(a):
        b = ("1",) * (len(a) - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x == y or y == "1":
            out.append(x)
        elif x == "1":
            out.append(y)
        else:
            raise TypeError(f"shapes {a} and {b} do not broadcast")
    return tuple(out)


def _scalar_of(e) -> bool:
    return isinstance(e, Const)


def binary_type(op: str, a: VT, b: VT, a_scalar: bool, b_scalar: bool, scalar_value=None) -> str:
    """The result dtype of `a op b` (Triton's semantic.py for each operator)."""
    da, db = a.d, b.d
    if op in BITWISE:
        if not (da.is_int or da.kind == "bool") or not (db.is_int or db.kind == "bool"):
            raise TypeError(f"bitwise {op} on {da.name}, {db.name}")
        return computation_type(da, db, False, a_scalar, b_scalar).name
    if op in ("//", "%"):
        if op == "//" and (da.is_float or db.is_float):
            raise TypeError("// on floats")
        ct = computation_type(da, db, True, a_scalar, b_scalar)
        return ct.name
    if op == "/":
        ct = computation_type(da, db, True, a_scalar, b_scalar)
        if ct.is_int or ct.kind == "bool":
            return "float32"
        # float / float: both operands are cast to the computation type first (fp32, or fp64), so
        # `semantic.truediv`'s wider-mantissa rule never sees two types: fp16 / bf16 divides in fp32
        # (seed 10333: the oracle divided in fp16)
        return ct.name
    ct = computation_type(da, db, False, a_scalar, b_scalar)
    if op in CMP:
        return BOOL.name
    if scalar_value is not None and ct.kind == "uint" and scalar_value < 0:
        raise TypeError("negative scalar with an unsigned tensor")
    return ct.name


def infer(e, env: dict[str, VT]) -> VT:
    if isinstance(e, Var):
        if e.name not in env:
            raise TypeError(f"undefined {e.name}")
        return env[e.name]
    if isinstance(e, Const):
        return VT(scalar_type(e.value).name, ())
    if isinstance(e, Full):
        return VT(e.dtype, e.dims)
    if isinstance(e, Load):
        return VT(e.dtype, e.dims)
    if isinstance(e, Bin):
        a, b = infer(e.a, env), infer(e.b, env)
        if isinstance(e.a, Const) and isinstance(e.b, Const):
            raise TypeError("constant folding: both operands constant")
        sv = e.a.value if isinstance(e.a, Const) else e.b.value if isinstance(e.b, Const) else None
        if isinstance(sv, float) and e.op in BITWISE:
            raise TypeError("float scalar in bitwise op")
        if e.op == "%" and (a.d.is_float or b.d.is_float):
            raise TypeError("float % is fmod with undefined sign conventions across references; not generated")
        return VT(binary_type(e.op, a, b, _scalar_of(e.a), _scalar_of(e.b), sv), broadcast(a.dims, b.dims))
    if isinstance(e, Un):
        a = infer(e.a, env)
        if isinstance(e.a, Const):
            raise TypeError("unary op on a constant")
        if e.op in FLOAT_MATH:
            if e.a is None or a.dtype not in ("float32", "float64") or (e.op == "sqrt_rn" and a.dtype != "float32"):
                raise TypeError(f"{e.op} needs fp32/fp64, got {a.dtype}")
            return a
        if e.op == "invert":
            if not a.d.is_int:
                raise TypeError("~ on a float")
            return a
        if e.op == "neg":
            if a.d.kind == "uint" or a.d.kind == "bool":
                raise TypeError("negating an unsigned value")
            return a
        if e.op == "abs":
            if a.d.kind == "bool":
                raise TypeError("abs of bool")
            return a
        if e.op == "not":
            if a.dtype != "int1":
                raise TypeError("logical not of a non-bool")
            return a
        raise TypeError(f"unknown unary {e.op}")
    if isinstance(e, Call):
        ts = [infer(x, env) for x in e.args]
        if all(isinstance(x, Const) for x in e.args):
            raise TypeError("call on constants only")
        if e.fn in ("minimum", "maximum"):
            t = binary_type("+", ts[0], ts[1], _scalar_of(e.args[0]), _scalar_of(e.args[1]))
            return VT(t, broadcast(ts[0].dims, ts[1].dims))
        if e.fn == "where":
            if ts[0].dtype != "int1":
                raise TypeError("where needs a bool condition")
            t = binary_type("+", ts[1], ts[2], _scalar_of(e.args[1]), _scalar_of(e.args[2]))
            return VT(t, broadcast(ts[0].dims, broadcast(ts[1].dims, ts[2].dims)))
        if e.fn == "fma":
            if any(t.dtype not in ("float32", "float64") for t in ts) or len({t.dtype for t in ts}) != 1:
                raise TypeError("fma needs one float type")
            return VT(ts[0].dtype, broadcast(ts[0].dims, broadcast(ts[1].dims, ts[2].dims)))
        if e.fn == "clamp":
            if not ts[0].d.is_float or not all(isinstance(x, Const) for x in e.args[1:]):
                raise TypeError("clamp: float tensor, constant bounds")
            return ts[0]
        if e.fn == "cdiv":
            if not ts[0].d.is_int or not isinstance(e.args[1], Const):
                raise TypeError("cdiv of an integer by a constant")
            return VT(binary_type("//", ts[0], ts[1], False, True), ts[0].dims)
        if e.fn == "umulhi":
            if ts[0].dtype != ts[1].dtype or ts[0].dtype not in ("int32", "uint32", "int64", "uint64"):
                raise TypeError("umulhi needs one 32/64-bit integer type")
            return VT(ts[0].dtype, broadcast(ts[0].dims, ts[1].dims))
        raise TypeError(f"unknown call {e.fn}")
    if isinstance(e, Cast):
        a = infer(e.a, env)
        if isinstance(e.a, Const):
            raise TypeError("cast of a constant")
        return VT(e.dtype, a.dims)
    if isinstance(e, Reduce):
        a = infer(e.a, env)
        if not a.dims or e.axis >= len(a.dims) or "1" in a.dims:
            raise TypeError("reduce of a scalar or a broadcast dimension")
        dims = a.dims[:e.axis] + a.dims[e.axis + 1:]
        if e.op in ("argmax", "argmin"):
            if a.dtype in ("int1",):
                raise TypeError("argmax of bool")
            return VT(I32.name, dims)
        if e.op == "xor_sum":
            if not a.d.is_int:
                raise TypeError("xor_sum of floats")
            return VT(a.dtype, dims)
        if e.op == "sum":
            d = a.d
            if d.kind == "bool" or (d.is_int and d.bits < 32):
                return VT(("int32" if d.kind == "int" else "uint32"), dims)
            return VT(a.dtype, dims)
        if e.op in ("max", "min"):
            # standard.max/min promote types narrower than 32 bits (and bf16): floats to fp32, integers
            # (unsigned too) to int32
            d = a.d
            if d.bits < 32 or d.name == "bfloat16":
                return VT("float32" if d.is_float else "int32", dims)
            return VT(a.dtype, dims)
        fn = combine.get(e.op)
        fn.check(a.d)
        return VT(fn.result_dtype(a.d).name, dims)
    if isinstance(e, Scan):
        a = infer(e.a, env)
        if not a.dims or e.axis >= len(a.dims) or "1" in a.dims:
            raise TypeError("scan of a scalar or a broadcast dimension")
        if e.op in ("cumsum", "cumprod"):
            d = a.d
            if d.kind == "bool" or (d.is_int and d.bits < 32):
                return VT(("int32" if d.kind == "int" else "uint32"), a.dims)
            return a
        fn = combine.get(e.op)
        fn.check(a.d)
        return VT(fn.result_dtype(a.d).name, a.dims)
    if isinstance(e, Dot):
        a, b = infer(e.a, env), infer(e.b, env)
        if len(a.dims) != 2 or len(b.dims) != 2 or a.dims[1] != b.dims[0] or "1" in a.dims + b.dims:
            raise TypeError("dot shapes")
        if a.dtype != b.dtype:
            raise TypeError("dot operands of different types")
        out = dot_result_dtype(a.dtype, e.out_dtype)
        if e.precision is not None and a.dtype != "float32":
            raise TypeError("input_precision only for fp32 dots here")
        if e.acc is not None:
            acc = infer(e.acc, env)
            if acc.dtype != out or acc.dims != (a.dims[0], b.dims[1]):
                raise TypeError(f"dot accumulator {acc} for a {out} result")
        return VT(out, (a.dims[0], b.dims[1]))
    if isinstance(e, Expand):
        a = infer(e.a, env)
        if len(a.dims) != 1:
            raise TypeError("expand of a non-1-D value")
        return VT(a.dtype, (a.dims[0], "1") if e.axis == 1 else ("1", a.dims[0]))
    raise TypeError(f"unknown node {e!r}")


def dot_result_dtype(operand: str, out_dtype: str | None) -> str:
    if operand in ("int8", "uint8"):
        if out_dtype is not None:
            raise TypeError("int8 dot with out_dtype")
        return "int32"
    if operand in ("float8e5", "float8e4nv"):
        if out_dtype is not None:
            raise TypeError("fp8 dot with out_dtype")
        return "float32"
    if operand in ("float16", "bfloat16", "float32"):
        if out_dtype is not None and (operand != "float16" or out_dtype not in ("float16", "float32")):
            raise TypeError("out_dtype only for fp16 dots")
        return out_dtype or "float32"
    if operand == "float64":
        return "float64"
    raise TypeError(f"dot of {operand}")


def check(p: Program) -> dict[int, VT]:
    """Type the whole program; returns the value type of every output index (Store/Atomic targets and
    the old-value outputs of atomics). Raises TypeError when Triton would reject the program."""
    env: dict[str, VT] = {}
    outs: dict[int, VT] = {}
    dims = dict(p.dims)
    for name in [n for n, _ in p.dims]:
        if dims[name] < 1 or dims[name] & (dims[name] - 1):
            raise TypeError(f"dimension {name}={dims[name]} is not a power of two")
    if p.grid_dim is not None and p.grid_dim not in dims:
        raise TypeError("grid dimension is not a dimension")
    _check_body(p, p.body, env, outs, in_loop=None)
    if not outs:
        raise TypeError("the program writes nothing")
    return outs


def _check_body(p: Program, body, env, outs, in_loop: Loop | None) -> None:
    for s in body:
        if isinstance(s, Let):
            t = infer(s.expr, env)
            if not t.dims and isinstance(s.expr, Const):
                raise TypeError("a let of a constant")
            env[s.name] = t
        elif isinstance(s, (Store, Atomic)):
            t = infer(s.value, env)
            if "1" in t.dims:
                raise TypeError("writes of broadcast dimensions")
            if s.out in outs:
                raise TypeError(f"output {s.out} written twice")
            if isinstance(s, Atomic):
                if t.dtype not in ATOMIC_DTYPES[s.op]:
                    raise TypeError(f"atomic {s.op} on {t.dtype}")
                if s.op == "cas":
                    if s.cmp is None or infer(s.cmp, env) != t:
                        raise TypeError("cas compare value of another type")
                if s.old_out is not None:
                    if s.old_out in outs:
                        raise TypeError("old-value output written twice")
                    outs[s.old_out] = t
            outs[s.out] = t
        elif isinstance(s, Loop):
            if in_loop is not None:
                raise TypeError("nested loops are not generated")
            if s.trips < 1:
                raise TypeError("a loop without iterations")
            for name, init in s.carried:
                env[name] = infer(init, env)
            before = dict(env)
            _check_body(p, s.body, env, outs, in_loop=s)
            for name, upd in s.updates:
                t = infer(upd, env)
                if t != before[name]:
                    raise TypeError(f"loop-carried {name} changes type: {before[name]} -> {t}")
            # values defined in the body are not visible after the loop, the carried ones are
            for k in list(env):
                if k not in before:
                    del env[k]
        for e in _loads_of(s):
            if e.along is not None and (in_loop is None or e.along not in e.dims):
                raise TypeError("a load walks a dimension outside a loop")
            if e.masked and e.dtype == "int1" and not isinstance(e.other, bool):
                raise TypeError("bool load with a non-bool other")


def _loads_of(s):
    from .program import stmt_exprs, walk_exprs
    if isinstance(s, Loop):
        return []
    return [x for e in stmt_exprs(s) for x in walk_exprs(e) if isinstance(x, Load)]


def literal_ok(value, dtype: str) -> bool:
    d = DTYPES[dtype]
    if d.is_float:
        return True
    lo, hi = d.int_range
    return isinstance(value, (int, bool)) and lo <= int(value) <= hi


__all__ = ["VT", "infer", "check", "broadcast", "dot_result_dtype", "literal_ok", "F32", "I64"]

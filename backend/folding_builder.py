"""An llvmlite IRBuilder that does not emit integer arithmetic whose result it already knows.

Codegen spells index arithmetic generically (`row * stride + col`, `mask and in_bounds`), so a tile's
static shape leaves many instructions with constant operands: `mul i64 0, 128`, `add i64 %x, 0`,
`icmp eq i64 4, 4`, `select i1 true, ...` (10-20% of a kernel's instructions). LLVM folds every one of
them, but only after parsing them and running its first passes over them, and llvmlite spends as long
building and printing each. `FoldingBuilder` returns the known value instead: the constant of two
constant operands, or the other operand of an identity (`x + 0`, `x * 1`, `x & -1`, `x | 0`, ...).
The module it builds computes exactly the same values (the folds are exact in two's complement at the
operand's width and emit no flags); only scalar integers are folded, never floats or vectors.
"""

from __future__ import annotations

import operator

from llvmlite import ir

_CMP = {
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}
_I1 = ir.IntType(1)


def _int(v: ir.Value) -> int | None:
    """The value of a scalar integer constant (signed at its width), else None."""
    if isinstance(v, ir.Constant) and isinstance(v.type, ir.IntType) and type(v.constant) is int:
        return _signed(v.constant, v.type.width)
    return None


def _signed(x: int, width: int) -> int:
    x &= (1 << width) - 1
    return x - (1 << width) if x >> (width - 1) else x


def _const(ty: ir.IntType, x: int) -> ir.Constant:
    return ir.Constant(ty, x & 1 if ty.width == 1 else _signed(x, ty.width))


# op: (fold of two constants, identity as right operand, identity as left operand, absorbing constant)
_BINOPS = {
    "add": (operator.add, 0, 0, None),
    "sub": (operator.sub, 0, None, None),
    "mul": (operator.mul, 1, 1, 0),
    "and_": (operator.and_, -1, -1, 0),
    "or_": (operator.or_, 0, 0, None),
    "xor": (operator.xor, None, None, None),
}


class FoldingBuilder(ir.IRBuilder):
    """`ir.IRBuilder` with integer constant folding and identities (see the module docstring)."""

    def _binop(self, op: str, lhs, rhs, name: str, flags):
        fold, right_identity, left_identity, absorbing = _BINOPS[op]
        a, b = (None, None) if flags else (_int(lhs), _int(rhs))
        if a is not None and b is not None:
            return _const(lhs.type, fold(a, b))
        if b is not None and b == right_identity:
            return lhs
        if a is not None and a == left_identity:
            return rhs
        if absorbing is not None and absorbing in (a, b):
            return _const(lhs.type, absorbing)
        return getattr(super(), op)(lhs, rhs, name, flags)

    def icmp_signed(self, cmpop, lhs, rhs, name=""):
        a, b = _int(lhs), _int(rhs)
        if a is not None and b is not None and cmpop in _CMP:
            return ir.Constant(_I1, int(_CMP[cmpop](a, b)))
        return super().icmp_signed(cmpop, lhs, rhs, name)

    def icmp_unsigned(self, cmpop, lhs, rhs, name=""):
        a, b = _int(lhs), _int(rhs)
        if a is not None and b is not None and cmpop in _CMP:
            w = lhs.type.width
            return ir.Constant(_I1, int(_CMP[cmpop](a & ((1 << w) - 1), b & ((1 << w) - 1))))
        return super().icmp_unsigned(cmpop, lhs, rhs, name)

    def select(self, cond, lhs, rhs, name="", flags=()):
        c = _int(cond)
        if c is not None and not flags and lhs.type == rhs.type:
            return lhs if c else rhs
        return super().select(cond, lhs, rhs, name, flags)

    def trunc(self, value, typ, name=""):
        a = _int(value)
        if a is not None and isinstance(typ, ir.IntType):
            return _const(typ, a)
        return super().trunc(value, typ, name)

    def sext(self, value, typ, name=""):
        a = _int(value)
        if a is not None and isinstance(typ, ir.IntType):
            return _const(typ, a)
        return super().sext(value, typ, name)

    def zext(self, value, typ, name=""):
        a = _int(value)
        if a is not None and isinstance(typ, ir.IntType):
            return _const(typ, a & ((1 << value.type.width) - 1))
        return super().zext(value, typ, name)


def _folding_binop(op: str):
    def method(self, lhs, rhs, name="", flags=()):
        return self._binop(op, lhs, rhs, name, flags)

    method.__name__ = method.__qualname__ = op
    return method


for _op in _BINOPS:  # add, sub, mul, and_, or_, xor: each folds through FoldingBuilder._binop
    setattr(FoldingBuilder, _op, _folding_binop(_op))

"""FoldingBuilder (backend/folding_builder.py) computes what LLVM computes: every folded op is checked
against the same op emitted by llvmlite's plain IRBuilder, compiled and run by LLVM."""

from __future__ import annotations

import ctypes
import itertools

import llvmlite.binding as llvm
import pytest
from llvmlite import ir

from triton_nmp.backend.folding_builder import FoldingBuilder

WIDTHS = (1, 8, 32, 64)
BINOPS = ("add", "sub", "mul", "and_", "or_", "xor")
CMPS = ("==", "!=", "<", "<=", ">", ">=")


def _edge_values(width: int) -> list[int]:
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    return sorted(v for v in {0, 1, -1, 2, 7, lo, hi, lo + 1, hi - 1} if lo <= v <= hi)


def _llvm_results(cases) -> list[int]:
    """Each case (build, width, args): `f(args...) -> i64` = `build(builder, params)` sign-extended, emitted by
    llvmlite's plain IRBuilder; all of them compiled and run by LLVM (one JIT module for the lot)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    mod = ir.Module()
    for n, (build, width, args) in enumerate(cases):
        fn = ir.Function(mod, ir.FunctionType(ir.IntType(64), [ir.IntType(width)] * len(args)), f"f{n}")
        b = ir.IRBuilder(fn.append_basic_block())
        res = build(b, list(fn.args))
        b.ret(b.sext(res, ir.IntType(64)) if res.type.width < 64 else res)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(str(mod)), llvm.Target.from_default_triple()
                                        .create_target_machine())
    try:
        engine.finalize_object()
        out = []
        for n, (_, _, args) in enumerate(cases):
            proto = ctypes.CFUNCTYPE(ctypes.c_int64, *([ctypes.c_int64] * len(args)))
            out.append(proto(engine.get_function_address(f"f{n}"))(*args))
        return out
    finally:
        engine.close()


def _signed(x: int, width: int) -> int:
    x &= (1 << width) - 1
    return x - (1 << width) if x >> (width - 1) else x


def _folded(value: ir.Value, width: int) -> int:
    """A folded constant, sign-extended from `width` bits as the JIT-run functions return it."""
    assert isinstance(value, ir.Constant), f"not folded: {value}"
    return _signed(value.constant, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_constant_binops_and_compares_fold_to_what_llvm_computes(width):
    ty = ir.IntType(width)
    fb = FoldingBuilder(ir.Function(ir.Module(), ir.FunctionType(ir.VoidType(), []), "g").append_basic_block())
    cases, got = [], []
    for a, c in itertools.product(_edge_values(width), repeat=2):
        for op in BINOPS:
            cases.append((lambda b, p, op=op: getattr(b, op)(p[0], p[1]), width, (a, c)))
            got.append(_folded(getattr(fb, op)(ir.Constant(ty, a), ir.Constant(ty, c)), width))
        for kind, cmp in itertools.product(("icmp_signed", "icmp_unsigned"), CMPS):
            cases.append((lambda b, p, k=kind, cmp=cmp: getattr(b, k)(cmp, p[0], p[1]), width, (a, c)))
            got.append(_folded(getattr(fb, kind)(cmp, ir.Constant(ty, a), ir.Constant(ty, c)), 1))
    want = _llvm_results(cases)
    for (_, _, args), g, w in zip(cases, got, want):
        assert g == w, (width, args, g, w)
    assert not fb.block.instructions  # everything folded: nothing emitted


def test_casts_of_constants_fold_to_what_llvm_computes():
    fb = FoldingBuilder(ir.Function(ir.Module(), ir.FunctionType(ir.VoidType(), []), "g").append_basic_block())
    cases, got = [], []
    for width in (1, 8, 32):
        for a in _edge_values(64):
            for op, frm, to in (("trunc", 64, width), ("sext", width, 64), ("zext", width, 64)):
                x = _signed(a, frm)
                cases.append((lambda b, p, op=op, to=to: getattr(b, op)(p[0], ir.IntType(to)), frm, (x,)))
                got.append(_folded(getattr(fb, op)(ir.Constant(ir.IntType(frm), x), ir.IntType(to)), to))
    want = _llvm_results(cases)
    for (_, frm, args), g, w in zip(cases, got, want):
        assert g == w, (frm, args, g, w)


def test_identities_return_the_other_operand_and_others_are_emitted():
    fn = ir.Function(ir.Module(), ir.FunctionType(ir.VoidType(), [ir.IntType(64), ir.IntType(1)]), "g")
    x, flag = fn.args
    fb = FoldingBuilder(fn.append_basic_block())
    i64 = ir.IntType(64)
    zero, one, ones = ir.Constant(i64, 0), ir.Constant(i64, 1), ir.Constant(i64, -1)
    for got in (fb.add(x, zero), fb.add(zero, x), fb.sub(x, zero), fb.mul(x, one), fb.mul(one, x),
                fb.and_(x, ones), fb.or_(x, zero), fb.select(ir.Constant(ir.IntType(1), 1), x, zero),
                fb.select(ir.Constant(ir.IntType(1), 0), zero, x)):
        assert got is x
    assert _folded(fb.mul(x, zero), 64) == 0 and _folded(fb.and_(zero, x), 64) == 0
    assert not fb.block.instructions
    fb.add(x, one)
    fb.sub(zero, x)  # 0 - x is no identity
    fb.select(flag, x, zero)
    fb.xor(x, ones)
    assert [i.opname for i in fb.block.instructions] == ["add", "sub", "select", "xor"]

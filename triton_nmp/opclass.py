"""Instruction classes of tile compute ops: the contract between the execution trace and the timing model.

A vector-op record of the trace (kind VEC) names, besides its element count and dtype, the class of
the operation (word 5) and how many scratchpad element accesses the element loop it opens makes
(word 6; 0 when the op runs inside a fused loop that an earlier record of the same loop already
charged). The timing model charges a class at the target's `[ops]` rate (cycles per group of
`vector.fp32_lanes` elements; 64-bit result types at the `*64*` rates) and, on scalar cores, the loop's
accesses and bookkeeping at `issue.spm_access_cycles` / `issue.loop_cycles` per element.

On a vector unit every class costs the same (the neutral `[ops]` defaults), which is the model
without classes. On an in-order scalar core (UPMEM) multiplies, divides and all float arithmetic
are software routines tens to thousands of cycles long, so the class decides the time.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CLASS_FIELDS", "OP_ALU", "op_class", "classify", "region_class"]

# Class codes (trace word 5). 0 = unclassified, charged as integer ALU.
OP_ALU, OP_INT_MUL, OP_INT_DIV, OP_FLOAT_ADD, OP_FLOAT_MUL, OP_FLOAT_DIV, OP_FLOAT_SPECIAL = 1, 2, 3, 4, 5, 6, 7

#: code -> (TargetSpec attribute for 32-bit-or-narrower results, attribute for 64-bit results)
CLASS_FIELDS: dict[int, tuple[str, str]] = {
    0: ("ops_int_alu_cycles", "ops_int64_alu_cycles"),
    OP_ALU: ("ops_int_alu_cycles", "ops_int64_alu_cycles"),
    OP_INT_MUL: ("ops_int_mul_cycles", "ops_int64_mul_cycles"),
    OP_INT_DIV: ("ops_int_div_cycles", "ops_int64_div_cycles"),
    OP_FLOAT_ADD: ("ops_float_add_cycles", "ops_float64_add_cycles"),
    OP_FLOAT_MUL: ("ops_float_mul_cycles", "ops_float64_mul_cycles"),
    OP_FLOAT_DIV: ("ops_float_div_cycles", "ops_float64_div_cycles"),
    OP_FLOAT_SPECIAL: ("ops_float_special_cycles", "ops_float64_special_cycles"),
}

_INT_MUL = {"arith.muli", "tt.mulhiui", "arith.mulsi_extended", "arith.mului_extended"}
_INT_DIV = {"arith.divsi", "arith.divui", "arith.remsi", "arith.remui", "arith.ceildivsi", "arith.floordivsi"}
_FLOAT_MUL = {"arith.mulf", "math.fma"}
_FLOAT_DIV = {"arith.divf", "arith.remf", "math.sqrt", "math.rsqrt", "sqrt", "fmod", "remainder", "div_rn",
              "sqrt_rn", "rsqrt"}
_FLOAT_ADD = {"arith.addf", "arith.subf", "arith.negf", "arith.cmpf", "arith.maxnumf", "arith.minnumf",
              "arith.maximumf", "arith.minimumf", "math.absf", "tt.clampf", "arith.sitofp", "arith.uitofp",
              "arith.fptosi", "arith.fptoui", "arith.extf", "arith.truncf", "math.floor", "math.ceil",
              "math.trunc", "math.round", "math.roundeven", "math.copysign", "fabs", "floor", "ceil", "trunc",
              "round", "rint", "nearbyint", "copysign", "fdim", "fmax", "fmin"}
_RANK = (0, OP_ALU, OP_FLOAT_ADD, OP_INT_MUL, OP_FLOAT_MUL, OP_INT_DIV, OP_FLOAT_DIV, OP_FLOAT_SPECIAL)


def op_class(fn: str, operand_elems: list[str]) -> int:
    """Class code of an elementwise op `fn` (nmpir `fn` attribute or scalar op name) whose operands
    have the given element types (compares and casts are classed by what they read)."""
    if fn in _INT_MUL:
        return OP_INT_MUL
    if fn in _INT_DIV:
        return OP_INT_DIV
    if fn in _FLOAT_MUL:
        return OP_FLOAT_MUL
    if fn in _FLOAT_DIV:
        return OP_FLOAT_DIV
    if fn in _FLOAT_ADD:
        return OP_FLOAT_ADD
    if fn.startswith("math.") or (fn and "." not in fn) or fn == "tt.extern_elementwise":
        return OP_FLOAT_SPECIAL  # exp, log, trigonometric, pow, erf, libdevice calls
    return OP_ALU  # integer arithmetic, logic, shifts, compares, select (moves bits of any type), casts


def classify(op: Any) -> int:
    """Class of an nmpir op: a tile op `nmp.vec` by its `fn`, a scalar op by its name."""
    fn = op.attrs.get("fn", "") if op.name == "nmp.vec" else op.name
    return op_class(fn, [o.type.elem for o in op.operands])


def region_class(block: Any) -> int:
    """Class of a reduce/scan combine region: its most expensive op (one class per trace record)."""
    best = OP_ALU
    for op in block.ops:
        if op.results:
            c = classify(op)
            if _RANK.index(c) > _RANK.index(best):
                best = c
    return best

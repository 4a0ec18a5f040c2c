"""Triton's scalar types as the fuzzer needs them: names, torch twins, Triton's promotion rules.

The promotion functions restate `triton/language/semantic.py` (`computation_type_impl`,
`integer_promote_impl`) for the cases the generator emits, so the reference evaluator computes in
the type Triton computes in. A wrong rule here shows up as a disagreement between the torch oracle
and the interpreter, never silently.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DType:
    name: str  # Triton's name: int8, uint16, float16, bfloat16, int1 ...
    kind: str  # "bool" | "uint" | "int" | "float"
    bits: int
    torch: torch.dtype  # the tensor dtype that holds it (unsigned: the torch uint type)

    @property
    def tl(self) -> str:
        return f"tl.{self.name}"

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def signed(self) -> bool:
        return self.kind == "int"

    @property
    def mantissa(self) -> int:
        """Significand bits including the implicit one (floats)."""
        return {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53, "float8e5": 3, "float8e4nv": 4}[self.name]

    @property
    def unit_roundoff(self) -> float:
        return 2.0 ** -self.mantissa

    @property
    def int_range(self) -> tuple[int, int]:
        if self.kind == "uint" or self.kind == "bool":
            return 0, 2 ** self.bits - 1
        return -(2 ** (self.bits - 1)), 2 ** (self.bits - 1) - 1


_ALL = [
    DType("int1", "bool", 1, torch.bool),
    DType("int8", "int", 8, torch.int8), DType("int16", "int", 16, torch.int16),
    DType("int32", "int", 32, torch.int32), DType("int64", "int", 64, torch.int64),
    DType("uint8", "uint", 8, torch.uint8), DType("uint16", "uint", 16, torch.uint16),
    DType("uint32", "uint", 32, torch.uint32), DType("uint64", "uint", 64, torch.uint64),
    DType("float16", "float", 16, torch.float16), DType("bfloat16", "float", 16, torch.bfloat16),
    DType("float32", "float", 32, torch.float32), DType("float64", "float", 64, torch.float64),
    DType("float8e5", "float", 8, torch.float8_e5m2), DType("float8e4nv", "float", 8, torch.float8_e4m3fn),
]
DTYPES: dict[str, DType] = {d.name: d for d in _ALL}
INTS = [d for d in _ALL if d.kind == "int"]
UINTS = [d for d in _ALL if d.kind == "uint"]
FLOATS = [d for d in _ALL if d.kind == "float"]
FP8 = ("float8e5", "float8e4nv")  # generated only as tl.dot operands
BOOL = DTYPES["int1"]
F32 = DTYPES["float32"]
I32 = DTYPES["int32"]
I64 = DTYPES["int64"]

_KIND_ORDER = {"bool": 0, "uint": 1, "int": 1, "float": 2}  # tl.dtype.KIND: bool < integral < floating


def dt(name: str) -> DType:
    return DTYPES[name]


def integer_promote(a: DType, b: DType) -> DType:
    """Triton's integer promotion: same signedness -> wider; else the unsigned one if at least as wide."""
    if a.kind == "bool" and b.kind == "bool":
        return BOOL
    if a.kind == "bool":
        return b
    if b.kind == "bool":
        return a
    if a.signed == b.signed:
        return a if a.bits >= b.bits else b
    u, s = (a, b) if not a.signed else (b, a)
    return u if u.bits >= s.bits else s


def computation_type(a: DType, b: DType, div_or_mod: bool = False, a_scalar: bool = False,
                     b_scalar: bool = False) -> DType:
    """The type a binary arithmetic op computes in (`semantic.computation_type_impl`). A Python scalar
    of a lower or equal kind (bool < integer < float) does not take part in the promotion."""
    if a_scalar != b_scalar:
        s, t = (a, b) if a_scalar else (b, a)
        if _KIND_ORDER[s.kind] <= _KIND_ORDER[t.kind]:
            a = b = t
    names = (a.name, b.name)
    if "float64" in names:
        return DTYPES["float64"]
    if div_or_mod and (a.is_float or b.is_float):
        return F32
    if "float32" in names:
        return F32
    if "float16" in names:
        return DTYPES["float16"]
    if a.name == "bfloat16" and b.name == "bfloat16":
        return DTYPES["bfloat16"]
    if "bfloat16" in names:
        return F32
    if div_or_mod and a.signed != b.signed:  # int1 counts as unsigned
        raise TypeError(f"/, // and % need the same signedness: {a.name}, {b.name}")
    return integer_promote(a, b)


def scalar_type(value: int | float | bool) -> DType:
    """The type Triton gives a Python scalar (`semantic.to_tensor_type`)."""
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, float):
        return F32
    if -(2 ** 31) <= value < 2 ** 31:
        return I32
    if 2 ** 31 <= value < 2 ** 32:
        return DTYPES["uint32"]
    if -(2 ** 63) <= value < 2 ** 63:
        return I64
    return DTYPES["uint64"]

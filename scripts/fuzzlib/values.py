"""Reference values: a torch tensor with Triton's semantics plus what is not determined about it.

`RV.v` holds the value: floats in their torch dtype, every integer type in int64 (unsigned ones as
their value, uint64 as its bit pattern, wrapped to the type's width after each op), bools as bool.
`RV.err` bounds, per element, how far a correct implementation may be from `v` (float results only;
None means exact); `RV.unc` marks elements no implementation is bound to (a comparison or a float ->
int conversion within the error of its threshold, an out-of-range conversion): the oracle does not
compare them and counts them instead.

Error allowances (the tolerances of the fuzzer, justified here once):
* rounding: a result computed from inputs that may already differ rounds to a neighbour, so every
  inexact step adds one ulp of the result type (`ulp_bound`, 2u|x| + the smallest subnormal);
* libm: exp/exp2/log/log2/sin/cos/erf/rsqrt differ between libm, Sleef (torch) and our inline exp by
  up to 1 ulp each, so 2 ulps between two of them (`LIBM_ULPS`); sqrt 1;
* reassociation: a sum of n terms in any order is within (n - 1) u sum|x| of the exact sum, so two
  orders are within 2 (n - 1) u sum|x| (u of the accumulator: fp32 for fp16/bf16/fp32, fp64 for fp64;
  of the element type for a user `a + b` combine, which may round each step);
* propagation: first-order bounds from each op's derivative (products: |a| eb + |b| ea + ea eb).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .dtypes import DType, dt

LIBM_ULPS = {"exp": 2, "exp2": 2, "log": 2, "log2": 2, "sin": 2, "cos": 2, "erf": 2, "rsqrt": 2, "sqrt": 1,
             "sqrt_rn": 0, "sigmoid": 4, "floor": 0, "ceil": 0}
_TINY = {"float16": 2.0 ** -24, "bfloat16": 2.0 ** -133, "float32": 2.0 ** -149, "float64": 2.0 ** -1074,
         "float8e5": 2.0 ** -16, "float8e4nv": 2.0 ** -9}
_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": 3.4028234663852886e38,
        "float64": 1.7976931348623157e308, "float8e5": 57344.0, "float8e4nv": 448.0}


@dataclass
class RV:
    v: torch.Tensor
    dtype: DType
    err: torch.Tensor | None = None
    unc: torch.Tensor | None = None

    @property
    def shape(self):
        return self.v.shape


def storage_dtype(d: DType) -> torch.dtype:
    if d.kind == "bool":
        return torch.bool
    if d.is_int:
        return torch.int64
    return d.torch


def wrap(x: torch.Tensor, d: DType) -> torch.Tensor:
    """An int64 result reduced to the width of `d` (two's complement wrap-around)."""
    if d.kind == "bool":
        return x != 0
    if d.bits == 64:
        return x
    if d.kind == "uint":
        return x & ((1 << d.bits) - 1)
    return x.to({8: torch.int8, 16: torch.int16, 32: torch.int32}[d.bits]).to(torch.int64)


def as_signed_order(x: torch.Tensor, d: DType) -> torch.Tensor:
    """int64 values that compare like the type's values (uint64: flip the sign bit)."""
    if d.kind == "uint" and d.bits == 64:
        return x ^ torch.iinfo(torch.int64).min
    return x


def ulp_bound(x: torch.Tensor, dtype: str) -> torch.Tensor:
    d = dt(dtype)
    return x.double().abs() * (2.0 * d.unit_roundoff) + _TINY[dtype]


def max_finite(dtype: str) -> float:
    return _MAX[dtype]


def or_unc(*parts: torch.Tensor | None) -> torch.Tensor | None:
    out = None
    for p in parts:
        if p is None:
            continue
        out = p if out is None else (out | p)
    return out


def add_err(*parts: torch.Tensor | None) -> torch.Tensor | None:
    out = None
    for p in parts:
        if p is None:
            continue
        out = p if out is None else out + p
    return out


def from_tensor(t: torch.Tensor, d: DType) -> torch.Tensor:
    """A kernel's tensor (any torch dtype, unsigned included) in the reference representation."""
    if d.kind == "bool":
        return t.to(torch.bool)
    if d.is_int:
        if d.kind == "uint" and d.bits == 64:
            return t.view(torch.int64)
        return t.to(torch.int64)
    return t


def to_tensor(v: torch.Tensor, d: DType) -> torch.Tensor:
    """The reference representation back in the kernel's torch dtype."""
    if d.kind == "uint" and d.bits == 64:
        return v.view(torch.uint64)
    return v.to(d.torch)

"""User combine functions for `tl.reduce` / `tl.associative_scan`: Triton source and torch semantics.

Each function is associative (Triton requires it) and is emitted at module level in the generated
kernel file. `fold`/`scan` give the reference result along an axis with torch; `order_dependent`
says whether the result may differ by reassociation (float addition), which the oracle's error bound
then covers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .dtypes import I32, DType


@dataclass(frozen=True)
class CombineFn:
    name: str
    source: str
    kinds: tuple[str, ...]  # dtype kinds it accepts
    pair: bool = False  # combines (value, index) pairs: tl.reduce((x, idx), axis, fn)[1]
    order_dependent: bool = False
    scan_ok: bool = True
    reduce_ok: bool = True
    fold: Callable | None = None  # (tensor, axis) -> tensor, computed in the value's dtype
    cumulative: Callable | None = None  # (tensor, axis) -> tensor
    ordered: bool = False  # compares values: uint64 (int64 bit patterns) must be compared as unsigned

    def check(self, d: DType) -> None:
        if d.kind not in self.kinds:
            raise TypeError(f"combine {self.name} on {d.name}")

    def result_dtype(self, d: DType) -> DType:
        return I32 if self.pair else d


def _first(x: torch.Tensor, axis: int) -> torch.Tensor:
    return x.select(axis, 0)


def _last(x: torch.Tensor, axis: int) -> torch.Tensor:
    return x.select(axis, x.shape[axis] - 1)


def _cum_first(x: torch.Tensor, axis: int) -> torch.Tensor:
    return x.select(axis, 0).unsqueeze(axis).expand_as(x).clone()


def _bit_or_fold(x: torch.Tensor, axis: int) -> torch.Tensor:
    acc = x.select(axis, 0).clone()
    for k in range(1, x.shape[axis]):
        acc = acc | x.select(axis, k)
    return acc


def _bit_or_cum(x: torch.Tensor, axis: int) -> torch.Tensor:
    out = x.clone()
    for k in range(1, x.shape[axis]):
        out.select(axis, k).copy_(out.select(axis, k - 1) | x.select(axis, k))
    return out


def nan_ignoring(x: torch.Tensor, axis: int, is_max: bool) -> torch.Tensor:
    """max/min along an axis as tl.maximum/minimum combine (maxnum/minnum): NaN only if all are NaN."""
    if not x.dtype.is_floating_point:
        return x.amax(axis) if is_max else x.amin(axis)
    fill = float("-inf") if is_max else float("inf")
    r = torch.where(torch.isnan(x), torch.full_like(x, fill), x)
    r = r.amax(axis) if is_max else r.amin(axis)
    return torch.where(torch.isnan(x).all(axis), torch.full_like(r, float("nan")), r)


def _max_fold(x: torch.Tensor, axis: int) -> torch.Tensor:
    return nan_ignoring(x, axis, True)


def _max_cum(x: torch.Tensor, axis: int) -> torch.Tensor:
    out = x.clone()
    for k in range(1, x.shape[axis]):
        out.select(axis, k).copy_(torch.fmax(out.select(axis, k - 1), x.select(axis, k)))
    return out


def _first_argmax(x: torch.Tensor, axis: int) -> torch.Tensor:
    """Index of the first maximum (the combine below keeps the smaller index on ties)."""
    n = x.shape[axis]
    m = x.amax(axis, keepdim=True)
    idx = torch.arange(n).view([-1 if k == axis else 1 for k in range(x.dim())]).expand_as(x)
    return torch.where(x == m, idx, n).amin(axis).to(torch.int32)


FUNCTIONS: dict[str, CombineFn] = {f.name: f for f in [
    CombineFn("comb_add", "@triton.jit\ndef comb_add(a, b):\n    return a + b\n", ("int", "uint", "float"),
              order_dependent=True),
    CombineFn("comb_max", "@triton.jit\ndef comb_max(a, b):\n    return tl.maximum(a, b)\n",
              ("int", "uint", "float"), fold=_max_fold, cumulative=_max_cum, ordered=True),
    CombineFn("comb_or", "@triton.jit\ndef comb_or(a, b):\n    return a | b\n", ("int", "uint"),
              fold=_bit_or_fold, cumulative=_bit_or_cum),
    CombineFn("comb_first", "@triton.jit\ndef comb_first(a, b):\n    return a\n", ("int", "uint", "float"),
              fold=_first, cumulative=_cum_first),
    CombineFn("comb_last", "@triton.jit\ndef comb_last(a, b):\n    return b\n", ("int", "uint", "float"),
              fold=_last, cumulative=lambda x, axis: x.clone()),
    CombineFn("comb_argmax",
              "@triton.jit\ndef comb_argmax(v0, i0, v1, i1):\n"
              "    take0 = (v0 > v1) | ((v0 == v1) & (i0 < i1))\n"
              "    return tl.where(take0, v0, v1), tl.where(take0, i0, i1)\n",
              ("int", "uint", "float"), pair=True, scan_ok=False, fold=_first_argmax, ordered=True),
]}


def get(name: str) -> CombineFn:
    if name not in FUNCTIONS:
        raise TypeError(f"unknown combine function {name}")
    return FUNCTIONS[name]

"""Piecewise-affine accesses: `x // d` and `x % d` on aligned tiles become strided DMA descriptors.

Inductor flattens N-D indexing into one block index and recovers coordinates with integer division
and remainder by constants: `x0 = xindex % 64`, `x1 = xindex // 64`, then loads `in + (x0 + 256*x1)`.
That is not affine in the tile index, so `AffineAnalysis` answers a run-time index (a gather). But when
the block is aligned it is affine piecewise, one piece per row: read each tile dimension j of size n
as a mixed-radix number j = sum_k digit_k * R_k (digit k in [0, size_k), R_k the product of the sizes
below it); `(off + j) // 64` with 64 | n and 64 | off is off/64 + digit_1 and `(off + j) % 64` is
digit_0. The access is then affine in the digits: a DMA descriptor over the tile reshaped to the digits
(row major, so the same elements in the same order), viewed back to the tile's shape.

A `SplitForm` is `root + offset + sum_d sum_k digit_{d,k} * stride_{d,k}`. Division and remainder by a
positive constant c are exact when every value is non-negative (Triton's `//` and `%` truncate; they
agree with floor division only there) and the digits split into high ones (stride a multiple of c:
they move the quotient only) and low ones whose span L (sum of (size - 1) * stride, plus one) fits
below c with the offset a multiple of a divisor g >= L of c (so no low sum carries into the
quotient). Alignment comes from constants (constexpr block sizes), sums and products of them with
program ids and loop counters, and Triton's `tt.divisibility` of scalar arguments. Anything else is
answered with None and the access stays on today's ladder (row gather, element gather).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .access import Affine, AffineAnalysis, MaskBox, MemoisedAnalysis, SExpr, nonneg_sexpr, s_add, s_mul, s_sub
from .ir import Op, Value

Digits = tuple[tuple[int, SExpr], ...]  # (size, stride) per digit, innermost first; sizes multiply to the dim


@dataclass(frozen=True)
class SplitForm:
    """`root` + offset + sum over dims d and digits k of digit_{d,k} * stride_{d,k} (bytes for pointers)."""

    root: Value | None
    offset: SExpr
    dims: tuple[Digits, ...]

    @property
    def is_uniform(self) -> bool:
        return all(s == 0 for dg in self.dims for _, s in dg)

    @property
    def shape(self) -> tuple[int, ...]:
        """The refined tile: per dimension its digits, outermost first (the tile's row-major order)."""
        return tuple(n for dg in self.dims for n, _ in reversed(dg))

    @property
    def strides(self) -> tuple[SExpr, ...]:
        return tuple(s for dg in self.dims for _, s in reversed(dg))

    @property
    def is_split(self) -> bool:
        return any(len(dg) > 1 for dg in self.dims)


def _def(v: Value) -> Op | None:
    return v.owner if isinstance(v.owner, Op) else None


def _radices(dg: Digits) -> list[int]:
    out, r = [], 1
    for n, _ in dg:
        out.append(r)
        r *= n
    return out


def _refine(dg: Digits, radix: int) -> Digits | None:
    """The digits with a boundary at `radix` (a product of the sizes below it), None if it cuts a digit
    unevenly."""
    out, r = [], 1
    for n, s in dg:
        if r < radix < r * n:
            if radix % r or (r * n) % radix:
                return None
            lo = radix // r
            out += [(lo, s), (n // lo, s_mul(s, lo))]
        else:
            out.append((n, s))
        r *= n
    return tuple(out)


def _split_at(dg: Digits, c: int) -> Digits:
    """Cut every digit whose values cross a multiple of c (stride s < c, c = s * k, k | size) into a low
    digit of k values (span < c) and a high one (stride c)."""
    r = 1
    for n, s in dg:
        if isinstance(s, int) and 0 < s < c and c % s == 0 and n * s > c and n % (c // s) == 0:
            return _split_at(_refine(dg, r * (c // s)), c)
        r *= n
    return dg


def _canonical(dg: Digits) -> Digits:
    """Merge a digit into the one below when it continues it (stride = lower stride * lower size)."""
    out: list[tuple[int, SExpr]] = []
    for n, s in dg:
        if n == 1 and out:
            continue
        if out and (out[-1][0] == 1 or s == s_mul(out[-1][1], out[-1][0])):
            n0, s0 = out.pop()
            s = s if n0 == 1 else s0
            n = n * n0
        out.append((n, s))
    return tuple(out)


def _align(a: Digits, b: Digits) -> tuple[Digits, Digits] | None:
    for r in sorted(set(_radices(a)) | set(_radices(b))):
        a, b = _refine(a, r), _refine(b, r)
        if a is None or b is None:
            return None
    return a, b


def _combine(x: SplitForm, y: SplitForm, f) -> SplitForm | None:
    dims = []
    for a, b in zip(x.dims, y.dims):
        ab = _align(a, b)
        if ab is None:
            return None
        dims.append(_canonical(tuple((n, f(s, t)) for (n, s), (_, t) in zip(*ab))))
    return SplitForm(x.root or y.root, f(x.offset, y.offset), tuple(dims))


def divisible(e: SExpr, g: int, depth: int = 0) -> bool:
    """Whether the scalar expression `e` is provably a multiple of g."""
    if g == 1:
        return True
    if isinstance(e, bool) or e is None or depth > 24:
        return False
    if isinstance(e, int):
        return e % g == 0
    kind = e[0]
    if kind == "val":
        return divisible_value(e[1], g, depth + 1)
    if kind in ("add", "sub"):
        return divisible(e[1], g, depth + 1) and divisible(e[2], g, depth + 1)
    if kind == "div" and isinstance(e[2], int) and divisible(e[1], e[2], depth + 1):  # an exact quotient
        return divisible(e[1], g * e[2], depth + 1)
    if kind == "mul":
        a, b = e[1], e[2]
        if isinstance(a, int):
            return divisible(b, g // math.gcd(a, g), depth + 1)
        if isinstance(b, int):
            return divisible(a, g // math.gcd(b, g), depth + 1)
        return divisible(a, g, depth + 1) or divisible(b, g, depth + 1)
    return False


def divisible_value(v: Value, g: int, depth: int = 0) -> bool:
    """Whether the TTIR integer scalar `v` is provably a multiple of g: constants, sums and products of
    multiples, and arguments Triton specialised as divisible (`tt.divisibility`, multiples of 16)."""
    op = _def(v)
    if op is None:
        div = getattr(v, "attrs", {}).get("tt.divisibility")
        return isinstance(div, int) and div % g == 0
    name = op.name
    if name == "arith.constant":
        val = op.attrs.get("value")
        return isinstance(val, int) and not isinstance(val, bool) and val % g == 0
    if name in ("arith.extsi", "arith.extui", "arith.index_cast"):
        return divisible_value(op.operands[0], g, depth + 1)
    if name in ("arith.addi", "arith.subi"):
        return all(divisible_value(o, g, depth + 1) for o in op.operands)
    if name == "arith.muli":
        a, b = op.operands
        return divisible(("mul", ("val", a), ("val", b)), g, depth + 1) or any(
            divisible_value(x, g // math.gcd(_const(y), g), depth + 1) for x, y in ((a, b), (b, a)) if _const(y))
    return False


def _const(v: Value) -> int:
    op = _def(v)
    if op is not None and op.name == "arith.constant":
        val = op.attrs.get("value")
        if isinstance(val, int) and not isinstance(val, bool):
            return val
    return 0


class SplitAnalysis(MemoisedAnalysis):
    """Split forms of integer and pointer tensors; built on an `AffineAnalysis` (its forms without a
    run-time index are split forms with one digit per dimension) and memoised per value."""

    def __init__(self, affine: AffineAnalysis, loops: dict[int, Op]):
        self.affine = affine
        self.loops = loops
        self.memo: dict[int, SplitForm | None] = {}

    def _from_affine(self, form: Affine | None, shape: tuple[int, ...]) -> SplitForm | None:
        if form is None or form.index is not None:
            return None
        return SplitForm(form.root, form.offset, tuple(((n, s),) for n, s in zip(shape, form.strides)))

    def _compute(self, v: Value) -> SplitForm | None:
        ty = v.type
        shape = ty.shape if ty.is_tensor else ()
        base = self._from_affine(self.affine(v), shape)
        if base is not None or not ty.is_tensor or not (ty.is_int or ty.is_ptr) or ty.elem == "i1":
            return base
        op = _def(v)
        if op is None:
            return None
        name = op.name
        srcs = [self(o) for o in op.operands] if name not in ("arith.select", "arith.cmpi") else []
        if name in ("tt.splat",):
            return None if srcs[0] is None else SplitForm(srcs[0].root, srcs[0].offset, tuple(((n, 0),) for n in shape))
        if name == "tt.broadcast":
            src = srcs[0]
            if src is None:
                return None
            in_shape = op.operands[0].type.shape
            return SplitForm(src.root, src.offset, tuple(((n, 0),) if d_in == 1 else dg
                                                         for d_in, n, dg in zip(in_shape, shape, src.dims)))
        if name == "tt.expand_dims":
            src = srcs[0]
            if src is None:
                return None
            dims = list(src.dims)
            dims.insert(int(op.attrs["axis"]), ((1, 0),))
            return SplitForm(src.root, src.offset, tuple(dims))
        if name in ("arith.extsi", "arith.extui", "arith.trunci"):
            return srcs[0]
        if name == "tt.addptr":
            base_f, off = srcs
            if base_f is None or off is None or base_f.root is None or off.root is not None:
                return None
            size = ty.pointee_bytes
            scaled = SplitForm(None, s_mul(off.offset, size), tuple(tuple((n, s_mul(s, size)) for n, s in dg)
                                                                    for dg in off.dims))
            return _combine(base_f, scaled, s_add)
        if name in ("arith.addi", "arith.subi"):
            a, b = srcs
            if a is None or b is None or a.root is not None or b.root is not None:
                return None
            return _combine(a, b, s_add if name == "arith.addi" else s_sub)
        if name == "arith.muli":
            a, b = srcs
            if a is None or b is None or a.root is not None or b.root is not None:
                return None
            if a.is_uniform:
                a, b = b, a
            if not b.is_uniform:
                return None
            k = b.offset
            return SplitForm(None, s_mul(a.offset, k), tuple(tuple((n, s_mul(s, k)) for n, s in dg) for dg in a.dims))
        if name in ("arith.divsi", "arith.remsi", "arith.divui", "arith.remui"):
            a, c = srcs
            if a is None or c is None or a.root is not None or not c.is_uniform or not isinstance(c.offset, int):
                return None
            return self._divmod(a, c.offset, name.startswith("arith.div"))
        if name == "arith.select":
            return self._select(op, shape)
        return None

    def _divmod(self, x: SplitForm, c: int, quotient: bool) -> SplitForm | None:
        """x // c or x % c when exact (see the module docstring)."""
        if c <= 0 or not nonneg_sexpr(x.offset, self.loops):
            return None
        dims = []
        low_span = 1
        for dg in x.dims:
            if any(not isinstance(s, int) or s < 0 for _, s in dg):
                return None
            dg = _split_at(dg, c)
            out = []
            for n, s in dg:
                if s % c == 0:
                    out.append((n, s // c if quotient else 0))
                else:
                    low_span += (n - 1) * s
                    out.append((n, 0 if quotient else s))
            dims.append(_canonical(tuple(out)))
        g = next((g for g in range(low_span, c + 1) if c % g == 0), None)
        if g is None or not divisible(x.offset, g):
            return None
        if isinstance(x.offset, int):
            offset = x.offset // c if quotient else x.offset % c
        elif divisible(x.offset, c):
            offset = ("div", x.offset, c) if quotient else 0
        else:
            offset = ("div" if quotient else "rem", x.offset, c)
        return SplitForm(None, offset, tuple(dims))

    def _select(self, op: Op, shape: tuple[int, ...]) -> SplitForm | None:
        """`where(c, a, b)` of uniform integer tiles (Inductor's negative-index wrap of a loaded position:
        `where(i < 0, i + n, i)` of a broadcast scalar) is a uniform choice between scalars."""
        cond = self._uniform_cond(op.operands[0])
        a, b = self(op.operands[1]), self(op.operands[2])
        if cond is None or a is None or b is None or a.root or b.root or not a.is_uniform or not b.is_uniform:
            return None
        return SplitForm(None, ("sel", cond, a.offset, b.offset), tuple(((n, 0),) for n in shape))

    def _uniform_cond(self, v: Value) -> SExpr | None:
        op = _def(v)
        if op is None:
            return None
        if op.name == "tt.splat":
            return ("i1", op.operands[0])
        if op.name == "arith.cmpi" and op.attrs["_words"][0] in ("slt", "sle", "sgt", "sge", "eq", "ne"):
            a, b = self(op.operands[0]), self(op.operands[1])
            if a is None or b is None or a.root or b.root or not a.is_uniform or not b.is_uniform:
                return None
            return ("cmp", op.attrs["_words"][0], a.offset, b.offset)
        return None


def split_mask(box: MaskBox, form: SplitForm) -> tuple[SExpr | None, ...] | None:
    """The bounds of a rectangular mask (bounds per tile dimension) on the refined tile of `form`: a
    dimension cut into digits keeps a box when its bound is a multiple of its outermost digit's radix
    (a whole number of rows), which then bounds that digit; the inner digits are whole."""
    bounds: list[SExpr | None] = []
    for b, dg in zip(box.bounds, form.dims):
        inner = [None] * (len(dg) - 1)
        if b is None or len(dg) == 1:
            bounds += [b] + inner
            continue
        radix = _radices(dg)[-1]
        if isinstance(b, int):
            if b % radix:
                return None
            bounds += [b // radix] + inner
        elif divisible(b, radix):
            bounds += [("div", b, radix)] + inner
        else:
            return None
    return tuple(bounds)

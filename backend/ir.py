"""The project's own SSA form, shared by the imported TTIR and the nmp tile dialect.

Triton's Python bindings cannot walk from a value to its defining op, so TTIR is imported from its
printed text into these classes (see `ttir_import`). The same classes carry `nmpir`: a dialect is
just a set of op names, which keeps every stage a plain function from one module to the next.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

INT_TYPES = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64}
FLOAT_TYPES = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64, "f8E4M3FN": 8, "f8E5M2": 8, "f8E4M3B11FNUZ": 8,
               "f8E4M3FNUZ": 8, "f8E5M2FNUZ": 8}


def scalar_bytes(elem: str | None) -> int:
    """Bytes of one element of the scalar type named `elem` in memory and in the scratchpad (i1 takes a
    byte), or 0 when `elem` names no int/float type (a pointee that is itself a pointer or a block)."""
    bits = INT_TYPES.get(elem or "") or FLOAT_TYPES.get(elem or "")
    return max(bits // 8, 1) if bits else 0



def row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a row-major tile of `shape` (the layout of every tile buffer)."""
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))

@dataclass(frozen=True)
class Ty:
    """A scalar or tensor type. `elem` is an int/float name or "ptr" (then `pointee` names the element)."""

    elem: str
    shape: tuple[int, ...] = ()
    pointee: str | None = None

    @property
    def is_tensor(self) -> bool:
        return bool(self.shape)

    @property
    def is_ptr(self) -> bool:
        return self.elem == "ptr"

    @property
    def is_int(self) -> bool:
        return self.elem in INT_TYPES

    @property
    def is_float(self) -> bool:
        return self.elem in FLOAT_TYPES

    @property
    def bits(self) -> int:
        if self.is_ptr:
            return 64
        return INT_TYPES.get(self.elem) or FLOAT_TYPES[self.elem]

    @property
    def elem_bytes(self) -> int:
        """Bytes of one element in memory and in the scratchpad (pointers are 8-byte addresses)."""
        return 8 if self.is_ptr else scalar_bytes(self.elem)

    @property
    def nbytes(self) -> int:
        """Bytes of the whole value (a tile's scratchpad buffer before alignment)."""
        return self.numel * self.elem_bytes

    @property
    def pointee_bytes(self) -> int:
        """Bytes of the element a pointer points to (the unit of `tt.addptr` offsets); 0 if not a scalar."""
        return scalar_bytes(self.pointee)

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def scalar(self) -> Ty:
        return Ty(self.elem, (), self.pointee)

    def with_shape(self, shape: tuple[int, ...]) -> Ty:
        return Ty(self.elem, tuple(shape), self.pointee)

    def with_elem(self, elem: str, pointee: str | None = None) -> Ty:
        return Ty(elem, self.shape, pointee)

    def __str__(self) -> str:
        base = f"!tt.ptr<{self.pointee}>" if self.is_ptr else self.elem
        if self.shape:
            return "tensor<" + "x".join(str(d) for d in self.shape) + "x" + base + ">"
        return base


@dataclass(frozen=True)
class Loc:
    """A source location: the Python file and line that produced an op."""

    file: str = ""
    line: int = 0
    col: int = 0

    def __str__(self) -> str:
        if not self.file:
            return "<unknown location>"
        return f"{self.file}:{self.line}:{self.col}"

    @property
    def known(self) -> bool:
        return bool(self.file)


UNKNOWN_LOC = Loc()


@dataclass(eq=False)
class Value:
    name: str
    type: Ty
    owner: Any = None  # the defining Op, or the Block for block arguments

    def __repr__(self) -> str:
        return f"%{self.name}:{self.type}"


@dataclass(eq=False)
class Block:
    args: list[Value] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)

    def add_arg(self, name: str, ty: Ty) -> Value:
        v = Value(name, ty, self)
        self.args.append(v)
        return v


@dataclass(eq=False)
class Region:
    blocks: list[Block] = field(default_factory=list)

    @property
    def block(self) -> Block:
        return self.blocks[0]


@dataclass(eq=False)
class Op:
    name: str
    operands: list[Value] = field(default_factory=list)
    results: list[Value] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    regions: list[Region] = field(default_factory=list)
    loc: Loc = UNKNOWN_LOC

    @property
    def result(self) -> Value:
        return self.results[0]

    def walk(self) -> Iterator[Op]:
        """Pre-order walk over this op and every op nested in its regions."""
        yield self
        for r in self.regions:
            for b in r.blocks:
                for op in b.ops:
                    yield from op.walk()


@dataclass(eq=False)
class Func:
    name: str
    args: list[Value]
    arg_locs: list[Loc]
    body: Block
    loc: Loc = UNKNOWN_LOC
    result_types: list[Ty] = field(default_factory=list)

    def walk(self) -> Iterator[Op]:
        for op in self.body.ops:
            yield from op.walk()


@dataclass(eq=False)
class Module:
    funcs: list[Func] = field(default_factory=list)

    @property
    def kernel(self) -> Func:
        return self.funcs[-1]


def clone_region(region: Region) -> Region:
    """A copy of `region` with new ops and values (the same names), for an op that needs a region like
    another op's: one Region object in two ops would define its values twice. Values defined outside
    the region are used as they are."""
    vmap: dict[int, Value] = {}

    def block(b: Block) -> Block:
        nb = Block()
        for a in b.args:
            vmap[id(a)] = nb.add_arg(a.name, a.type)
        for op in b.ops:
            new = Op(op.name, [vmap.get(id(o), o) for o in op.operands], [], dict(op.attrs),
                     [Region([block(x) for x in r.blocks]) for r in op.regions], op.loc)
            for r in op.results:
                vmap[id(r)] = Value(r.name, r.type, new)
                new.results.append(vmap[id(r)])
            nb.ops.append(new)
        return nb

    return Region([block(b) for b in region.blocks])


class Builder:
    """Appends new ops to `block` at source location `loc`; the one way passes create IR.

    Results are named by the caller, or `<prefix><n>` from a counter the builders of one pass can
    share (`counter=`), so the printed IR names every value uniquely and deterministically."""

    def __init__(self, block: Block | None = None, loc: Loc = UNKNOWN_LOC, prefix: str = "t",
                 counter: Iterator[int] | None = None):
        self.block = block if block is not None else Block()
        self.loc = loc
        self.prefix = prefix
        self.counter = counter if counter is not None else itertools.count()

    def op(self, name: str, operands: Sequence[Value] = (), result_types: Sequence[Ty] = (), attrs: dict | None = None,
           regions: Sequence[Region] = (), names: Sequence[str] | None = None, loc: Loc | None = None) -> Op:
        op = Op(name, list(operands), [], dict(attrs or {}), list(regions), self.loc if loc is None else loc)
        for i, t in enumerate(result_types):
            op.results.append(Value(names[i] if names else f"{self.prefix}{next(self.counter)}", t, op))
        self.block.ops.append(op)
        return op

    def const(self, value: Any, ty: Ty = Ty("i64"), name: str | None = None) -> Value:
        return self.op("arith.constant", [], [ty], {"value": value}, names=[name] if name else None).result

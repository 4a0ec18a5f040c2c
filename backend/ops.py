"""The nmpir op table: every op the tile dialect has, what it does to memory, and its operands by name.

Each `OpDef` says whether an op has effects beyond its results (dead-code elimination keeps it), ends a
block (`terminator`), may sit in a fused elementwise run (`fusable`) or end one (`ends_run`: gathers,
scatters and atomics, which touch memory element by element), works element by element (`elementwise`:
what strip-mining may split), or aliases its operand's buffer (`view`). Its `layout` names the
operands in order:

    name          one operand
    name[attr]    op.attrs[attr] operands (a DMA's strides and bounds: one per dimension of the tile)
    name?flag     one operand when op.attrs[flag] is true; `name?attr=value` when op.attrs[attr] == value
    name*         every remaining operand

`operands(op)` reads an op's operands by those names (`operands(dma).bounds`), `make_operands` lays
them out for a new op, and the verifier checks every op against the table, so no pass decodes
positions by hand and an op the table does not know is a compiler bug caught between passes.
Scalar ops keep their TTIR names (`arith.addi`, `math.exp`, ...): every elementwise function the
codegen implements is a scalar op with operands `args*`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .codegen_scalar import ELEMENTWISE_OPS
from .ir import Op, Value


@dataclass(frozen=True)
class Slot:
    """One entry of an operand layout."""

    name: str
    count: str = ""  # attribute holding the number of operands in this group
    when: tuple[str, Any] | None = None  # (attribute, value) that must hold for the operand to be present
    rest: bool = False  # every remaining operand

    @classmethod
    def parse(cls, text: str) -> Slot:
        if text.endswith("*"):
            return cls(text[:-1], rest=True)
        if text.endswith("]"):
            name, _, count = text[:-1].partition("[")
            return cls(name, count=count)
        if "?" in text:
            name, _, cond = text.partition("?")
            attr, eq, value = cond.partition("=")
            return cls(name, when=(attr, value if eq else True))
        return cls(text)

    def present(self, attrs: dict) -> bool:
        if self.when is None:
            return True
        attr, value = self.when
        return bool(attrs.get(attr)) if value is True else attrs.get(attr) == value


@dataclass(frozen=True)
class OpDef:
    name: str
    layout: str = ""
    effects: bool = False
    terminator: bool = False
    fusable: bool = False
    ends_run: bool = False
    elementwise: bool = False
    view: bool = False
    doc: str = ""
    slots: tuple[Slot, ...] = field(default=(), compare=False)
    count_attrs: tuple[tuple[str, str], ...] = field(default=(), compare=False)  # (attribute, group) of [attr] groups
    fixed_count: tuple[int, bool] | None = field(default=None, compare=False)  # operand_count when attrs do not matter

    def __post_init__(self) -> None:
        slots = tuple(Slot.parse(t) for t in self.layout.split())
        object.__setattr__(self, "slots", slots)
        object.__setattr__(self, "count_attrs", tuple((s.count, s.name) for s in slots if s.count))
        plain = all(not (s.count or s.when) for s in slots)  # the count never depends on attributes
        fixed = (sum(1 for s in slots if not s.rest), any(s.rest for s in slots)) if plain else None
        object.__setattr__(self, "fixed_count", fixed)

    def operand_count(self, attrs: dict) -> tuple[int, bool]:
        """The operand count the layout asks for under `attrs`, and whether it is a minimum (`*` group)."""
        if self.fixed_count is not None:
            return self.fixed_count
        n = 0
        for s in self.slots:
            if s.rest:
                return n, True
            if s.count:
                n += int(attrs[s.count])
            elif s.when is None or s.present(attrs):
                n += 1
        return n, False

    def positions(self, op: Op) -> tuple[dict[str, int | slice | None], int, bool]:
        """Where each named operand of `op` sits: index, slice (groups) or None (absent optional);
        plus the operand count the layout expects and whether that count is a minimum (a `*` group)."""
        at: dict[str, int | slice | None] = {}
        pos = 0
        for s in self.slots:
            if s.rest:
                at[s.name] = slice(pos, None)
                return at, pos, True
            if s.count:
                n = int(op.attrs[s.count])
                at[s.name] = slice(pos, pos + n)
                pos += n
            elif s.present(op.attrs):
                at[s.name] = pos
                pos += 1
            else:
                at[s.name] = None
        return at, pos, False


_DEFS = (
    # memory: DMA descriptors between an argument's banks and the scratchpad, and the element fallback
    OpDef("nmp.dma_load", "base offset strides[rank] bounds[rank] guard?guarded index?indexed other?has_other",
          elementwise=True,
          doc="structured DMA into a tile: base + offset + sum(index_d * strides[d]) bytes, valid box bounds; "
              "`indexed`: a row gather, dimension `index_axis` at the byte offsets of the 1-D tile `index`"),
    OpDef("nmp.dma_store", "base offset strides[rank] bounds[rank] guard?guarded index?indexed value", effects=True,
          elementwise=True, doc="structured DMA of a tile (or scalar) to memory"),
    OpDef("nmp.gather", "base offset?scale addrs mask?has_mask other?has_other", ends_run=True, elementwise=True,
          doc="element-by-element checked load; with `scale`: element i at base + offset + addrs[i] * scale "
              "bytes (`addrs` an i32/i64 offsets tile, `offset` an i64 scalar), else `addrs` is a pointer tile"),
    OpDef("nmp.scatter", "base offset?scale addrs value mask?has_mask", effects=True, ends_run=True,
          elementwise=True, doc="element-by-element checked store, addressed as `nmp.gather`"),
    OpDef("nmp.atomic", "base offset?scale addrs cmp?kind=cas value mask?has_mask", effects=True, ends_run=True,
          doc="element-by-element read-modify-write (attr kind), addressed as `nmp.gather`; results are the "
              "old values"),
    # tile compute
    OpDef("nmp.vec", "args*", fusable=True, elementwise=True, doc="elementwise function `fn` on the vector unit"),
    OpDef("nmp.splat", "value", fusable=True, elementwise=True, doc="a tile filled with a scalar"),
    OpDef("nmp.const", "", fusable=True, elementwise=True, doc="a tile filled with a constant"),
    OpDef("nmp.iota", "", elementwise=True, doc="start + index along `axis`"),
    OpDef("nmp.view", "source", view=True, doc="the source tile's buffer with another shape"),
    OpDef("nmp.slice", "source start", view=True,
          doc="rows [start, start + n) of the source along `axis` (every dimension before it of size 1: a "
              "contiguous piece of its buffer); a piece of a resident tile in an op staged in pieces"),
    OpDef("nmp.spill_area", "", doc="the program's spill area in its PU's own bank (`bytes` long): the base "
                                    "of the DMAs that move spilled tiles"),
    OpDef("nmp.broadcast", "source", fusable=True,
          doc="the source tile repeated along its size-1 dimensions; in a fused run it reads the source in place"),
    OpDef("nmp.transpose", "source"),
    OpDef("nmp.matmul", "a b acc", doc="2-D dot on the matrix unit: acc + a @ b"),
    OpDef("nmp.bmatmul", "a b acc", doc="batched (3-D) or f64 dot"),
    OpDef("nmp.reduce", "inputs*", doc="reduction along `axis` with the combine region"),
    OpDef("nmp.scan", "inputs*", doc="inclusive scan along `axis` with the combine region"),
    OpDef("nmp.join", "a b"),
    OpDef("nmp.split", "source"),
    OpDef("nmp.cat", "a b"),
    OpDef("nmp.tile_gather", "source index", doc="tl.gather: elements of a tile picked along `axis`"),
    OpDef("nmp.histogram", "input mask?has_mask"),
    OpDef("nmp.unsplat", "tile", doc="the single element of a one-element tile"),
    # scalars and program
    OpDef("nmp.program_id", ""),
    OpDef("nmp.num_programs", ""),
    OpDef("nmp.addptr", "ptr offset", doc="scalar pointer + offset * elem_bytes"),
    OpDef("arith.constant", ""),
    # debugging
    OpDef("nmp.assert", "cond", effects=True),
    OpDef("nmp.print", "args*", effects=True),
    OpDef("nmp.assume", "cond", effects=True),
    # control flow
    OpDef("nmp.return", "", effects=True),
    OpDef("nmp.yield", "values*", effects=True, terminator=True, doc="end of a reduce/scan combine region"),
    OpDef("scf.for", "lb ub step inits*"),
    OpDef("scf.if", "cond"),
    OpDef("scf.while", "inits*"),
    OpDef("scf.yield", "values*", effects=True, terminator=True),
    OpDef("scf.condition", "cond values*", effects=True, terminator=True),
)

OPS: dict[str, OpDef] = {d.name: d for d in _DEFS}
_SCALAR = OpDef("<scalar>", "args*", doc="a scalar elementwise op (TTIR name)")


def op_def(name: str) -> OpDef | None:
    """The table entry of an op name; None for a name nmpir does not have."""
    d = OPS.get(name)
    if d is None and name in ELEMENTWISE_OPS and name != "tt.addptr":
        return _SCALAR
    return d


SIDE_EFFECT_OPS = frozenset(n for n, d in OPS.items() if d.effects)
TERMINATORS = frozenset(n for n, d in OPS.items() if d.terminator)
FUSABLE_OPS = tuple(n for n, d in OPS.items() if d.fusable)
# Gathers, scatters and atomics touch memory one element at a time, so one may end a fused run whose
# ops compute its addresses: the pointer tile then lives in registers, not in the scratchpad.
FUSABLE_MEMORY_OPS = tuple(n for n, d in OPS.items() if d.ends_run)


class Operands:
    """An op's operands by the names of its layout: `Operands(op).strides` is a list, an absent optional
    operand is None. `values` views another list laid out like op's (e.g. its operands remapped)."""

    __slots__ = ("_name", "_values", "_at")

    def __init__(self, op: Op, values: list[Value] | None = None):
        d = op_def(op.name)
        if d is None:
            raise KeyError(f"no nmpir op '{op.name}'")
        self._name = op.name
        self._values = op.operands if values is None else values
        self._at = d.positions(op)[0]

    def __getattr__(self, name: str) -> Any:
        try:
            at = self._at[name]
        except KeyError:
            raise AttributeError(f"{self._name} has no operand '{name}'") from None
        if at is None:
            return None
        return list(self._values[at]) if isinstance(at, slice) else self._values[at]

    def after(self, name: str) -> list[Value]:
        """Every operand after the named one (a memory op's operands but its base argument)."""
        return list(self._values[_start(self._at[name]) + 1:])

    def replaced(self, **parts: Value | list[Value] | None) -> list[Value]:
        """The operand list with the named parts replaced (same layout, so the attributes still hold)."""
        out = list(self._values)
        for name, value in sorted(parts.items(), key=lambda kv: _start(self._at[kv[0]]), reverse=True):
            at = self._at[name]
            if isinstance(at, slice):
                out[at] = list(value)
            else:
                out[at] = value
        return out


def _start(at: int | slice | None) -> int:
    return at.start if isinstance(at, slice) else at


def operands(op: Op) -> Operands:
    return Operands(op)


def make_operands(name: str, attrs: dict, **parts: Value | list[Value] | None) -> list[Value]:
    """Operands of a new `name` op from named parts, in layout order (absent optionals skipped)."""
    out: list[Value] = []
    for s in OPS[name].slots:
        if s.rest or s.count:
            out.extend(parts.get(s.name) or [])
        elif s.present(attrs):
            out.append(parts[s.name])
    return out


def dma_address_operands(op: Op) -> list[Value]:
    """The operands a DMA's addresses and valid box are computed from (offset, strides, bounds, guard, and
    the row offsets of a row gather)."""
    d = operands(op)
    return [d.offset, *d.strides, *d.bounds] + [x for x in (d.guard, d.index) if x is not None]


def dma_tile_type(op: Op):
    """The type of the tile (or scalar) a DMA moves."""
    return op.result.type if op.name == "nmp.dma_load" else operands(op).value.type

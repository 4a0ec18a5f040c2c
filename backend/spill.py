"""Spilling, the last rung of legalization: tiles that do not fit live in the program's spill area in its
PU's own bank and move through the scratchpad by DMA.

Input: a kernel (nmpir, multi-buffering settled) whose scratchpad plan exceeds the budget even with
leaner buffers and strip-mining. Output: the same kernel where some buffers of the plan (a buffer is a
tile and the values that share it: a loop's accumulator with its in-place updates, views) live in slots
of a spill area (`nmp.spill_area`, the base of DMA descriptors like a kernel argument; trace records name
it `abi.SPILL_ARG` and the timing model charges its bytes to the executing PU's own bank):

- an op that reads a spilled tile first loads it from its slot, an op that writes one stores it to its
  slot afterwards ("staging"); the loaded copy lives only around the op;
- where even so an op's tiles do not fit, the op runs in pieces (an `scf.for` marked `spill_pieces`):
  a fused elementwise run (also one ending in a gather, scatter, atomic or a fused reduction), a DMA, a
  reduction and a dot's rows are exact piece by piece along one dimension; a reduction along that
  dimension carries its partial results from piece to piece. Pieces of resident tiles are views
  (`nmp.slice`), pieces of spilled ones move by DMA from their slot. An op with no piece-wise form (a
  transpose, a scan, a join, ...) is staged whole;
- a loop-carried spilled tile stays in its slot across iterations (it is no longer carried).

What spills and how finely ops are pieced is searched on the plan. At the peak, the staged op with the
most bytes there is split into twice as many pieces (no extra traffic), unless a buffer live there but
not used there frees more by spilling (the largest: a store and reloads elsewhere); when neither is
possible, a buffer used at the peak spills. A fit found so is then trimmed: spilled buffers go back to
the scratchpad and ops take fewer pieces while it still fits. The kernel is refused
(NMPScratchpadOverflowError naming why) when nothing at the peak can be spilled or pieced further, or
when the spill area does not fit the PU's bank.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field

from triton_nmp.errors import NMPScratchpadOverflowError

from .ir import Block, Builder, Func, Loc, Module, Op, Region, Ty, Value, clone_region, row_major
from .nmpir import fused_run_length
from .ops import FUSABLE_MEMORY_OPS, Operands, make_operands
from .scratchpad import Buffer, ScratchpadPlan, plan_scratchpad
from .stripmine_rows import _combine

I64 = Ty("i64")
AREA_TYPE = Ty("ptr", (), "i8")
_MAX_STEPS = 400
_ELEMENTWISE = {"nmp.vec", "nmp.splat", "nmp.const", "nmp.broadcast", "nmp.iota"}
_UNSPILLABLE_OWNERS = {"scf.if", "scf.while"}


@dataclass(frozen=True)
class SpilledTile:
    """A buffer that lives in the spill area: its tile, where it comes from and its slot."""

    name: str
    type: str
    nbytes: int
    loc: Loc
    slot: int

    def describe(self) -> str:
        return f"%{self.name}: {self.type} {self.nbytes} B ({self.loc})"


@dataclass
class SpillInfo:
    """What spilling did to a kernel: the spill area's size per program and the tiles in it."""

    area_bytes: int = 0
    tiles: list[SpilledTile] = field(default_factory=list)
    pieced_ops: int = 0  # ops staged in more than one piece

    def summary(self) -> str:
        lines = [f"// spill area: {self.area_bytes} bytes per program in the PU's own bank, {len(self.tiles)} "
                 f"tiles, {self.pieced_ops} ops staged in pieces"]
        for t in sorted(self.tiles, key=lambda t: t.slot):
            lines.append(f"//   [{t.slot:>8}, {t.slot + t.nbytes:>8})  {t.describe()}")
        return "\n".join(lines)


def _first_long_dim(shape: tuple[int, ...]) -> int | None:
    return next((d for d, n in enumerate(shape) if n > 1), None)


def _contiguous_along(shape: tuple[int, ...], axis: int) -> bool:
    return all(n == 1 for n in shape[:axis])


class _NeedSpill(Exception):
    """An op staged in pieces writes a resident tile the pieces cannot assemble (or reads one they cannot
    view): that tile's buffer (`root`, None if it has none) must spill too."""

    def __init__(self, root: int | None, unit: int):
        super().__init__(str(root))
        self.root, self.unit = root, unit


def _values_in_order(func: Func) -> list[Value]:
    out = list(func.args)
    for op in func.walk():
        out.extend(op.results)
        out.extend(a for r in op.regions for b in r.blocks for a in b.args)
    return out


@dataclass
class _State:
    spilled: set[int] = field(default_factory=set)  # canonical index of each spilled buffer's root value
    pieces: dict[int, int] = field(default_factory=dict)  # canonical index of a unit's first op -> pieces


@dataclass
class _Trial:
    module: Module
    plan: ScratchpadPlan
    unit_of: dict[int, int]  # id(new staging value) -> unit key
    unit_max: dict[int, int]  # unit key -> most pieces it can take (1: not pieceable)
    unit_name: dict[int, str]  # unit key -> its op and location, for the refusal
    resident: dict[int, int]  # id(value in the trial) -> canonical index of its original buffer root
    info: SpillInfo


class _Groups:
    """The buffers of the original plan by canonical value index: which root each value belongs to,
    the roots that may spill, and their slots in the spill area."""

    def __init__(self, func: Func, plan: ScratchpadPlan, align: int):
        values = _values_in_order(func)
        self.index = {id(v): k for k, v in enumerate(values)}
        self.values = values
        self.root_of: dict[int, int] = {}
        self.buffers: dict[int, Buffer] = {}
        for key, buf in plan.of_value.items():
            if key in self.index and id(buf.value) in self.index:
                root = self.index[id(buf.value)]
                self.root_of[self.index[key]] = root
                self.buffers[root] = buf
        self.parent = {id(b): op for op in func.walk() for r in op.regions for b in r.blocks}
        self.members: dict[int, list[int]] = {}
        for k, r in self.root_of.items():
            self.members.setdefault(r, []).append(k)
        self.unspillable = {r for r in self.buffers if not self._spillable(r)}
        self.align = align

    def _spillable(self, root: int) -> bool:
        for k in self.members[root]:
            v = self.values[k]
            owner = v.owner
            if isinstance(owner, Op) and owner.name in _UNSPILLABLE_OWNERS:
                return False
            if isinstance(owner, Block):
                parent = self.parent.get(id(owner))
                if parent is None or parent.name != "scf.for":
                    return False
        return True

    def slots(self, spilled: set[int]) -> tuple[dict[int, int], int]:
        """Slot offset per spilled root (first fit over the buffers' live ranges) and the area's size."""
        placed: list[tuple[int, int, Buffer]] = []
        slot: dict[int, int] = {}
        top = 0
        for root in sorted(spilled, key=lambda r: (self.buffers[r].start, -self.buffers[r].nbytes)):
            buf = self.buffers[root]
            size = -(-buf.nbytes // self.align) * self.align
            live = sorted((o, s) for o, s, b in placed if b.end >= buf.start and buf.end >= b.start)
            off = 0
            for o, s in live:
                if off + size <= o:
                    break
                off = max(off, o + s)
            slot[root] = off
            placed.append((off, size, buf))
            top = max(top, off + size)
        return slot, top


class _Rewriter:
    """Rewrites one copy of the kernel for a spill state (see the module docstring)."""

    def __init__(self, module: Module, groups: _Groups, state: _State):
        self.module = module
        self.func = module.kernel
        self.groups = groups
        self.state = state
        values = _values_in_order(self.func)
        self.canon = {id(v): k for k, v in enumerate(values)}
        ops = list(self.func.walk())
        self.op_canon = {id(op): k for k, op in enumerate(ops)}
        self.slot_of_root, self.area_bytes = groups.slots(state.spilled)
        self.uses: dict[int, int] = {}
        for op in ops:
            for o in op.operands:
                self.uses[id(o)] = self.uses.get(id(o), 0) + 1
        self.counter = itertools.count(1)
        # the area's op is built first (its result is the base of every spill DMA) and put at the kernel's
        # start only if a tile spills
        self.area_op = Builder(Block(), self.func.loc).op("nmp.spill_area", [], [AREA_TYPE], {"bytes": self.area_bytes},
                                                          names=["spill_area"])
        self.area = self.area_op.result
        self.unit_of: dict[int, int] = {}
        self.unit_max: dict[int, int] = {}
        self.unit_name: dict[int, str] = {}
        self.pieced = 0
        self.slot_alias: dict[int, Value] = {}  # a dropped view of a spilled tile -> its source
        self.remap: dict[int, Value] = {}  # a reduction's result -> its value after a loop of pieces
        self.hoisted: dict[int, Value] = {}  # a spilled tile read whole by every piece -> its loaded copy

    # -- which values spill, where -------------------------------------------------------------------
    def root(self, v: Value) -> int | None:
        v = self.slot_alias.get(id(v), v)
        k = self.canon.get(id(v))
        return None if k is None else self.groups.root_of.get(k)

    def spilled(self, v: Value) -> bool:
        if not v.type.is_tensor:
            return False
        r = self.root(v)
        return r is not None and r in self.state.spilled

    def slot(self, v: Value) -> int:
        return self.slot_of_root[self.root(v)]

    def resident_map(self) -> dict[int, int]:
        out = {}
        for key, k in self.canon.items():
            r = self.groups.root_of.get(k)
            if r is not None and r not in self.state.spilled:
                out[key] = r
        return out

    # -- building ------------------------------------------------------------------------------------
    def builder(self, block: Block, loc: Loc) -> Builder:
        return Builder(block, loc, "s", self.counter)

    def _dma(self, em: Builder, name: str, v: Value, offset: Value, ty: Ty, unit: int,
             value: Value | None = None) -> Value | None:
        """A DMA between the spill area and a tile of type `ty`, a box of the row-major tile `v` at byte
        `offset` of the area."""
        esize = ty.elem_bytes
        strides = [em.const(s * esize) for s in row_major(v.type.shape)]
        bounds = [em.const(n) for n in ty.shape]
        attrs = {"rank": len(ty.shape), "arg": "spill", "spill": True}
        ops = make_operands(name, attrs, base=self.area, offset=offset, strides=strides, bounds=bounds, value=value)
        op = em.op(name, ops, [ty] if name == "nmp.dma_load" else [], attrs)
        if name == "nmp.dma_load":
            self.unit_of[id(op.result)] = unit
            return op.result
        return None

    def load_whole(self, em: Builder, v: Value, unit: int) -> Value:
        return self._dma(em, "nmp.dma_load", v, em.const(self.slot(v)), v.type, unit)

    def store_whole(self, em: Builder, v: Value, tile: Value, unit: int) -> None:
        self._dma(em, "nmp.dma_store", v, em.const(self.slot(v)), v.type, unit, tile)

    def _piece_offset(self, em: Builder, v: Value, axis: int, start: Value) -> Value:
        row = v.type.elem_bytes * row_major(v.type.shape)[axis]
        shift = em.op("arith.muli", [start, em.const(row)], [I64]).result
        return em.op("arith.addi", [em.const(self.slot(v)), shift], [I64]).result

    def load_piece(self, em: Builder, v: Value, axis: int, start: Value, c: int, unit: int) -> Value:
        ty = v.type.with_shape(tuple(c if d == axis else n for d, n in enumerate(v.type.shape)))
        return self._dma(em, "nmp.dma_load", v, self._piece_offset(em, v, axis, start), ty, unit)

    def store_piece(self, em: Builder, v: Value, axis: int, start: Value, tile: Value, unit: int) -> None:
        self._dma(em, "nmp.dma_store", v, self._piece_offset(em, v, axis, start), tile.type, unit, tile)

    # -- the walk ------------------------------------------------------------------------------------
    def run(self) -> None:
        self.block(self.func.body)
        if self.state.spilled:
            self.func.body.ops.insert(0, self.area_op)

    def block(self, blk: Block) -> None:
        ops = list(blk.ops)
        out = Block(blk.args, [])
        i = 0
        while i < len(ops):
            n = fused_run_length(ops, i)
            self.unit(ops[i:i + n], out)
            i += n
        blk.ops[:] = out.ops

    def remapped(self, op: Op) -> None:
        if self.remap:
            for inner in op.walk():
                inner.operands = [self.remap.get(id(o), o) for o in inner.operands]

    def unit(self, unit: list[Op], out: Block) -> None:
        for op in unit:
            self.remapped(op)
        first = unit[0]
        key = self.op_canon[id(first)]
        em = self.builder(out, first.loc)
        if first.name == "nmp.view" and self.spilled(first.operands[0]):
            self.slot_alias[id(first.result)] = first.operands[0]
            return  # the view's tile is its source's slot, read with its own shape
        if first.name == "scf.for":
            self.for_loop(first, out, key)
            return
        for op in unit:
            if op.name in ("scf.if", "scf.while"):
                for r in op.regions:
                    for b in r.blocks:
                        self.block(b)
        produced = {id(r) for op in unit for r in op.results}
        reads: list[Value] = []
        for op in unit:
            for o in op.operands:
                if id(o) not in produced and self.spilled(o) and all(o is not x for x in reads):
                    reads.append(o)
        writes = [r for op in unit for r in op.results if self.spilled(r)]
        if not reads and not writes:
            out.ops.extend(unit)
            return
        self.unit_name[key] = f"{_label(unit)} at {first.loc}"
        axis, most = self.piece_axis(unit)
        self.unit_max[key] = most
        pieces = min(self.state.pieces.get(key, 1), most)
        if pieces <= 1:
            self.whole(unit, reads, writes, em, key)
        else:
            self.pieced += 1
            self.in_pieces(unit, axis, pieces, em, key)

    def whole(self, unit: list[Op], reads: list[Value], writes: list[Value], em: Builder, key: int) -> None:
        sub = {id(v): self.load_whole(em, v, key) for v in reads}
        for op in unit:
            op.operands = [sub.get(id(o), o) for o in op.operands]
            em.block.ops.append(op)
        for r in writes:
            self.unit_of[id(r)] = key
            self.store_whole(em, r, r, key)

    # -- pieces --------------------------------------------------------------------------------------
    def piece_axis(self, unit: list[Op]) -> tuple[int, int]:
        """(axis, most pieces) of a unit staged in pieces; (0, 1) when it has no piece-wise form."""
        last = unit[-1]
        compute = [op for op in unit if op.name in _ELEMENTWISE or op.name in FUSABLE_MEMORY_OPS]
        if last.name == "nmp.reduce" and len(compute) == len(unit) - 1:
            shape = last.operands[0].type.shape
            axis = last.attrs["axis"]
            if shape[axis] > 1 and all(not self.spilled(r) for r in last.results if r.type.is_tensor):
                return axis, shape[axis]  # pieces along the reduction: partial results carried
            d = _first_long_dim(tuple(n for k, n in enumerate(shape) if k != axis))
            if d is None:
                return 0, 1
            d += d >= axis
            return d, shape[d]
        if len(compute) == len(unit):
            shape = _unit_shape(unit)
            d = _first_long_dim(shape)
            return (0, 1) if d is None else (d, shape[d])
        if len(unit) == 1 and last.name in ("nmp.dma_load", "nmp.dma_store"):
            t = last.result.type if last.name == "nmp.dma_load" else Operands(last).value.type
            d = _first_long_dim(t.shape)
            return (0, 1) if d is None else (d, t.shape[d])
        if len(unit) == 1 and last.name == "nmp.matmul" and len(last.result.type.shape) == 2:
            m = last.result.type.shape[0]
            return (0, m) if m > 1 else (0, 1)
        return 0, 1

    def in_pieces(self, unit: list[Op], axis: int, pieces: int, em: Builder, key: int) -> None:
        last = unit[-1]
        if last.name in ("nmp.matmul", "nmp.dma_load"):
            shape = last.result.type.shape
        elif last.name == "nmp.reduce":
            shape = last.operands[0].type.shape
        elif last.name == "nmp.dma_store":
            shape = Operands(last).value.type.shape
        else:
            shape = _unit_shape(unit)
        c = shape[axis] // pieces
        partial = last.name == "nmp.reduce" and last.attrs["axis"] == axis
        loc = unit[0].loc
        hoist = self.builder(Block(), loc)  # spilled tiles every piece reads whole: loaded once, first
        self.hoisted = {}
        pre = self.builder(Block(), loc)
        lp = self.builder(Block(), loc)
        k = lp.block.add_arg("piece", I64)
        first: list[Value] = []
        if partial:  # the first piece initialises the partial results of the reduction
            first = self.piece(unit, shape, axis, c, pre.const(0), pre, hoist, key)
            carried = [lp.block.add_arg(f"partial{i}", v.type) for i, v in enumerate(first)]
        start = lp.op("arith.muli", [k, lp.const(c)], [I64]).result
        vals = self.piece(unit, shape, axis, c, start, lp, hoist, key)
        lp.op("scf.yield", _combine(lp, last, carried, vals) if partial else [])
        em.block.ops.extend(hoist.block.ops + pre.block.ops)
        lb = em.const(1 if partial else 0)
        loop = em.op("scf.for", [lb, em.const(pieces), em.const(1), *first], [v.type for v in first],
                     {"spill_pieces": pieces}, [Region([lp.block])])
        for v in loop.results:
            self.unit_of[id(v)] = key
        if partial:
            for r, final in zip(last.results, loop.results):
                if self.spilled(r):
                    self.store_whole(em, r, final, key)
                else:
                    self.remap[id(r)] = final

    def piece(self, unit: list[Op], shape: tuple[int, ...], axis: int, c: int, start: Value, b: Builder,
              hoist: Builder, key: int) -> list[Value]:
        """One piece of `unit` (its tiles `c` long along `axis`, from `start`); returns the reduction's
        partial results when the unit ends in a reduction along the pieces."""
        local: dict[int, Value] = {}
        produced = {id(r) for op in unit for r in op.results}
        inside = {}
        for op in unit:
            for o in op.operands:
                inside[id(o)] = inside.get(id(o), 0) + 1

        def cut(t: Ty, along: int) -> Ty:
            return t.with_shape(tuple(c if d == along else n for d, n in enumerate(t.shape)))

        def operand(o: Value, along: int | None) -> Value:
            """Operand o in this piece: its piece along `along`, or the whole tile (None)."""
            if id(o) in local:
                return local[id(o)]
            if not o.type.is_tensor:
                return o
            if along is None:
                if not self.spilled(o):
                    return o
                if id(o) not in self.hoisted:
                    self.hoisted[id(o)] = self.load_whole(hoist, o, key)
                return self.hoisted[id(o)]
            if self.spilled(o):
                return self.load_piece(b, o, along, start, c, key)
            if not _contiguous_along(o.type.shape, along):
                raise _NeedSpill(self.root(o), key)
            return b.op("nmp.slice", [o, start], [cut(o.type, along)], {"axis": along}).result

        def along_of(o: Value) -> int | None:
            """The unit's tiles are pieced along `axis`; a smaller one (a broadcast's source) when it spans
            that dimension, else it is read whole."""
            if len(o.type.shape) == len(shape) and o.type.shape[axis] == shape[axis]:
                return axis
            return None

        def result(r: Value, new: Value, along: int) -> None:
            local[id(r)] = new
            self.unit_of[id(new)] = key
            if self.spilled(r):
                self.store_piece(b, r, along, start, new, key)
            elif id(r) not in produced or self.uses.get(id(r), 0) > inside.get(id(r), 0):
                raise _NeedSpill(self.root(r), key)  # a resident result of a pieced op: its pieces need a slot

        starts = {"i64": start}  # the piece's first row as the iotas' element types: before the run
        for op in unit:
            elem = op.results[0].type.elem if op.name == "nmp.iota" else "i64"
            if elem not in starts:
                starts[elem] = b.op("arith.trunci", [start], [Ty(elem)], loc=op.loc).result
        if unit[0].name not in ("nmp.dma_load", "nmp.dma_store", "nmp.matmul"):
            # every piece of an operand first, so the piece's elementwise ops stay one fused run
            for op in unit:
                for o in op.operands:
                    if o.type.is_tensor and id(o) not in produced and id(o) not in local:
                        local[id(o)] = operand(o, along_of(o))
        partials: list[Value] = []
        for op in unit:
            name = op.name
            if name in ("nmp.dma_load", "nmp.dma_store"):
                self.dma_piece(op, axis, c, start, b, operand, result)
                continue
            if name == "nmp.matmul":
                a, bm, acc = op.operands
                new = b.op(name, [operand(a, 0), operand(bm, None), operand(acc, 0)], [cut(op.result.type, 0)],
                           dict(op.attrs), loc=op.loc)
                result(op.result, new.result, 0)
                continue
            if name == "nmp.iota" and op.attrs["axis"] == axis:
                rt = cut(op.result.type, axis)
                idx = b.op("nmp.iota", [], [rt], dict(op.attrs), loc=op.loc).result
                sp = b.op("nmp.splat", [starts[rt.elem]], [rt], loc=op.loc).result
                result(op.result, b.op("nmp.vec", [idx, sp], [rt], {"fn": "arith.addi"}, loc=op.loc).result, axis)
                continue
            ins = [operand(o, along_of(o)) for o in op.operands]
            if name == "nmp.reduce":
                red = op.attrs["axis"]
                out_axis = axis - (axis > red)
                rtypes = [r.type if red == axis or not r.type.is_tensor else cut(r.type, out_axis) for r in op.results]
                new = b.op(name, ins, rtypes, dict(op.attrs), [clone_region(r) for r in op.regions], loc=op.loc)
                if red == axis:
                    partials = list(new.results)
                    for v in partials:
                        self.unit_of[id(v)] = key
                else:
                    for r, nr in zip(op.results, new.results):
                        result(r, nr, out_axis)
                continue
            rtypes = [cut(r.type, axis) if r.type.is_tensor else r.type for r in op.results]
            new = b.op(name, ins, rtypes, dict(op.attrs), loc=op.loc)
            for r, nr in zip(op.results, new.results):
                result(r, nr, axis)
        return partials

    def dma_piece(self, op: Op, axis: int, c: int, start: Value, b: Builder, operand, result) -> None:
        """A DMA of one piece: the descriptor moves by `start` rows along `axis` and its valid box shrinks;
        a row gather along `axis` takes its piece of the row offsets instead."""
        d = Operands(op)
        offset, bounds = d.offset, list(d.bounds)
        parts: dict = {}
        if op.attrs.get("indexed") and op.attrs["index_axis"] == axis:
            parts["index"] = operand(d.index, 0)
        else:
            shift = b.op("arith.muli", [start, d.strides[axis]], [I64]).result
            offset = b.op("arith.addi", [offset, shift], [I64]).result
        bounds[axis] = b.op("arith.subi", [bounds[axis], start], [I64]).result
        attrs = {k: v for k, v in op.attrs.items() if k != "stages"}
        if op.name == "nmp.dma_load":
            if d.other is not None and d.other.type.is_tensor:
                parts["other"] = operand(d.other, axis)
            ty = op.result.type.with_shape(tuple(c if k == axis else n for k, n in enumerate(op.result.type.shape)))
            new = b.op("nmp.dma_load", d.replaced(offset=offset, bounds=bounds, **parts), [ty], attrs, loc=op.loc)
            result(op.result, new.result, axis)
        else:
            parts["value"] = operand(d.value, axis)
            b.op("nmp.dma_store", d.replaced(offset=offset, bounds=bounds, **parts), [], attrs, loc=op.loc)

    # -- loops ---------------------------------------------------------------------------------------
    def for_loop(self, op: Op, out: Block, key: int) -> None:
        """A loop whose carried tiles spill: they stay in their slot (the initial value is written there
        before the loop, a yielded value that is not in place at the end of each iteration)."""
        em = self.builder(out, op.loc)
        body = op.regions[0].block
        loop = Operands(op)
        carried = [j for j, a in enumerate(body.args[1:]) if self.spilled(a)]
        for j in carried:
            a, init = body.args[1 + j], loop.inits[j]
            if self.spilled(init) and self.slot(init) == self.slot(a):
                continue
            tile = self.load_whole(em, init, key) if self.spilled(init) else init
            self.store_whole(em, a, tile, key)
        term = body.ops[-1]
        yielded = list(term.operands)
        keep = [j for j in range(len(loop.inits)) if j not in carried]
        term.operands = [yielded[j] for j in keep]  # the carried tiles' yields are copies into their slots
        self.block(body)
        if carried:
            term = body.ops.pop()
            yb = self.builder(body, op.loc)
            for j in carried:
                a, y = body.args[1 + j], self.remap.get(id(yielded[j]), yielded[j])
                if self.spilled(y) and self.slot(y) == self.slot(a):
                    continue
                tile = self.load_whole(yb, y, key) if self.spilled(y) else y
                self.store_whole(yb, a, tile, key)
            body.ops.append(term)
            body.args[:] = [body.args[0]] + [body.args[1 + j] for j in keep]
            op.operands = [loop.lb, loop.ub, loop.step, *[loop.inits[j] for j in keep]]
            op.results[:] = [op.results[j] for j in keep]
        out.ops.append(op)


def _unit_shape(unit: list[Op]) -> tuple[int, ...]:
    for op in unit:
        for r in op.results:
            if r.type.is_tensor:
                return r.type.shape
    last = unit[-1]
    return Operands(last).value.type.shape if last.name in ("nmp.scatter", "nmp.atomic") else ()


_LABELS = {"nmp.dma_load": "tl.load", "nmp.dma_store": "tl.store", "nmp.matmul": "tl.dot", "nmp.bmatmul": "tl.dot",
           "nmp.reduce": "a reduction", "nmp.scan": "a scan", "nmp.transpose": "tl.trans", "nmp.join": "tl.join",
           "nmp.split": "tl.split", "nmp.cat": "tl.cat", "nmp.tile_gather": "tl.gather",
           "nmp.histogram": "tl.histogram", "nmp.gather": "tl.load (gather)", "nmp.scatter": "tl.store (scatter)",
           "nmp.atomic": "an atomic", "nmp.broadcast": "a broadcast", "scf.if": "an if",
           "scf.while": "a while loop", "scf.yield": "a loop's yield"}


def _label(unit: list[Op]) -> str:
    last = unit[-1]
    name = _LABELS.get(last.name, last.attrs.get("fn", last.name))
    return f"the fused elementwise run ending in {name}" if len(unit) > 1 else name


def _rewrite(module: Module, groups: _Groups, state: _State, align: int) -> _Trial:
    trial = copy.deepcopy(module)
    rw = _Rewriter(trial, groups, state)
    resident = rw.resident_map()
    rw.run()
    plan = plan_scratchpad(trial.kernel, align)
    info = SpillInfo(rw.area_bytes, [], rw.pieced)
    for root in sorted(state.spilled):
        v = groups.values[root]
        buf = groups.buffers[root]
        info.tiles.append(SpilledTile(v.name, _tile_type(v.type), buf.nbytes, buf.loc, rw.slot_of_root[root]))
    return _Trial(trial, plan, rw.unit_of, rw.unit_max, rw.unit_name, resident, info)


def _tile_type(t: Ty) -> str:
    return "tile<" + "x".join(map(str, t.shape)) + "x" + t.elem + ">"


def spill_to_fit(module: Module, spec, align: int, budget: int) -> tuple[ScratchpadPlan, SpillInfo]:
    """Rewrite `module` in place so its plan fits `budget` with tiles in the spill area; returns the plan and
    what spilled. Raises NMPScratchpadOverflowError (naming why) when no spilling makes it fit."""
    func = module.kernel
    base = plan_scratchpad(func, align)
    groups = _Groups(func, base, align)
    state = _State()
    frozen: set[int] = set()  # units that cannot be split further (a resident result they cannot assemble)
    last: _Trial | None = None
    why: list[str] = []
    for _ in range(_MAX_STEPS):
        try:
            trial = _rewrite(module, groups, state, align)
        except _NeedSpill as e:
            if e.root is not None and e.root not in state.spilled and e.root not in groups.unspillable:
                state.spilled.add(e.root)
            else:
                state.pieces[e.unit] = 1
                frozen.add(e.unit)
            continue
        last = trial
        if trial.plan.peak_bytes <= budget:
            return _commit(module, _minimize(module, groups, state, align, budget, trial), spec)
        move = _next_move(trial, groups, state, frozen)
        if move is None:
            why = _why(trial, groups, state, frozen)
            break
    else:
        why = ["the search for a spilling that fits did not finish"]
    plan = last.plan if last is not None else base
    live = sorted(plan.live_at_peak, key=lambda b: -b.size)
    lines = "\n".join("    " + b.describe() for b in live)
    reasons = "\n".join("  " + w for w in why)
    raise NMPScratchpadOverflowError(
        f"scratchpad overflow: the kernel needs {base.peak_bytes} bytes of scratchpad per program but target "
        f"'{spec.name}' has {budget} bytes, and spilling tiles to the PU's bank does not make it fit: still "
        f"{plan.peak_bytes} bytes at the peak. Tiles live at the peak ({sum(b.size for b in live)} bytes):\n{lines}\n"
        f"Why it cannot spill or split further:\n{reasons}\nUse smaller BLOCK_* sizes",
        required=base.peak_bytes, limit=budget, kernel=func.name,
    )


def _minimize(module: Module, groups: _Groups, state: _State, align: int, budget: int, trial: _Trial) -> _Trial:
    """Undo what the search did that the fit does not need: each spilled buffer (smallest first) goes back
    to the scratchpad, and each op staged in pieces takes half as many, while the plan still fits."""

    def attempt(candidate: _State) -> _Trial | None:
        try:
            t = _rewrite(module, groups, candidate, align)
        except _NeedSpill:
            return None
        return t if t.plan.peak_bytes <= budget else None

    for root in sorted(state.spilled, key=lambda r: (groups.buffers[r].nbytes, r)):
        t = attempt(_State(state.spilled - {root}, dict(state.pieces)))
        if t is not None:
            state.spilled.discard(root)
            trial = t
    for unit in sorted(state.pieces):
        while state.pieces[unit] > 1:
            t = attempt(_State(set(state.spilled), {**state.pieces, unit: state.pieces[unit] // 2}))
            if t is None:
                break
            state.pieces[unit] //= 2
            trial = t
    return trial


def _commit(module: Module, trial: _Trial, spec) -> tuple[ScratchpadPlan, SpillInfo]:
    threads = max(1, int(getattr(spec, "issue_threads", 1) or 1))
    need = trial.info.area_bytes * threads
    if need > spec.bank_bytes:
        raise NMPScratchpadOverflowError(
            f"scratchpad overflow: the tiles that do not fit the scratchpad would need a spill area of "
            f"{trial.info.area_bytes} bytes per program ({threads} programs at a time per PU) but a bank of "
            f"target '{spec.name}' has {spec.bank_bytes} bytes. Tiles spilled:\n"
            + "\n".join("    " + t.describe() for t in trial.info.tiles) + "\nUse smaller BLOCK_* sizes",
            required=trial.plan.peak_bytes, limit=spec.spm_bytes_per_program, kernel=module.kernel.name,
        )
    module.funcs[:] = trial.module.funcs
    return trial.plan, trial.info


def _next_move(trial: _Trial, groups: _Groups, state: _State, frozen: set[int]) -> str | None:
    """Change the state for the next trial (see the module docstring); None when nothing is left."""
    plan = trial.plan
    t = plan.peak_time
    candidates: list[tuple[int, bool, int]] = []  # (bytes, used at the peak, root)
    units: dict[int, int] = {}
    for buf in plan.live_at_peak:
        unit = trial.unit_of.get(id(buf.value))
        if unit is not None:
            units[unit] = units.get(unit, 0) + buf.size
            continue
        root = trial.resident.get(id(buf.value))
        if root is None or root in state.spilled or root in groups.unspillable:
            continue
        candidates.append((buf.size, t in buf.uses, root))
    idle = max((c for c in candidates if not c[1]), default=None)
    split = next((u for u, _ in sorted(units.items(), key=lambda kv: -kv[1])
                  if u not in frozen and state.pieces.get(u, 1) * 2 <= trial.unit_max.get(u, 1)), None)
    # the move that frees more at the peak; splitting (no extra traffic) when it frees as much
    if split is not None and (idle is None or units[split] // 2 >= idle[0]):
        state.pieces[split] = state.pieces.get(split, 1) * 2
        return "split"
    if idle is not None:
        state.spilled.add(idle[2])
        return "spill"
    if candidates:
        state.spilled.add(max(candidates)[2])
        return "spill"
    return None


def _why(trial: _Trial, groups: _Groups, state: _State, frozen: set[int]) -> list[str]:
    """Why nothing at the peak can spill or split further: one line per op staging tiles there, or per
    buffer that cannot spill."""
    by_unit: dict[int, list[Buffer]] = {}
    out = []
    for buf in trial.plan.live_at_peak:
        unit = trial.unit_of.get(id(buf.value))
        if unit is not None:
            by_unit.setdefault(unit, []).append(buf)
            continue
        root = trial.resident.get(id(buf.value))
        if root is not None and root in groups.unspillable:
            out.append(f"{buf.describe()}: carried by a branch or a while loop, it cannot spill")
    for unit, bufs in by_unit.items():
        name = trial.unit_name.get(unit, "an op")
        tiles = ", ".join(f"%{b.value.name} {b.size} B" for b in bufs)
        if trial.unit_max.get(unit, 1) <= 1:
            out.append(f"{name}: no piece-wise staging exists for it, and its tiles ({tiles}) do not fit whole")
        elif unit in frozen:
            out.append(f"{name}: its pieces would write a tile that cannot spill ({tiles})")
        else:
            out.append(f"{name}: already staged in {state.pieces.get(unit, 1)} pieces, the most ({tiles})")
    return out or ["the buffers at the peak are all spilled already or staged in the smallest pieces"]

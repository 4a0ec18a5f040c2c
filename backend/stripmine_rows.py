"""Legalization by row strip-mining: run a kernel's row-parallel tile work in chunks of rows.

Library kernels keep 2-D blocks (`[BT x BD]` rows of a layer norm, `[BT x BD]` gradient accumulators over
a loop of row blocks) that a GPU spreads over registers; on nmp they may not fit the scratchpad. When
every op treats the rows of those tiles independently, the kernel computes the same result one chunk
of rows at a time. The rows are found by unifying tile dimensions through the ops that preserve them
(elementwise ops, broadcasts, views, reductions along other axes, loop-carried values, a dot's M and N
dimensions, a row gather's index): the candidate is the class of the first dimension of the largest
tiles, of one size R, that no op mixes (scans, sorts, concatenations, a dot's K dimension poison it).

Every top-level op that touches the rows is cloned per chunk with its tiles C rows long: iotas along
the rows start at the chunk's first row, DMA descriptors move their offset by base * stride and shrink
their valid extent (a row gather reads its chunk of the row offsets), loops are cloned with their
body. A reduction across the rows (`tl.sum(dw, axis=0)` after the loop) becomes a partial result per
chunk, combined with its own combine region (elementwise on tile partials); the first chunk is peeled
to initialise them. Ops that do not touch the rows run once, before (or after, when they use a
partial). The rewrite is refused, and the kernel left as it was, when it would not be exact: a row
tile computed from a partial (it needs the full sum first: two passes), a scalar computed from row
data inside the chunked part, an effect that would run once per chunk or move past one.
"""

from __future__ import annotations

import itertools

from .ir import Block, Builder, Func, Op, Region, Ty, Value
from .ops import Operands

I64 = Ty("i64")

# Ops whose operand/result dimensions correspond one to one (same shapes).
_SAME_SHAPE = {"nmp.vec", "nmp.gather", "nmp.scatter", "nmp.atomic"}
# Ops whose results have no dimension tied to their operands (fresh tiles, or the DMA's box).
_FREE = {"nmp.splat", "nmp.const", "nmp.iota", "nmp.dma_load", "nmp.dma_store"}
_EFFECTS_PER_ROW = {"nmp.dma_store", "nmp.scatter", "nmp.atomic"}  # effects that a chunk of rows splits


class _Dims:
    """Union-find over tile dimensions (value, axis); classes that an op mixes are poisoned."""

    def __init__(self) -> None:
        self.parent: dict[tuple[int, int], tuple[int, int]] = {}
        self.values: dict[int, Value] = {}
        self.poisoned: set[tuple[int, int]] = set()

    def key(self, v: Value, axis: int) -> tuple[int, int]:
        self.values[id(v)] = v
        k = (id(v), axis)
        self.parent.setdefault(k, k)
        return k

    def find(self, k: tuple[int, int]) -> tuple[int, int]:
        while self.parent.get(k, k) != k:
            self.parent[k] = self.parent[self.parent[k]]
            k = self.parent[k]
        return k

    def union(self, a: Value, da: int, b: Value, db: int) -> None:
        ra, rb = self.find(self.key(a, da)), self.find(self.key(b, db))
        if ra != rb:
            self.parent[ra] = rb
            if ra in self.poisoned:
                self.poisoned.add(rb)

    def poison(self, v: Value) -> None:
        for d in range(len(v.type.shape)):
            self.poisoned.add(self.find(self.key(v, d)))

    def cls(self, v: Value, axis: int) -> tuple[int, int]:
        return self.find(self.key(v, axis))

    def row_axes(self, v: Value, row) -> list[int]:
        return [d for d in range(len(v.type.shape)) if v.type.is_tensor and self.cls(v, d) == row]


def _link_ops(dims: _Dims, ops: list[Op]) -> None:
    for op in ops:
        _link(dims, op)
        for r in op.regions:
            for b in r.blocks:
                _link_ops(dims, b.ops)


def _tiles(vals) -> list[Value]:
    return [v for v in vals if v.type.is_tensor]


def _link(dims: _Dims, op: Op) -> None:
    n = op.name
    res = _tiles(op.results)
    for v in _tiles(list(op.results) + list(op.operands)):
        for d in range(len(v.type.shape)):
            dims.key(v, d)
    if n in _SAME_SHAPE:
        tiles = _tiles(list(op.results) + list(op.operands))
        for t in tiles[1:]:
            if t.type.shape == tiles[0].type.shape:
                for d in range(len(t.type.shape)):
                    dims.union(t, d, tiles[0], d)
        return
    if n in _FREE:
        index = Operands(op).index if n.startswith("nmp.dma") else None
        if index is not None:
            tile = op.result if n == "nmp.dma_load" else Operands(op).value
            dims.union(index, 0, tile, op.attrs["index_axis"])
        return
    if n == "nmp.broadcast":
        src = op.operands[0]
        for d, (a, b) in enumerate(zip(src.type.shape, op.result.type.shape)):
            if a == b:
                dims.union(src, d, op.result, d)
        return
    if n == "nmp.view":
        src, r = op.operands[0], op.result
        ins = [d for d, x in enumerate(src.type.shape) if x != 1]
        outs = [d for d, x in enumerate(r.type.shape) if x != 1]
        if [src.type.shape[d] for d in ins] != [r.type.shape[d] for d in outs]:
            dims.poison(src)
            dims.poison(r)
            return
        for a, b in zip(ins, outs):
            dims.union(src, a, r, b)
        return
    if n == "nmp.transpose":
        order = op.attrs["order"]
        for d, o in enumerate(order):
            dims.union(op.result, d, op.operands[0], o)
        return
    if n == "nmp.reduce":
        axis = op.attrs["axis"]
        for x in op.operands:
            for r in res:
                for d in range(len(x.type.shape)):
                    if d != axis:
                        dims.union(x, d, r, d - (d > axis))
        return
    if n == "nmp.matmul":
        a, b, acc = op.operands
        dims.union(a, 0, op.result, 0)
        dims.union(b, 1, op.result, 1)
        dims.union(acc, 0, op.result, 0)
        dims.union(acc, 1, op.result, 1)
        dims.union(a, 1, b, 0)
        dims.poisoned.add(dims.cls(a, 1))  # K: a reduction inside the dot
        return
    if n == "scf.for":
        body = op.regions[0].block
        loop = Operands(op)
        y = body.ops[-1].operands
        for init, a, yv, r in zip(loop.inits, body.args[1:], y, op.results):
            if a.type.is_tensor:
                for d in range(len(a.type.shape)):
                    dims.union(init, d, a, d)
                    dims.union(yv, d, a, d)
                    dims.union(r, d, a, d)
        return
    if n == "scf.if":
        for region in op.regions:
            y = region.block.ops[-1].operands
            for r, yv in zip(op.results, y):
                if r.type.is_tensor:
                    for d in range(len(r.type.shape)):
                        dims.union(r, d, yv, d)
        return
    if n in ("scf.yield", "nmp.yield", "scf.condition", "nmp.return"):
        return
    for v in _tiles(list(op.results) + list(op.operands)):  # anything else mixes its dimensions
        dims.poison(v)


class _Plan:
    def __init__(self, dims: _Dims, row, rows: int):
        self.dims, self.row, self.rows = dims, row, rows

    def axes(self, v: Value) -> list[int]:
        return self.dims.row_axes(v, self.row) if v.type.is_tensor else []


def _choose_rows(func: Func, dims: _Dims) -> _Plan | None:
    """The row class: the first dimension of the largest 2-D+ tile whose class is one size and clean."""
    tiles = sorted({id(v): v for op in func.walk() for v in _tiles(op.results) if len(v.type.shape) >= 2}.values(),
                   key=lambda v: -v.type.nbytes)
    tried = set()
    for v in tiles:
        row = dims.cls(v, 0)
        if row in tried or row in dims.poisoned:
            continue
        tried.add(row)
        sizes = {dims.values[k[0]].type.shape[k[1]] for k in dims.parent if dims.find(k) == row}
        if len(sizes) == 1 and next(iter(sizes)) > 1:
            return _Plan(dims, row, next(iter(sizes)))
    return None


def _touches(plan: _Plan, op: Op) -> bool:
    return any(plan.axes(v) for inner in op.walk() for v in list(inner.results) + list(inner.operands))


def _partition(func: Func, plan: _Plan):
    """(before, chunked, after, partial reduces) of the top-level ops, or None when not exact."""
    ops = [op for op in func.body.ops if op.name != "nmp.return"]
    kinds: list[str] = []
    partial: set[int] = set()
    reduces: list[Op] = []
    for op in ops:
        uses_partial = any(id(o) in partial for inner in op.walk() for o in inner.operands)
        if op.name == "nmp.reduce" and plan.axes(op.operands[0]) == [op.attrs["axis"]]:
            if uses_partial:
                return None
            if any(plan.axes(r) for r in op.results):
                return None
            if any(inner.regions for inner in op.regions[0].block.ops):
                return None
            kinds.append("rows")
            reduces.append(op)
            partial.update(id(r) for r in op.results)
        elif _touches(plan, op):
            if uses_partial or not _exact_inside(plan, op):
                return None  # a row tile from a partial result (two passes), or per-chunk scalars/effects
            kinds.append("rows")
        elif uses_partial:
            kinds.append("after")
            partial.update(id(r) for inner in op.walk() for r in inner.results)
        else:
            kinds.append("once")
    if not reduces and "rows" not in kinds:
        return None
    first = kinds.index("rows")
    last = len(kinds) - 1 - kinds[::-1].index("rows")
    written = {_written_arg(inner) for op, kind in zip(ops, kinds) if kind == "rows" for inner in op.walk()}
    before, chunked, after = [], [], []
    for k, (op, kind) in enumerate(zip(ops, kinds)):
        if kind == "rows":
            chunked.append(op)
        elif kind == "after" or (kind == "once" and k > last):
            later = [o for o, kd in zip(ops[k + 1:last + 1], kinds[k + 1:last + 1]) if kd == "rows"]
            if _has_effects(op) and any(_has_effects(o) or _read_args(o) & {_written_arg(i) for i in op.walk()}
                                        for o in later):
                return None  # an effect that would move past row work that writes or reads what it writes
            after.append(op)
        else:
            # hoisted before the row work: only when no chunk writes what it reads
            if first < k < last and (_has_effects(op) or _read_args(op) & written):
                return None
            before.append(op)
    return before, chunked, after, reduces


def _written_arg(op: Op) -> str | None:
    return op.attrs.get("arg") if op.name in ("nmp.dma_store", "nmp.scatter", "nmp.atomic") else None


def _read_args(op: Op) -> set[str]:
    return {inner.attrs.get("arg") for inner in op.walk() if inner.name in ("nmp.dma_load", "nmp.gather")}


def _has_effects(op: Op) -> bool:
    return any(inner.name in ("nmp.dma_store", "nmp.scatter", "nmp.atomic", "nmp.print", "nmp.assert")
               for inner in op.walk())


def _exact_inside(plan: _Plan, op: Op) -> bool:
    """Inside a chunked op (a loop): no scalar computed from row data, no effect that is not per row,
    no reduction across rows (it would be used before the other chunks are in)."""
    for inner in op.walk():
        if inner is op and not inner.regions:
            continue
        if inner.name == "nmp.reduce" and plan.axes(inner.operands[0]) == [inner.attrs["axis"]]:
            return False
        if inner is not op and inner.name in ("scf.for", "scf.if", "scf.while") and inner.regions:
            if any(not r.type.is_tensor for r in inner.results) and _touches(plan, inner):
                return False
        if inner.name in ("nmp.atomic", "nmp.print", "nmp.assert") and not any(
                plan.axes(v) for v in inner.operands):
            return False
        if inner.name in _EFFECTS_PER_ROW and not any(plan.axes(v) for v in inner.operands):
            return False  # a store of something that is not rows would run once per chunk
        if inner.name == "scf.while":
            return False
    row_data = set()
    for inner in op.walk():
        if any(plan.axes(v) for v in inner.operands) or any(id(o) in row_data for o in inner.operands):
            row_data.update(id(r) for r in inner.results)
    for inner in op.walk():
        for r in inner.results:
            if id(r) in row_data and not r.type.is_tensor and inner.name != "nmp.reduce":
                return False
        if inner.name == "nmp.reduce" and any(id(r) in row_data and not r.type.is_tensor for r in inner.results):
            return False
        if inner.name == "scf.for":
            body = inner.regions[0].block
            for a in body.args[1:]:
                if not a.type.is_tensor and any(id(o) in row_data for o in Operands(inner).inits):
                    return False
    return True


class _Cloner:
    """Clones chunked ops with their row dimensions `chunk` long, the chunk starting at row `base`."""

    def __init__(self, plan: _Plan, em: Builder, base: Value, chunk: int, remap: dict[int, Value]):
        self.plan, self.em, self.base, self.chunk, self.remap = plan, em, base, chunk, remap

    def ty(self, v: Value) -> Ty:
        axes = self.plan.axes(v)
        if not axes:
            return v.type
        return v.type.with_shape(tuple(self.chunk if d in axes else n for d, n in enumerate(v.type.shape)))

    def get(self, v: Value) -> Value:
        return self.remap.get(id(v), v)

    def ops(self, ops: list[Op]) -> None:
        for op in ops:
            self.op(op)

    def op(self, op: Op) -> None:
        em, b = self.em, self.em
        operands = [self.get(o) for o in op.operands]
        attrs = dict(op.attrs)
        saved_loc = em.loc
        em.loc = op.loc
        try:
            if op.name == "nmp.iota" and op.attrs["axis"] in self.plan.axes(op.result):
                rt = self.ty(op.result)
                idx = b.op("nmp.iota", [], [rt], attrs).result
                start = self.base if rt.elem == "i64" else b.op("arith.trunci", [self.base], [rt.scalar]).result
                sp = b.op("nmp.splat", [start], [rt]).result
                new = b.op("nmp.vec", [idx, sp], [rt], {"fn": "arith.addi"})
            elif op.name in ("nmp.dma_load", "nmp.dma_store"):
                new = self.dma(op, operands, attrs)
            elif op.regions:
                new = b.op(op.name, operands, [self.ty(r) for r in op.results], attrs,
                           [self.region(op, r) for r in op.regions])
            else:
                new = b.op(op.name, operands, [self.ty(r) for r in op.results], attrs)
        finally:
            em.loc = saved_loc
        for r, nr in zip(op.results, new.results):
            self.remap[id(r)] = nr

    def dma(self, op: Op, operands: list[Value], attrs: dict) -> Op:
        b = self.em
        tile = op.result if op.name == "nmp.dma_load" else Operands(op).value
        d = Operands(op, operands)
        offset, strides, bounds = d.offset, list(d.strides), list(d.bounds)
        for axis in self.plan.axes(tile):
            if not (attrs.get("indexed") and attrs["index_axis"] == axis):  # a row gather's offsets are rows
                shift = b.op("arith.muli", [self.base, strides[axis]], [I64]).result
                offset = b.op("arith.addi", [offset, shift], [I64]).result
            bounds[axis] = b.op("arith.subi", [bounds[axis], self.base], [I64]).result
        new_ops = Operands(op, operands).replaced(offset=offset, strides=strides, bounds=bounds)
        return b.op(op.name, new_ops, [self.ty(r) for r in op.results], attrs)

    def region(self, op: Op, region: Region) -> Region:
        blocks = []
        for blk in region.blocks:
            nb = Block()
            for a in blk.args:
                self.remap[id(a)] = nb.add_arg(a.name, self.ty(a))
            inner = _Cloner(self.plan, Builder(nb, self.em.loc, self.em.prefix, self.em.counter), self.base,
                            self.chunk, self.remap)
            inner.ops(blk.ops)
            blocks.append(nb)
        return Region(blocks)


def _combine(em: Builder, op: Op, accs: list[Value], vals: list[Value]) -> list[Value]:
    """The reduction's combine region on (partial, chunk result): scalars inline, tiles elementwise."""
    block = op.regions[0].block
    local = {id(a): v for a, v in zip(block.args, accs + vals)}
    tile = accs[0].type if accs and accs[0].type.is_tensor else None
    for inner in block.ops:
        if inner.name == "nmp.yield":
            return [local.get(id(o), o) for o in inner.operands]
        args = [local.get(id(o), o) for o in inner.operands]
        if tile is not None:
            rt = tile.with_elem(inner.results[0].type.elem)
            new = em.op("nmp.vec", args, [rt], dict(inner.attrs, fn=inner.name), loc=inner.loc)
        else:
            new = em.op(inner.name, args, [r.type for r in inner.results], dict(inner.attrs), loc=inner.loc)
        for r, nr in zip(inner.results, new.results):
            local[id(r)] = nr
    return []


def row_strip_mine(func: Func, chunk: int) -> bool:
    """Rewrite `func` in place to run its row work in chunks of `chunk` rows; False (unchanged) if it is
    not row-parallel or `chunk` does not divide the rows."""
    dims = _Dims()
    _link_ops(dims, func.body.ops)
    plan = _choose_rows(func, dims)
    if plan is None or chunk >= plan.rows or plan.rows % chunk:
        return False
    parts = _partition(func, plan)
    if parts is None:
        return False
    before, chunked, after, reduces = parts
    tail = [op for op in func.body.ops if op.name == "nmp.return"]
    loc = chunked[0].loc
    em = Builder(Block(), loc, "r", itertools.count(1))
    em.block.ops.extend(before)
    first: dict[int, Value] = {}
    _Cloner(plan, em, em.const(0), chunk, first).ops(chunked)
    inits = [first[id(r)] for op in reduces for r in op.results]
    body = Block()
    k = body.add_arg("rows", I64)
    carried = [body.add_arg(f"partial{i}", v.type) for i, v in enumerate(inits)]
    inner = Builder(body, loc, "r", em.counter)
    base = inner.op("arith.muli", [k, inner.const(chunk)], [I64]).result
    remap: dict[int, Value] = {}
    _Cloner(plan, inner, base, chunk, remap).ops(chunked)
    yields: list[Value] = []
    pos = 0
    for op in reduces:
        m = len(op.results)
        yields += _combine(inner, op, carried[pos:pos + m], [remap[id(r)] for r in op.results])
        pos += m
    inner.op("scf.yield", yields)
    lb, ub, step = em.const(1), em.const(plan.rows // chunk), em.const(1)
    loop = em.op("scf.for", [lb, ub, step, *inits], [v.type for v in inits], {"rows_strip_mined": chunk},
                 [Region([body])])
    final = {id(r): loop.results[i] for i, r in enumerate(r for op in reduces for r in op.results)}
    for op in after:
        for inner_op in op.walk():
            inner_op.operands = [final.get(id(o), o) for o in inner_op.operands]
        em.block.ops.append(op)
    em.block.ops.extend(tail)
    func.body.ops = em.block.ops
    return True


def row_chunks(func: Func) -> int:
    """The number of rows row strip-mining would split (0 when the kernel is not row-parallel)."""
    dims = _Dims()
    _link_ops(dims, func.body.ops)
    plan = _choose_rows(func, dims)
    if plan is None or _partition(func, plan) is None:
        return 0
    return plan.rows

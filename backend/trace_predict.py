"""Predict a launch's execution trace from nmpir without running it (the cost model's front half).

The timing model charges time for a trace of DMA descriptors and compute ops. For kernels whose
addresses and trip counts do not depend on loaded data, that trace is a function of the kernel's
scalar code alone: this module interprets the scalar part of nmpir for every program at once, with
numpy arrays as values (one lane per program), and emits the same records the compiled code would.
Tile compute is never evaluated; a scalar that comes from loaded data is unknown, and if an unknown
value steers control flow or an address the prediction gives up (`TracePrediction.exact` False).

A branch on loaded data (`if tl.max(mask) > -inf:`, a program that skips work its data makes void) and, inside
one, a DMA at an offset from loaded data (a KV-cache row written at a loaded position) are the data dependences
followed: both sides of such a branch run for every program that reaches it, and such a DMA is recorded as its
elements anywhere in its argument (an element gather's record), so the records bound what any run issues
(`TracePrediction.bound`: every byte a program may move, some it may not). A DMA whose box is bounded by loaded
data (rows up to a loaded position) is bounded the same way, by its whole tile at the offset its code gives it,
wherever it sits. Placement may
follow a bound (a program goes where its possible bytes live); whatever needs the records a run really issues
(overwritten bytes, time estimates) keeps to `exact`.

Cost: one numpy operation per scalar op per loop iteration, whatever the number of programs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from triton_nmp import abi
from triton_nmp.opclass import OP_ALU, classify, region_class

from .grid_pipeline import ATTR as GRID_ATTR
from .ir import Func, Op, Value
from .loop_cost import use_counts, vec_accesses
from .ops import Operands, dma_tile_type
from .timing_only import address_tiles

_MAX_ITERATIONS = 1 << 16


class Unknown(Exception):
    """A data-dependent value reached control flow or an address."""


@dataclass
class TracePrediction:
    trace: np.ndarray  # (records, abi.TRACE_WORDS) int64, program order within each program
    exact: bool
    reason: str = ""
    bound: bool = False  # not exact, but `trace` holds every record a run may issue (both sides of data branches)


def _wrap(x, elem: str):
    bits = {"i1": 1, "i8": 8, "i16": 16, "i32": 32}.get(elem)
    if bits is None or not isinstance(x, np.ndarray) and not isinstance(x, (int, np.integer)):
        return x
    if bits == 1:
        return np.asarray(x) & 1
    half = 1 << (bits - 1)
    return ((np.asarray(x, dtype=np.int64) + half) % (1 << bits)) - half


_CMP = {"eq": np.equal, "ne": np.not_equal, "slt": np.less, "sle": np.less_equal, "sgt": np.greater,
        "sge": np.greater_equal, "ult": np.less, "ule": np.less_equal, "ugt": np.greater, "uge": np.greater_equal,
        "olt": np.less, "ole": np.less_equal, "ogt": np.greater, "oge": np.greater_equal, "oeq": np.equal,
        "one": np.not_equal, "ult_f": np.less}


def _divsi(a, b):
    b = np.where(b == 0, 1, b)
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) ^ (b < 0), -q, q)


def _scalar_op(op: Op, args: list):
    n = op.name
    a = args[0] if args else None
    b = args[1] if len(args) > 1 else None
    elem = op.results[0].type.elem
    if n == "arith.addi":
        return _wrap(a + b, elem)
    if n == "arith.subi":
        return _wrap(a - b, elem)
    if n == "arith.muli":
        return _wrap(a * b, elem)
    if n == "arith.divsi" or n == "arith.divui":
        return _wrap(_divsi(a, b), elem)
    if n == "arith.remsi" or n == "arith.remui":
        return _wrap(a - _divsi(a, b) * np.where(b == 0, 1, b), elem)
    if n == "arith.ceildivsi":
        return _wrap(-((-a) // np.where(b == 0, 1, b)), elem)
    if n == "arith.floordivsi":
        return _wrap(a // np.where(b == 0, 1, b), elem)
    if n in ("arith.minsi", "arith.minui"):
        return np.minimum(a, b)
    if n in ("arith.maxsi", "arith.maxui"):
        return np.maximum(a, b)
    if n == "arith.andi":
        return a & b
    if n == "arith.ori":
        return a | b
    if n == "arith.xori":
        return a ^ b
    if n == "arith.shli":
        return _wrap(np.left_shift(a, b), elem)
    if n in ("arith.shrsi", "arith.shrui"):
        return np.right_shift(a, b)
    if n in ("arith.cmpi", "arith.cmpf"):
        return _CMP[op.attrs["pred"]](a, b).astype(np.int64)
    if n == "arith.select":
        return np.where(np.asarray(a) != 0, b, args[2])
    if n in ("arith.extsi", "arith.extui", "arith.index_cast"):
        return np.asarray(a, dtype=np.int64)
    if n == "arith.trunci":
        return _wrap(a, elem)
    if n in ("arith.sitofp", "arith.uitofp"):
        return np.asarray(a, dtype=np.float64)
    if n in ("arith.fptosi", "arith.fptoui"):
        return np.asarray(np.trunc(a), dtype=np.int64)
    if n in ("arith.addf",):
        return a + b
    if n == "arith.subf":
        return a - b
    if n == "arith.mulf":
        return a * b
    if n == "arith.divf":
        return a / np.where(b == 0, np.nan, b)
    if n in ("arith.extf", "arith.truncf"):
        return a
    raise Unknown(f"scalar op {n}")


class _Predictor:
    def __init__(self, func: Func, scalars: dict[str, int | float], spans: dict[str, int],
                 grid: tuple[int, int, int]):
        self.func = func
        gx, gy, gz = grid
        n = gx * gy * gz
        lin = np.arange(n, dtype=np.int64)
        self.prog = lin
        self.pids = (lin % gx, (lin // gx) % gy, lin // (gx * gy))
        self.grid = grid
        self.env: dict[int, object] = {}
        self.tiles: dict[int, np.ndarray] = {}  # 1-D integer tiles computed from scalars (`index_tile`)
        self.unknown: set[int] = set()
        self.records: list[tuple[int, np.ndarray, np.ndarray]] = []  # (seq, lanes, rows (k, 8))
        self.seq = 0
        self.arg_index: dict[int, int] = {}
        self.spans = spans
        for i, a in enumerate(func.args):
            self.arg_index[id(a)] = i
            if a.type.is_ptr:
                self.env[id(a)] = 0
            elif a.name in scalars:
                self.env[id(a)] = scalars[a.name]
            else:
                self.unknown.add(id(a))
        self.loops: list[tuple[np.ndarray, object]] = []
        self.users = use_counts(func)
        self.accesses: dict[int, int] = {}  # nmp.vec op -> scratchpad accesses of its loop (codegen's fusion)
        self.blocks_seen: set[tuple[int, int]] = set()
        self.bounded = ""  # why the records are a superset: the first branch on loaded data, else ""
        self.data_branches = 0  # depth of branches on loaded data around the op being followed
        self.gather_rows = address_tiles(func)  # the only tiles `index_tile` evaluates: a tile holds
        # (programs x elements) integers, evaluating every integer tile of a large launch costs seconds

    def val(self, v: Value):
        if id(v) in self.unknown:
            raise Unknown(f"%{v.name} depends on loaded data")
        try:
            return self.env[id(v)]
        except KeyError:  # a bug of ours: say which value, not its id
            raise KeyError(f"%{v.name} has no value (its defining op is not modelled)") from None

    def emit(self, mask: np.ndarray, kind: int, fields: list) -> None:
        lanes = np.nonzero(mask)[0]
        if lanes.size == 0:
            return
        rec = np.zeros((lanes.size, abi.TRACE_WORDS), dtype=np.int64)
        rec[:, 0] = kind
        rec[:, 1] = self.prog[lanes]
        for k, f in enumerate(fields):
            fv = np.asarray(f)
            rec[:, 2 + k] = fv[lanes] if fv.ndim else fv
        self.records.append((self.seq, lanes, rec))
        self.seq += 1

    def run(self) -> np.ndarray:
        alive = np.ones(self.prog.size, dtype=bool)
        self.block(self.func.body.ops, alive)
        if not self.records:
            return np.zeros((0, abi.TRACE_WORDS), dtype=np.int64)
        recs = np.concatenate([r for _, _, r in self.records])
        seqs = np.concatenate([np.full(r.shape[0], s) for s, _, r in self.records])
        order = np.lexsort((seqs, recs[:, 1]))
        return recs[order]

    def block(self, ops: list[Op], mask: np.ndarray) -> np.ndarray:
        """Run ops for the lanes in `mask`; returns the lanes still running (not returned)."""
        if ops and (id(ops[0]), len(ops)) not in self.blocks_seen:  # once per block, not per loop iteration
            self.blocks_seen.add((id(ops[0]), len(ops)))
            self.accesses.update(vec_accesses(ops, self.users))
        for op in ops:
            if not mask.any():
                return mask
            mask = self.op(op, mask)
        return mask

    def set(self, r: Value, v, mask: np.ndarray | None = None) -> None:
        if mask is not None and id(r) in self.env:
            old = self.env[id(r)]
            v = np.where(mask, v, old)
        self.env[id(r)] = v

    def op(self, op: Op, mask: np.ndarray) -> np.ndarray:
        n = op.name
        if n == "nmp.return":
            return np.zeros_like(mask)
        if n == "arith.constant":
            self.env[id(op.result)] = op.attrs["value"] if not isinstance(op.attrs["value"], bool) else \
                int(op.attrs["value"])
            return mask
        if n == "nmp.program_id":
            self.env[id(op.result)] = self.pids[op.attrs["axis"]]
            return mask
        if n == "nmp.num_programs":
            self.env[id(op.result)] = self.grid[op.attrs["axis"]]
            return mask
        if n == "nmp.addptr":
            p, off = self.val(op.operands[0]), self.val(op.operands[1])
            self.env[id(op.result)] = p + np.asarray(off, dtype=np.int64) * op.attrs["elem_bytes"]
            return mask
        if n in ("nmp.dma_load", "nmp.dma_store"):
            self.dma(op, mask)
            return mask
        if n == "nmp.spill_area":  # DMAs of spilled tiles name the program's spill area
            self.env[id(op.result)] = 0
            self.arg_index[id(op.result)] = abi.SPILL_ARG
            return mask
        if n in ("nmp.gather", "nmp.scatter"):
            mem = Operands(op)
            t = op.result.type if n == "nmp.gather" else mem.value.type
            self.emit(mask, abi.KIND_GATHER if n == "nmp.gather" else abi.KIND_SCATTER,
                      [self.arg_index[id(mem.base)], 0, t.numel, t.elem_bytes, self.spans.get(mem.base.name, 0)])
            for r in op.results:
                self.unknown.add(id(r))
            return mask
        if n in ("nmp.iota", "nmp.splat", "nmp.vec"):
            self.index_tile(op)
        if n == "nmp.vec":
            r = op.result
            self.emit(mask, abi.KIND_VEC, [r.type.numel, 0, abi.dtype_code(r.type.elem), classify(op),
                                     self.accesses.get(id(op), 0)])
            return mask
        if n == "nmp.reduce":
            shape = op.operands[0].type.shape
            self.emit(mask, abi.KIND_VEC, [int(np.prod(shape)), 1, abi.dtype_code(op.operands[0].type.elem),
                                     region_class(op.regions[0].block), self.accesses.get(id(op), len(op.operands))])
            for r in op.results:
                self.unknown.add(id(r))
            return mask
        if n == "nmp.matmul":
            a, b = Operands(op).a, Operands(op).b
            m, k = a.type.shape[-2:]
            self.emit(mask, abi.KIND_MATMUL, [m, b.type.shape[-1], k, abi.dtype_code(a.type.elem)])
            return mask
        if n in ("nmp.splat", "nmp.iota", "nmp.const", "nmp.broadcast", "nmp.transpose", "nmp.view"):
            return mask
        if n == "scf.for":
            return self.for_loop(op, mask)
        if n == "scf.if":
            return self.if_op(op, mask)
        if n in ("scf.yield", "nmp.yield", "scf.condition"):
            return mask
        if n in ("nmp.assert", "nmp.print"):  # checks and printing record nothing in the trace
            return mask
        if n == "scf.while":
            raise Unknown("while loops")
        if op.results and op.results[0].type.is_tensor:
            return mask
        if any(id(o) in self.unknown for o in op.operands):
            for r in op.results:
                self.unknown.add(id(r))
            return mask
        args = [self.val(o) for o in op.operands]
        for r in op.results:
            self.set(r, _scalar_op(op, args), mask)
        return mask

    def index_tile(self, op: Op) -> None:
        """Values of a 1-D integer tile computed from scalars (a row gather's offsets, e.g. `% M` rows) as
        an array (programs, elements), kept in `tiles`; tiles from loaded data are not computed."""
        r = op.result
        if id(r) not in self.gather_rows or len(r.type.shape) != 1 or not r.type.is_int:
            return
        n = r.type.shape[0]
        if op.name == "nmp.iota":
            self.tiles[id(r)] = (op.attrs["start"] + np.arange(n, dtype=np.int64))[None, :]
            return
        args = []
        for o in op.operands:
            if o.type.is_tensor:
                if id(o) not in self.tiles:
                    return
                args.append(self.tiles[id(o)])
            elif id(o) in self.unknown:
                return
            else:
                args.append(np.asarray(self.val(o), dtype=np.int64).reshape(-1, 1))
        if op.name == "nmp.splat":
            self.tiles[id(r)] = args[0]
            return
        try:
            self.tiles[id(r)] = np.asarray(_scalar_op(Op(op.attrs["fn"], op.operands, op.results, op.attrs), args),
                                           dtype=np.int64)
        except Unknown:
            return

    def dma(self, op: Op, mask: np.ndarray) -> None:
        d = Operands(op)
        root = d.base
        if self.data_branches and d.index is None and (
                id(d.offset) in self.unknown or (d.guard is not None and id(d.guard) in self.unknown)):
            self.bounded_dma(op, d, mask)
            return
        offset = np.asarray(self.val(d.offset), dtype=np.int64)
        strides = [np.asarray(self.val(x), dtype=np.int64) for x in d.strides]
        if d.index is not None:
            # a row gather: predicted as one descriptor stepping by its first row step (exact until the
            # offsets wrap, as `% M` rows do once); offsets from loaded data cannot be predicted
            rows = self.tiles.get(id(d.index))
            if rows is None:
                raise Unknown(f"the rows of the gather at {op.loc} come from loaded data")
            rows = np.broadcast_to(rows, (self.prog.size, rows.shape[1]))
            offset = offset + rows[:, 0]
            strides[op.attrs["index_axis"]] = rows[:, 1] - rows[:, 0] if rows.shape[1] > 1 else np.zeros_like(offset)
        t = dma_tile_type(op)
        shape = t.shape
        bounds = [self.box_bound(op, x, n) for x, n in zip(d.bounds, shape)]
        rank = len(strides)
        ok = mask.copy()
        if d.guard is not None and id(d.guard) not in self.unknown:  # a guard from loaded data: taken (bound)
            ok &= np.asarray(self.val(d.guard)) != 0
        elif d.guard is not None:
            self.bounded = self.bounded or f"the mask of the access at {op.loc} depends on loaded data"
        esize = t.elem_bytes
        valid = [np.clip(bd, 0, n) for bd, n in zip(bounds, shape)]
        for v in valid:
            ok = ok & (v > 0)
        # as codegen_memory._trace_dma: a load reads stride-0 dimensions once, a column-major box moves
        # by columns; either is rearranged in the scratchpad (a vector record after a load, before a store)
        box = valid
        if op.name == "nmp.dma_load":
            box = [np.where(s == 0, 1, v) for s, v in zip(strides, valid)]

        def prod(dims):
            return np.prod(np.stack(np.broadcast_arrays(np.ones_like(offset), *dims)), axis=0)

        rearrange = prod(box) != prod(valid)
        if rank == 0:
            rows, row_bytes, row_stride = 1, esize, esize
        else:
            contiguous = strides[-1] == esize
            outer = prod(box[:-1])
            rows = np.where(contiguous, outer, outer * box[-1])
            row_bytes = np.where(contiguous, box[-1] * esize, esize)
            outer_stride = strides[-2] if rank >= 2 else np.zeros_like(offset)
            row_stride = np.where(contiguous, outer_stride, strides[-1])
            if rank >= 2:
                cols = ~contiguous & (strides[-2] == esize)
                rows = np.where(cols, prod(box[:-2]) * box[-1], rows)
                row_bytes = np.where(cols, box[-2] * esize, row_bytes)
                row_stride = np.where(cols, strides[-1], row_stride)
                rearrange = rearrange | (cols & (box[-1] > 1) & (box[-2] > 1))
        flags = abi.FLAG_GRID_PIPELINED if op.attrs.get(GRID_ATTR) else 0
        if op.name == "nmp.dma_load" and op.attrs.get("stages", 1) > 1 and self.loops:
            iv, lb = self.loops[-1]
            flags = flags | (np.asarray(iv) != np.asarray(lb)).astype(np.int64) * abi.FLAG_PREFETCHED
        if op.name == "nmp.dma_load" and not op.result.type.is_tensor:
            self.unknown.add(id(op.result))
        kind = abi.KIND_DMA_LOAD if op.name == "nmp.dma_load" else abi.KIND_DMA_STORE
        n = self.prog.size

        def rearranged() -> None:
            self.emit(ok & np.broadcast_to(rearrange, (n,)), abi.KIND_VEC,
                      [np.broadcast_to(prod(valid), (n,)), 0, abi.dtype_code(t.elem), OP_ALU,
                       abi.REARRANGE_ACCESSES])

        if kind == abi.KIND_DMA_STORE:
            rearranged()
        self.emit(ok, kind, [self.arg_index[id(root)], np.broadcast_to(offset, (n,)), np.broadcast_to(rows, (n,)),
                             np.broadcast_to(row_bytes, (n,)), np.broadcast_to(row_stride, (n,)),
                             np.broadcast_to(flags, (n,))])
        if kind == abi.KIND_DMA_LOAD:
            rearranged()

    def box_bound(self, op: Op, x: Value, n: int) -> np.ndarray:
        """The extent of a DMA box along one dimension; one from loaded data (rows up to a loaded position) is
        bounded by the tile's: the box moves at most the whole tile, at the offset the code gives it."""
        if id(x) not in self.unknown:
            return np.asarray(self.val(x), dtype=np.int64)
        self.bounded = self.bounded or f"the mask of the access at {op.loc} depends on loaded data"
        return np.asarray(n, dtype=np.int64)

    def bounded_dma(self, op: Op, d: Operands, mask: np.ndarray) -> None:
        """A DMA inside a branch on loaded data at an offset from loaded data (a KV-cache row written at a loaded
        position by the program whose chunk holds it), or guarded by loaded data: bounded as its elements anywhere
        in the argument, each access made (the records of an element gather). Outside such a branch (a row
        gather, an embedding lookup) the prediction still gives up: placement keeps its fallback there."""
        self.bounded = self.bounded or f"the address of the access at {op.loc} depends on loaded data"
        t = dma_tile_type(op)
        bounds = [np.clip(np.asarray(self.val(x), dtype=np.int64), 0, n) for x, n in zip(d.bounds, t.shape)]
        numel = np.prod(np.stack(np.broadcast_arrays(np.ones(mask.shape, dtype=np.int64), *bounds)), axis=0)
        load = op.name == "nmp.dma_load"
        self.emit(mask & (numel > 0), abi.KIND_GATHER if load else abi.KIND_SCATTER,
                  [self.arg_index[id(d.base)], 0, numel, t.elem_bytes, self.spans.get(d.base.name, 0)])
        if load and not op.result.type.is_tensor:
            self.unknown.add(id(op.result))

    def for_loop(self, op: Op, mask: np.ndarray) -> np.ndarray:
        loop = Operands(op)
        lb, ub, step = (np.broadcast_to(np.asarray(self.val(o), dtype=np.int64), mask.shape)
                        for o in (loop.lb, loop.ub, loop.step))
        body = op.regions[0].block
        iv, bargs = body.args[0], body.args[1:]
        for a, init in zip(bargs, loop.inits):
            if a.type.is_tensor:
                continue
            if id(init) in self.unknown:
                self.unknown.add(id(a))
            else:
                self.env[id(a)] = np.broadcast_to(np.asarray(self.val(init)), mask.shape).copy()
        cur = lb.copy()
        running = mask.copy()
        iterations = 0
        yield_op = body.ops[-1]
        while True:
            active = running & (cur < ub)
            if not active.any():
                break
            iterations += 1
            if iterations > _MAX_ITERATIONS:
                raise Unknown("loop too long to predict")
            self.env[id(iv)] = cur
            self.loops.append((cur, lb))
            still = self.block(body.ops[:-1], active)
            self.loops.pop()
            running = running & ~(active & ~still)
            for a, y in zip(bargs, yield_op.operands):
                if a.type.is_tensor:
                    continue
                if id(y) in self.unknown:
                    self.unknown.add(id(a))
                    continue
                self.env[id(a)] = np.where(active, self.val(y), self.env[id(a)])
            cur = np.where(active, cur + step, cur)
        for r, a in zip(op.results, bargs):
            if a.type.is_tensor:
                continue
            if id(a) in self.unknown:
                self.unknown.add(id(r))
            else:
                self.env[id(r)] = self.env[id(a)]
        return running

    def if_op(self, op: Op, mask: np.ndarray) -> np.ndarray:
        data = id(Operands(op).cond) in self.unknown
        if data:  # both sides, for every program: a superset of the records; scalar results are unknown
            self.bounded = self.bounded or f"the branch at {op.loc} depends on loaded data"
            cond = np.ones(mask.shape, dtype=bool)
            sides = (cond, cond)
        else:
            cond = np.broadcast_to(np.asarray(self.val(Operands(op).cond)) != 0, mask.shape)
            sides = (cond, ~cond)
        out = np.zeros_like(mask)
        results = {}
        for region, sel in zip(op.regions, sides):
            lanes = mask & sel
            if not lanes.any():
                continue
            self.data_branches += data
            try:
                still = self.block(region.block.ops[:-1], lanes)
            finally:
                self.data_branches -= data
            out |= still
            y = region.block.ops[-1]
            for r, v in zip(op.results, y.operands):
                if r.type.is_tensor:
                    continue
                if id(v) in self.unknown:
                    self.unknown.add(id(r))
                    continue
                prev = results.get(id(r), np.zeros(mask.shape, dtype=np.float64))
                results[id(r)] = np.where(lanes, self.val(v), prev)
        for r in op.results:
            if data:
                self.unknown.add(id(r))
            elif id(r) in results and id(r) not in self.unknown:
                self.env[id(r)] = results[id(r)]
        return out


def predict_trace(func: Func, scalars: dict[str, int | float], spans: dict[str, int],
                  grid: tuple[int, int, int]) -> TracePrediction:
    """The trace the compiled kernel would record for this launch, or exact=False when it depends on data (with
    `bound` and a superset of the records when only branches do)."""
    grid = tuple(int(g) for g in (list(grid) + [1, 1])[:3])
    if min(grid) <= 0:
        return TracePrediction(np.zeros((0, abi.TRACE_WORDS), dtype=np.int64), True)
    predictor = _Predictor(func, scalars, spans, grid)
    try:
        trace = predictor.run()
    except Unknown as e:
        return TracePrediction(np.zeros((0, abi.TRACE_WORDS), dtype=np.int64), False, str(e))
    if predictor.bounded:
        return TracePrediction(trace, False, predictor.bounded, bound=True)
    return TracePrediction(trace, True)

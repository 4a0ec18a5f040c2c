"""LLVM codegen of nmpir memory ops: structured DMA descriptors and the element gather/scatter fallback.

A DMA clamps its valid box, checks its whole byte range against the argument's extent once (O(1) per
transfer), moves the box between the argument's memory and the tile's scratchpad buffer (rows through the
shared row copier of `codegen_runtime`), counts bytes and records one trace record. A row gather (an
`indexed` DMA: one dimension's offsets come from a tile) splits that dimension into runs whose offsets
step evenly and moves each run as one such descriptor (one per row when the rows are scattered, one for
`(start + arange) % M` until it wraps). Gathers and scatters
check every element; their per-element body is separate (`_gather_parts`) so a fused elementwise run
that computes their addresses can end in them.
"""

from __future__ import annotations

from llvmlite import ir

from triton_nmp.abi import (
    FLAG_GRID_PIPELINED,
    KIND_DMA_LOAD,
    KIND_DMA_STORE,
    KIND_GATHER,
    KIND_SCATTER,
    KIND_VEC,
    REARRANGE_ACCESSES,
    SPILL_ARG,
    STATUS_OUT_OF_BOUNDS,
    dtype_code,
)
from triton_nmp.opclass import OP_ALU

from .codegen_base import CodegenBase, _const, _i64, _prod_values, open_loop
from .codegen_scalar import I1, I8, I64, storage_type, to_storage
from .grid_pipeline import ATTR as GRID_ATTR
from .ir import Op, Value, row_major
from .ops import Operands


class MemoryCodegen(CodegenBase):
    """`nmp.dma_load`, `nmp.dma_store`, `nmp.gather`, `nmp.scatter` (see the module docstring)."""

    def _dma_operands(self, op: Op):
        """(base argument, offset, strides, bounds, guard) of a DMA, as LLVM values (guard None if none)."""
        d = Operands(op)
        guard = self.scalar(d.guard) if d.guard is not None else None
        strides, bounds = [self.scalar(x) for x in d.strides], [self.scalar(x) for x in d.bounds]
        return d.base, self.scalar(d.offset), strides, bounds, guard

    def _valid_box(self, shape, bounds, guard):
        """Clamp each dimension's bound to [0, size]; returns (valid counts, any-valid, full-tile)."""
        b = self.b
        valid = []
        ok = ir.Constant(I1, 1) if guard is None else guard
        full = ok
        for n, hi in zip(shape, bounds):
            c = b.select(b.icmp_signed("<", hi, _i64(0)), _i64(0), hi)
            c = b.select(b.icmp_signed(">", c, _i64(n)), _i64(n), c)
            valid.append(c)
            ok = b.and_(ok, b.icmp_signed(">", c, _i64(0)))
            full = b.and_(full, b.icmp_signed("==", c, _i64(n)))
        return valid, ok, full

    def _check_range(self, op: Op, root: Value, offset, strides, valid, esize: int) -> None:
        """One bounds check for a whole descriptor: the lowest and highest byte it touches."""
        b = self.b
        lo, hi = offset, offset
        for s, n in zip(strides, valid):
            ext = b.mul(s, b.sub(n, _i64(1)))
            neg = b.icmp_signed("<", ext, _i64(0))
            lo = b.add(lo, b.select(neg, ext, _i64(0)))
            hi = b.add(hi, b.select(neg, _i64(0), ext))
        hi = b.add(hi, _i64(esize))
        index, _base, span = self.arg_info[id(root)]
        bad = b.or_(b.icmp_signed("<", lo, _i64(0)), b.icmp_signed(">", hi, span))
        self.fail_if(bad, STATUS_OUT_OF_BOUNDS, self.site(op, root.name), index, lo, hi)

    def _box_copy(self, tile: Value, base_addr, offset, strides, valid, to_tile: bool, tile_first=None) -> None:
        """Copy the valid box between global memory and a tile buffer (row-major in the tile), starting at
        tile element `tile_first` (default 0: a sub-box of a row gather starts further in).

        The innermost two dimensions go to a shared out-of-line row copier; outer dimensions loop here."""
        b = self.b
        shape = tile.type.shape
        st = storage_type(tile.type)
        esize = tile.type.elem_bytes
        tstrides = row_major(shape)
        rank = len(shape)
        buf = self.buffer(tile)
        if rank == 0:
            p = b.inttoptr(b.add(base_addr, offset), st.as_pointer())
            if to_tile:
                b.store(b.load(p), buf)
            else:
                b.store(b.load(buf), p)
            return
        helper = self._copy_rows_helper(esize)
        buf8 = b.bitcast(buf, I8.as_pointer())
        flag = ir.Constant(I1, 1 if to_tile else 0)

        def plane(idx):
            """Copy dims [rank-2, rank-1] (or the single dim of a 1-D tile) at outer index `idx`."""
            addr = b.add(base_addr, offset)
            for i, s_ in zip(idx, strides):
                addr = b.add(addr, b.mul(i, s_))
            toff = self._flat(idx + [_i64(0)] * (rank - len(idx)), tstrides)
            if tile_first is not None:
                toff = b.add(toff, tile_first)
            tptr = b.gep(buf8, [b.mul(toff, _i64(esize))])
            if rank == 1:
                rows, rstride, trow = _i64(1), _i64(0), _i64(0)
            else:
                rows, rstride, trow = valid[-2], strides[-2], _i64(tstrides[-2] * esize)
            b.call(helper, [tptr, addr, rows, valid[-1], rstride, strides[-1], trow, flag])

        def rec(d, idx):
            if d >= rank - 2:
                plane(idx)
                return
            self.loop(valid[d], lambda i: rec(d + 1, idx + [i]))

        rec(0, [])

    def _trace_dma(self, kind: int, root: Value, offset, strides, valid, esize: int, flags=0,
                   dtype: int = 0) -> None:
        """Record a descriptor as rows of contiguous bytes: [arg, first byte, rows, row bytes, row stride].

        Rank <= 2 is exact. For rank 3+ the outer dimensions are folded into rows at the stride of
        dimension -2. A load reads a dimension of stride 0 (a broadcast: `bias[None, :]` as a [BM, BN]
        tile) once. A column-major box (dimension -2 contiguous, e.g. the B tile of `x @ w.T`) moves the
        source's columns as rows; any other non-unit inner stride makes every element its own row. A box
        moved transposed or not whole is rearranged in the scratchpad by the vector unit: a vector record
        of the box's elements, after a load, before a store (`abi.REARRANGE_ACCESSES`).
        """
        b = self.b
        index = self.arg_info[id(root)][0]
        if not valid:
            self.trace(kind, [index, offset, 1, esize, esize, flags])
            return
        box = list(valid)
        if kind == KIND_DMA_LOAD:
            box = [b.select(b.icmp_signed("==", s, _i64(0)), _i64(1), v) for s, v in zip(strides, valid)]
        contiguous = b.icmp_signed("==", strides[-1], _i64(esize))
        outer = _prod_values(b, box[:-1])
        rows = b.select(contiguous, outer, b.mul(outer, box[-1]))
        row_bytes = b.select(contiguous, b.mul(box[-1], _i64(esize)), _i64(esize))
        outer_stride = strides[-2] if len(strides) >= 2 else _i64(0)
        row_stride = b.select(contiguous, outer_stride, strides[-1])
        rearrange = b.icmp_signed("!=", _prod_values(b, box), _prod_values(b, valid))
        if len(box) >= 2:
            columns = b.and_(b.not_(contiguous), b.icmp_signed("==", strides[-2], _i64(esize)))
            rows = b.select(columns, b.mul(_prod_values(b, box[:-2]), box[-1]), rows)
            row_bytes = b.select(columns, b.mul(box[-2], _i64(esize)), row_bytes)
            row_stride = b.select(columns, strides[-1], row_stride)
            transposed = b.and_(columns, b.and_(b.icmp_signed(">", box[-1], _i64(1)),
                                                b.icmp_signed(">", box[-2], _i64(1))))
            rearrange = b.or_(rearrange, transposed)
        if kind == KIND_DMA_STORE:
            self._trace_rearrange(rearrange, valid, dtype)
        self.trace(kind, [index, offset, rows, row_bytes, row_stride, flags])
        if kind == KIND_DMA_LOAD:
            self._trace_rearrange(rearrange, valid, dtype)

    def _trace_rearrange(self, cond, valid, dtype: int) -> None:
        """The vector unit's pass over a box the DMA moved transposed or not whole (see `_trace_dma`)."""
        with self.b.if_then(cond):
            self.trace(KIND_VEC, [_prod_values(self.b, valid), 0, dtype, OP_ALU, REARRANGE_ACCESSES])

    def _prefetch_flag(self, op: Op):
        """Multi-buffered loads: every iteration but the first was prefetched during the previous one
        (flags = FLAG_PREFETCHED, bit 0); plus FLAG_GRID_PIPELINED (bit 1) for kernels pipelined across
        the grid loop (backend/grid_pipeline.py)."""
        grid = FLAG_GRID_PIPELINED if op.attrs.get(GRID_ATTR) else 0
        if op.attrs.get("stages", 1) > 1 and self.loops:
            iv, lb = self.loops[-1]
            flag = self.b.zext(self.b.icmp_signed("!=", iv, lb), I64)
            return self.b.or_(flag, _i64(grid)) if grid else flag
        return grid

    def op_nmp_dma_load(self, op: Op) -> None:
        b = self.b
        r = op.result
        shape = r.type.shape
        root, offset, strides, bounds, guard = self._dma_operands(op)
        other = Operands(op).other
        valid, ok, full = self._valid_box(shape, bounds, guard)
        is_scalar = not r.type.is_tensor
        tile = Value(r.name + "_spm", r.type) if is_scalar else r
        if self.timing_only:
            with b.if_then(ok):
                self._transfer(op, tile, root, offset, strides, valid, True)
            if is_scalar:
                self.vals[id(r)] = _const(r.type, 0)
            return
        with b.if_then(b.not_(full)):
            if other is None:
                zero = ir.Constant(storage_type(r.type), 0)
                self.loop(r.type.numel, lambda i: b.store(zero, b.gep(self.buffer(tile), [i])))
            elif other.type.is_tensor:
                self.copy_tile(tile, other)
            else:
                ov = to_storage(b, self.scalar(other), r.type)
                self.loop(r.type.numel, lambda i: b.store(ov, b.gep(self.buffer(tile), [i])))
        with b.if_then(ok):
            self._transfer(op, tile, root, offset, strides, valid, True)
        if is_scalar:
            self.vals[id(r)] = self.load_elem(tile, _i64(0))

    def op_nmp_dma_store(self, op: Op) -> None:
        b = self.b
        root, offset, strides, bounds, guard = self._dma_operands(op)
        value = Operands(op).value
        shape = value.type.shape
        valid, ok, _full = self._valid_box(shape, bounds, guard)
        if not value.type.is_tensor:
            tile = Value(value.name + "_spm", value.type)
            if not self.timing_only:
                self.store_elem(tile, _i64(0), self.scalar(value))
        else:
            tile = value
        with b.if_then(ok):
            self._transfer(op, tile, root, offset, strides, valid, False)

    def _transfer(self, op: Op, tile: Value, root: Value, offset, strides, valid, to_tile: bool) -> None:
        """Move the valid box (checked, counted, traced): one descriptor, or one per run of a row gather."""
        index = Operands(op).index
        if index is None:
            self._descriptor(op, tile, root, offset, strides, valid, to_tile)
            return
        b = self.b
        axis = op.attrs["index_axis"]
        n = valid[axis]
        buf = self.buffer(index)

        def row(j):
            return b.load(b.gep(buf, [j]))

        tstride = row_major(tile.type.shape)[axis]
        # runs: [start, end) where row offsets step by one `delta` (the first step of the run)
        runs = open_loop(b, self.fn, ("runs", "run", "runs_end"), [_i64(0)])
        start = runs.values[0]
        runs.test(b.icmp_signed("<", start, n))
        first = row(start)
        nxt = b.add(start, _i64(1))
        has_next = b.icmp_signed("<", nxt, n)
        delta = b.select(has_next, b.sub(row(b.select(has_next, nxt, start)), first), _i64(0))
        scan = open_loop(b, self.fn, ("run_scan", "run_step", "run_found"), [nxt])
        k = scan.values[0]
        in_range = b.icmp_signed("<", k, n)
        safe = b.select(in_range, k, start)
        steps = b.icmp_signed("==", b.sub(row(safe), row(b.select(in_range, b.sub(k, _i64(1)), start))), delta)
        scan.test(b.and_(in_range, steps))
        scan.carry([b.add(k, _i64(1))])
        end = scan.values[0]
        sub_strides, sub_valid = list(strides), list(valid)
        sub_strides[axis], sub_valid[axis] = delta, b.sub(end, start)
        self._descriptor(op, tile, root, b.add(offset, first), sub_strides, sub_valid, to_tile,
                         b.mul(start, _i64(tstride)))
        runs.carry([end])

    def _descriptor(self, op: Op, tile: Value, root: Value, offset, strides, valid, to_tile: bool,
                    tile_first=None) -> None:
        """One descriptor: the range check, the copy (not in the timing-only variant), counters, a record."""
        b = self.b
        esize = tile.type.elem_bytes
        self._check_range(op, root, offset, strides, valid, esize)
        if not self.timing_only:
            self._box_copy(tile, self.arg_info[id(root)][1], offset, strides, valid, to_tile, tile_first)
        name = "dma_loads" if to_tile else "dma_stores"
        nbytes = b.mul(_prod_values(b, valid), _i64(esize))
        self.count(name, _i64(1))
        self.count(name[:-1] + "_bytes", nbytes)
        if self.arg_info[id(root)][0] == SPILL_ARG:
            self.count("spill_bytes", nbytes)
        dtype = dtype_code(tile.type.elem)
        if to_tile:
            self._trace_dma(KIND_DMA_LOAD, root, offset, strides, valid, esize, self._prefetch_flag(op), dtype)
        else:
            self._trace_dma(KIND_DMA_STORE, root, offset, strides, valid, esize,
                            FLAG_GRID_PIPELINED if op.attrs.get(GRID_ATTR) else 0, dtype)

    def _element_address(self, op: Op):
        """Element i's address of a gather, scatter or atomic: base + offset + addrs[i] * scale (the offsets
        form; base + offset computed once, outside the element loop), or addrs[i] (a pointer tile)."""
        at = Operands(op)
        addrs = at.addrs
        scale = op.attrs.get("scale")
        if not scale:
            return lambda i: self._elem(addrs, i)
        b = self.b
        start = b.add(self.arg_info[id(at.base)][1], self.scalar(at.offset))

        def addr(i):
            o = self._elem(addrs, i)
            if o.type.width < 64:
                o = b.sext(o, I64)
            return b.add(start, o if scale == 1 else b.mul(o, _i64(scale)))

        return addr

    def _gather_parts(self, op: Op):
        """(elements, per-element body, epilogue) of a gather, so a fused run can end in one."""
        b = self.b
        g = Operands(op)
        root, mask, other = g.base, g.mask, g.other
        address = self._element_address(op)
        r = op.result
        st = storage_type(r.type)
        esize = r.type.elem_bytes
        site = self.site(op, root.name)
        scalar = not r.type.is_tensor
        tile = Value(r.name + "_spm", r.type) if scalar else r

        get = self._elem

        def body(i):
            m = get(mask, i) if mask is not None else ir.Constant(I1, 1)
            with b.if_else(m) as (then, otherwise):
                with then:
                    addr = address(i)
                    self._elem_check(op, root, addr, esize, site)
                    b.store(b.load(b.inttoptr(addr, st.as_pointer())), b.gep(self.buffer(tile), [i]))
                with otherwise:
                    if other is not None:
                        self.store_elem(tile, i, get(other, i))
                    else:
                        b.store(ir.Constant(st, 0), b.gep(self.buffer(tile), [i]))

        def finish():
            self.count("gather_elems", _i64(r.type.numel))
            self.trace(KIND_GATHER, [self.arg_info[id(root)][0], 0, r.type.numel, esize, self.arg_info[id(root)][2]])
            if scalar:
                self.vals[id(r)] = self.load_elem(tile, _i64(0))

        return r.type.numel, body, finish

    def _scatter_parts(self, op: Op):
        b = self.b
        sc = Operands(op)
        root, value, mask = sc.base, sc.value, sc.mask
        address = self._element_address(op)
        st = storage_type(value.type)
        esize = value.type.elem_bytes
        site = self.site(op, root.name)
        n = value.type.numel

        get = self._elem

        def body(i):
            m = get(mask, i) if mask is not None else ir.Constant(I1, 1)
            with b.if_then(m):
                addr = address(i)
                self._elem_check(op, root, addr, esize, site)
                x = to_storage(b, get(value, i), value.type)
                b.store(x, b.inttoptr(addr, st.as_pointer()))

        def finish():
            self.count("scatter_elems", _i64(n))
            self.trace(KIND_SCATTER, [self.arg_info[id(root)][0], 0, n, esize, self.arg_info[id(root)][2]])

        return n, body, finish

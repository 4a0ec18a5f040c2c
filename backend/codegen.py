"""nmpir -> LLVM IR (llvmlite) for the nmp pseudo-target.

The simulator runs the kernel natively on the host, so the LLVM module is built for the host CPU.
Layout of the generated code (the ABI the simulator relies on; context words, status codes and trace
records are defined in `triton_nmp.abi`):

    i64 nmp_grid_<kernel>(i64* slots, i64 gx, i64 gy, i64 gz, i64* ctx)
        runs every program of the grid in order (x fastest), stops at the first error;
    i64 nmp_body_<kernel>(i64* slots, i64 px, py, pz, nx, ny, nz, i64* ctx)   (internal)
        one program.

Every tile lives in a scratchpad buffer (a stack buffer of its static size). DMA descriptors check
their whole byte range against the argument's extent once per transfer; gathers check each element.
A failed check writes status, site, argument and byte range to ctx and returns before any byte is
moved. Counters of DMA traffic and compute work are accumulated in ctx for the timing model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llvmlite import ir

from triton_nmp.abi import (
    COUNTERS,
    COUNTERS_BASE,
    CTX_PID,
    CTX_SITE,
    CTX_STATUS,
    CTX_TRACE_CAP,
    CTX_TRACE_LEN,
    CTX_TRACE_ON,
    CTX_TRACE_PTR,
    KIND_DMA_LOAD,
    KIND_DMA_STORE,
    KIND_GATHER,
    KIND_MATMUL,
    KIND_SCATTER,
    KIND_VEC,
    MAX_TRACE_RECORDS,
    STATUS_NO_MEMORY,
    STATUS_OUT_OF_BOUNDS,
    TRACE_WORDS,
    dtype_code,
)
from triton_nmp.errors import NMPCompilationError
from triton_nmp.opclass import classify, region_class

from .codegen_language import LanguageCodegen, _row_major
from .codegen_scalar import (
    F32,
    F64,
    I1,
    I8,
    I32,
    I64,
    compute_type,
    emit_elementwise,
    round_to,
    storage_type,
    to_compute,
    to_storage,
)
from .codegen_watchdog import tick as watchdog_tick
from .ir import Func, Module, Op, Ty, Value
from .loop_cost import run_accesses, use_counts
from .nmpir import fused_run_length
from .ops import FUSABLE_MEMORY_OPS, Operands
from .scratchpad import ScratchpadPlan
from .timing_only import timing_only_eligible

REDUCE_LANES = 8


@dataclass
class Site:
    op: str
    loc: str
    arg: str


@dataclass
class CodegenResult:
    llvm_ir: str
    entry: str
    sites: list[Site]
    args: list[dict]
    spm_bytes: int
    counters: tuple[str, ...] = COUNTERS
    buffers: list[tuple[str, str, int]] = field(default_factory=list)
    timing_entry: str = ""  # grid entry of the timing-only variant, "" when the kernel is not eligible
    timing_reason: str = ""


def _i64(x: int) -> ir.Constant:
    return ir.Constant(I64, x)


class KernelCodegen(LanguageCodegen):
    def __init__(self, func: Func, triple: str, data_layout: str, plan: ScratchpadPlan | None = None,
                 timing_variant: bool = False):
        self.func = func
        self.timing_variant = timing_variant
        self.plan = plan
        self.arena: ir.Value | None = None
        self.loops: list[tuple[ir.Value, ir.Value]] = []  # (induction variable, lower bound) of open loops
        self.site_ids: dict[tuple, int] = {}
        self.timing_only = False
        self._use_counts: dict[int, int] | None = None
        self._elem_regs: dict[int, ir.Value] | None = None  # element values of a fused run, by tile
        self.module = ir.Module(name=func.name)
        self.module.triple = triple
        self.module.data_layout = data_layout
        self.sites: list[Site] = []
        self.vals: dict[int, ir.Value] = {}
        self.bufs: dict[int, ir.Value] = {}
        self.arg_info: dict[int, tuple[int, ir.Value, ir.Value]] = {}  # ptr arg -> (index, base, span)
        self.buffers: list[tuple[str, str, int]] = []
        self.spm_bytes = 0

    # -- infrastructure -------------------------------------------------------------------------------
    def build(self) -> CodegenResult:
        f = self.func
        args_meta = self._emit_variant("", timing_only=False)
        spm_bytes = self.spm_bytes
        eligible, why = timing_only_eligible(f)
        if eligible and not self.timing_variant:
            eligible, why = False, "not requested (compile option timing_variant=True)"
        timing_entry = ""
        if eligible:
            self.vals, self.bufs, self.arg_info = {}, {}, {}
            self.arena, self.loops = None, []
            self._emit_variant("_timing", timing_only=True)
            timing_entry = f"nmp_grid_timing_{f.name}"
        return CodegenResult(str(self.module), f"nmp_grid_{f.name}", self.sites, args_meta, spm_bytes,
                             COUNTERS, self.buffers, timing_entry, why)

    def _emit_variant(self, suffix: str, timing_only: bool) -> list[dict]:
        """Emit one body + grid pair. The timing-only variant skips tile compute and data movement but
        keeps every address, bounds check and trace record (see `timing_only`)."""
        f = self.func
        self.timing_only = timing_only
        body_ty = ir.FunctionType(I64, [I64.as_pointer()] + [I64] * 6 + [I64.as_pointer()])
        self.fn = ir.Function(self.module, body_ty, f"nmp_body{suffix}_{f.name}")
        self.fn.linkage = "internal"
        slots, px, py, pz, nx, ny, nz, ctx = self.fn.args
        self.ctx = ctx
        self.pids = (px, py, pz)
        self.nprogs = (nx, ny, nz)
        self.entry_block = self.fn.append_basic_block("entry")
        start = self.fn.append_basic_block("start")
        self.err_exit = self.fn.append_basic_block("error_exit")
        self.b = ir.IRBuilder(self.entry_block)
        self.alloca_builder = ir.IRBuilder(self.entry_block)
        ir.IRBuilder(self.err_exit).ret(_i64(STATUS_OUT_OF_BOUNDS))
        b = ir.IRBuilder(start)
        self.b = b
        args_meta = []
        slot = 0
        for i, a in enumerate(f.args):
            t = a.type
            if t.is_ptr:
                base = b.load(b.gep(slots, [_i64(slot)]))
                span = b.load(b.gep(slots, [_i64(slot + 1)]))
                self.vals[id(a)] = base
                self.arg_info[id(a)] = (i, base, span)
                slot += 2
                args_meta.append({"name": a.name, "kind": "ptr", "ty": "*" + _triton_ty(t.pointee)})
            elif t.is_int:
                raw = b.load(b.gep(slots, [_i64(slot)]))
                ct = compute_type(t)
                self.vals[id(a)] = raw if ct.width == 64 else b.trunc(raw, ct)
                slot += 1
                args_meta.append({"name": a.name, "kind": "int", "ty": _triton_ty(t.elem)})
            elif t.is_float:
                raw = b.load(b.gep(slots, [_i64(slot)]))
                d = b.bitcast(raw, F64)
                v = d if t.elem == "f64" else round_to(b, b.fptrunc(d, F32), t)
                self.vals[id(a)] = v
                slot += 1
                args_meta.append({"name": a.name, "kind": "float", "ty": _triton_ty(t.elem)})
            else:
                raise NMPCompilationError(f"argument '{a.name}' of type {t} is not supported on nmp yet",
                                          kernel=f.name)
        self.count("programs", _i64(1))
        self.program = b.add(px, b.mul(nx, b.add(py, b.mul(ny, pz))))
        self.trace_on = b.icmp_signed("!=", b.load(b.gep(ctx, [_i64(CTX_TRACE_ON)])), _i64(0))
        self.emit_block(f.body.ops)
        if not self.b.block.is_terminated:
            self.b.ret(_i64(0))
        self.alloca_builder.position_at_end(self.entry_block)
        self.alloca_builder.branch(start)
        grid = self._build_grid(f"nmp_grid{suffix}_{f.name}")
        if timing_only:
            # Only addresses and trace records: not worth LLVM's optimisation time (compile time matters
            # more than the speed of this already compute-free variant).
            for fn in (self.fn, grid):
                fn.attributes.add("noinline")
                fn.attributes.add("optnone")
        return args_meta


    def _build_grid(self, name: str) -> ir.Function:
        gty = ir.FunctionType(I64, [I64.as_pointer(), I64, I64, I64, I64.as_pointer()])
        g = ir.Function(self.module, gty, name)
        slots, gx, gy, gz, ctx = g.args
        b = ir.IRBuilder(g.append_basic_block("entry"))
        fail = g.append_basic_block("fail")

        grid_site = self.grid_site()

        def stop_grid(bb: ir.IRBuilder, status: ir.Value, idx: list[ir.Value]) -> None:
            for k, v in ((CTX_STATUS, status), (CTX_SITE, _i64(grid_site)),
                         (CTX_PID, idx[0]), (CTX_PID + 1, idx[1]), (CTX_PID + 2, idx[2])):
                bb.store(v, bb.gep(ctx, [_i64(k)]))
            bb.ret(status)

        def nest(level: int, idx: list[ir.Value]) -> None:
            if level < 0:
                st = b.call(self.fn, [slots, idx[0], idx[1], idx[2], gx, gy, gz, ctx])
                okb = g.append_basic_block("ok")
                b.cbranch(b.icmp_signed("!=", st, _i64(0)), fail, okb)
                b.position_at_end(okb)
                watchdog_tick(b, g, ctx, lambda bb, status: stop_grid(bb, status, idx))
                return
            count = (gx, gy, gz)[level]

            def inner(i):
                idx2 = list(idx)
                idx2[level] = i
                nest(level - 1, idx2)

            self._loop(b, g, count, inner)

        nest(2, [None, None, None])
        b.ret(_i64(0))
        fb = ir.IRBuilder(fail)
        fb.ret(fb.load(ctx))
        return g

    def _loop(self, b: ir.IRBuilder, fn: ir.Function, count, body, start=None) -> None:
        """A counted loop `for i in range(start, count)` with an i64 induction variable."""
        count = _i64(count) if isinstance(count, int) else count
        start = _i64(0) if start is None else (_i64(start) if isinstance(start, int) else start)
        pre = b.block
        hdr = fn.append_basic_block("loop")
        bodyb = fn.append_basic_block("body")
        exitb = fn.append_basic_block("endloop")
        b.branch(hdr)
        b.position_at_end(hdr)
        i = b.phi(I64)
        i.add_incoming(start, pre)
        b.cbranch(b.icmp_signed("<", i, count), bodyb, exitb)
        b.position_at_end(bodyb)
        body(i)
        nxt = b.add(i, _i64(1))
        i.add_incoming(nxt, b.block)
        b.branch(hdr)
        b.position_at_end(exitb)

    def loop(self, count, body, start=None) -> None:
        self._loop(self.b, self.fn, count, body, start)

    def loop_nest(self, shape: tuple[int, ...], body) -> None:
        def rec(d: int, idx: list[ir.Value]) -> None:
            if d == len(shape):
                body(idx)
                return
            self.loop(shape[d], lambda i: rec(d + 1, idx + [i]))

        rec(0, [])

    def count(self, name: str, amount: ir.Value) -> None:
        b = self.b
        p = b.gep(self.ctx, [_i64(COUNTERS_BASE + COUNTERS.index(name))])
        b.store(b.add(b.load(p), amount), p)

    def trace(self, kind: int, fields: list) -> None:
        """Append one record [kind, program, *fields] to the execution trace (one out-of-line call)."""
        words = [_i64(kind), self.program] + [(_i64(x) if isinstance(x, int) else x) for x in fields]
        words += [_i64(0)] * (TRACE_WORDS - len(words))
        st = self.b.call(self._trace_helper(), [self.ctx, *words])
        self.fail_if(self.b.icmp_signed("!=", st, _i64(0)), STATUS_NO_MEMORY, 0, 0, _i64(0), _i64(0))

    def _trace_helper(self) -> ir.Function:
        """`i64 nmp_trace(ctx, w0..w7)`: append a record if tracing is on, growing the buffer with realloc;
        returns 1 when out of memory. Shared by every call site (and both kernel variants) to keep the IR
        small, which is what LLVM's compile time scales with."""
        fn = self.module.globals.get("nmp_trace")
        if fn is not None:
            return fn
        fn = ir.Function(self.module, ir.FunctionType(I64, [I64.as_pointer()] + [I64] * TRACE_WORDS), "nmp_trace")
        fn.linkage = "internal"
        fn.attributes.add("noinline")
        ctx, *words = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        on = b.icmp_signed("!=", b.load(b.gep(ctx, [_i64(CTX_TRACE_ON)])), _i64(0))
        record = fn.append_basic_block("record")
        done = fn.append_basic_block("done")
        b.cbranch(on, record, done)
        b.position_at_end(record)
        lenp = b.gep(ctx, [_i64(CTX_TRACE_LEN)])
        capp = b.gep(ctx, [_i64(CTX_TRACE_CAP)])
        ptrp = b.gep(ctx, [_i64(CTX_TRACE_PTR)])
        n = b.load(lenp)
        grow = fn.append_basic_block("grow")
        store = fn.append_basic_block("store")
        oom = fn.append_basic_block("oom")
        b.cbranch(b.icmp_signed(">=", n, b.load(capp)), grow, store)
        b.position_at_end(grow)
        cap = b.load(capp)
        newcap = b.select(b.icmp_signed("<", cap, _i64(4096)), _i64(4096), b.mul(cap, _i64(2)))
        # a kernel that never ends (a spin loop) must not eat the host's memory: stop at the cap
        over = fn.append_basic_block("over")
        alloc = fn.append_basic_block("alloc")
        b.cbranch(b.icmp_signed(">", newcap, _i64(MAX_TRACE_RECORDS)), over, alloc)
        ir.IRBuilder(over).ret(_i64(1))
        b.position_at_end(alloc)
        i8p = I8.as_pointer()
        realloc = self.module.globals.get("realloc") or ir.Function(
            self.module, ir.FunctionType(i8p, [i8p, I64]), "realloc")
        new = b.ptrtoint(b.call(realloc, [b.inttoptr(b.load(ptrp), i8p), b.mul(newcap, _i64(TRACE_WORDS * 8))]),
                         I64)
        grown = fn.append_basic_block("grown")
        b.cbranch(b.icmp_signed("==", new, _i64(0)), oom, grown)
        b.position_at_end(grown)
        b.store(new, ptrp)
        b.store(newcap, capp)
        b.branch(store)
        b.position_at_end(store)
        base = b.inttoptr(b.load(ptrp), I64.as_pointer())
        rec = b.gep(base, [b.mul(n, _i64(TRACE_WORDS))])
        for k, w in enumerate(words):
            b.store(w, b.gep(rec, [_i64(k)]))
        b.store(b.add(n, _i64(1)), lenp)
        b.branch(done)
        b.position_at_end(done)
        b.ret(_i64(0))
        ir.IRBuilder(oom).ret(_i64(1))
        return fn

    def _copy_rows_helper(self, esize: int) -> ir.Function:
        """`void nmp_copy_rows_<e>(i8* tile, i64 addr, i64 rows, i64 cols, i64 row_stride, i64 col_stride,
        i64 tile_row_bytes, i1 to_tile)`: move `rows` x `cols` elements of `esize` bytes between global
        memory and a row-major tile; contiguous rows use memcpy."""
        name = f"nmp_copy_rows_{esize}"
        fn = self.module.globals.get(name)
        if fn is not None:
            return fn
        i8p = I8.as_pointer()
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [i8p, I64, I64, I64, I64, I64, I64, I1]), name)
        fn.linkage = "internal"
        fn.attributes.add("noinline")
        tile, addr, rows, cols, rstride, cstride, trow, to_tile = fn.args
        et = ir.IntType(esize * 8)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        saved_b, saved_fn = self.b, self.fn
        self.b, self.fn = b, fn
        try:
            def row(r):
                gaddr = b.add(addr, b.mul(r, rstride))
                tp = b.gep(tile, [b.mul(r, trow)])
                contiguous = b.icmp_signed("==", cstride, _i64(esize))
                with b.if_else(contiguous) as (then, otherwise):
                    with then:
                        gp = b.inttoptr(gaddr, i8p)
                        nbytes = b.mul(cols, _i64(esize))
                        with b.if_else(to_tile) as (t1, t2):
                            with t1:
                                self.memcpy(tp, gp, nbytes)
                            with t2:
                                self.memcpy(gp, tp, nbytes)
                    with otherwise:
                        tpe = b.bitcast(tp, et.as_pointer())

                        def elem(j):
                            gp = b.inttoptr(b.add(gaddr, b.mul(j, cstride)), et.as_pointer())
                            tq = b.gep(tpe, [j])
                            with b.if_else(to_tile) as (t1, t2):
                                with t1:
                                    b.store(b.load(gp), tq)
                                with t2:
                                    b.store(b.load(tq), gp)

                        self.loop(cols, elem)

            self.loop(rows, row)
            b.ret_void()
        finally:
            self.b, self.fn = saved_b, saved_fn
        return fn

    def site(self, op: Op, arg: str = "") -> int:
        """Index of an op's error site (the same in every variant of the kernel)."""
        key = (id(op), arg)
        if key not in self.site_ids:
            self.sites.append(Site(_op_label(op), str(op.loc), arg))
            self.site_ids[key] = len(self.sites) - 1
        return self.site_ids[key]

    def grid_site(self) -> int:
        """The error site of the grid loop (where the watchdog stops between programs)."""
        key = (id(self.func), "grid")
        if key not in self.site_ids:
            self.sites.append(Site("program loop", str(self.func.loc), ""))
            self.site_ids[key] = len(self.sites) - 1
        return self.site_ids[key]

    def watchdog_tick(self, loop: Op) -> None:
        """A loop back-edge: count it; when the watchdog says stop, leave with its status (see
        `codegen_watchdog`), the loop's Python line as the error site."""
        site = self.site(loop)

        def stop(b: ir.IRBuilder, status: ir.Value) -> None:
            for k, v in ((CTX_STATUS, status), (CTX_SITE, _i64(site)), (CTX_PID, self.pids[0]),
                         (CTX_PID + 1, self.pids[1]), (CTX_PID + 2, self.pids[2])):
                b.store(v, b.gep(self.ctx, [_i64(k)]))
            b.branch(self.err_exit)

        watchdog_tick(self.b, self.fn, self.ctx, stop)

    def fail_if(self, cond: ir.Value, status: int, site: int, arg_index: int, lo: ir.Value, hi: ir.Value) -> None:
        b = self.b
        bad = self.fn.append_basic_block("check_failed")
        cont = self.fn.append_basic_block("check_ok")
        b.cbranch(cond, bad, cont)
        b.position_at_end(bad)
        vals = [_i64(status), _i64(site), _i64(arg_index), lo, hi, *self.pids]
        for k, v in enumerate(vals):
            b.store(v, b.gep(self.ctx, [_i64(k)]))
        b.branch(self.err_exit)
        b.position_at_end(cont)

    def buffer(self, v: Value) -> ir.Value:
        """The scratchpad buffer of a tile value: its planned place in the scratchpad arena, or (for
        codegen temporaries outside the plan) a buffer of its own in the entry block."""
        key = id(v)
        if key not in self.bufs and self.plan is not None and self.plan.offset(v) is not None:
            if self.arena is None:
                arr = self.alloca_builder.alloca(ir.ArrayType(I8, max(self.plan.peak_bytes, 64)), name="spm")
                arr.align = 64
                self.arena = arr
                self.spm_bytes += self.plan.peak_bytes
            st = storage_type(v.type)
            p = self.alloca_builder.gep(self.arena, [_i64(0), _i64(self.plan.offset(v))])
            self.bufs[key] = self.alloca_builder.bitcast(p, st.as_pointer())
        if key not in self.bufs:
            st = storage_type(v.type)
            n = v.type.numel
            arr = self.alloca_builder.alloca(ir.ArrayType(st, n), name=f"spm_{v.name}")
            arr.align = 64
            self.bufs[key] = self.alloca_builder.bitcast(arr, st.as_pointer())
            nbytes = v.type.nbytes
            self.spm_bytes += nbytes
            self.buffers.append((v.name, str(v.type), nbytes))
        return self.bufs[key]

    def load_elem(self, v: Value, idx: ir.Value) -> ir.Value:
        regs = self._elem_regs
        if regs is not None and id(v) in regs:  # inside a fused run: this element is in a register
            return regs[id(v)]
        return to_compute(self.b, self.b.load(self.b.gep(self.buffer(v), [idx])), v.type)

    def store_elem(self, v: Value, idx: ir.Value, x: ir.Value) -> None:
        self.b.store(to_storage(self.b, x, v.type), self.b.gep(self.buffer(v), [idx]))

    def copy_tile(self, dst: Value, src: Value) -> None:
        if self.timing_only or self.buffer(dst) is self.buffer(src):
            return
        if self.plan is not None and self.plan.offset(dst) is not None:
            if self.plan.offset(dst) == self.plan.offset(src):
                return
        nbytes = dst.type.nbytes
        self.memcpy(self.buffer(dst), self.buffer(src), _i64(nbytes))

    def memcpy(self, dst: ir.Value, src: ir.Value, nbytes: ir.Value) -> None:
        b = self.b
        i8p = I8.as_pointer()
        name = "llvm.memcpy.p0i8.p0i8.i64"
        fn = self.module.globals.get(name) or ir.Function(
            self.module, ir.FunctionType(ir.VoidType(), [i8p, i8p, I64, I1]), name)
        b.call(fn, [b.bitcast(dst, i8p), b.bitcast(src, i8p), nbytes, ir.Constant(I1, 0)])

    def scalar(self, v: Value) -> ir.Value:
        return self.vals[id(v)]

    # -- ops ------------------------------------------------------------------------------------------
    def emit_block(self, ops: list[Op]) -> None:
        i = 0
        while i < len(ops):
            run = self._fusable_run(ops, i)
            if len(run) > 1:
                if self.b.block.is_terminated:
                    self.b.position_at_end(self.fn.append_basic_block("dead"))
                self.emit_fused(run)
                i += len(run)
                continue
            self.emit_op(ops[i])
            i += 1

    # Elementwise fusion: consecutive elementwise tile ops of one shape run in a single loop, and values
    # used only inside the run stay in registers. One loop instead of one per op is both faster to
    # simulate and much faster for LLVM to compile. The scratchpad plan treats a run as one step.
    def _fusable_run(self, ops: list[Op], start: int) -> list[Op]:
        return ops[start:start + fused_run_length(ops, start)]

    def _users(self) -> dict[int, int]:
        if self._use_counts is None:
            self._use_counts = use_counts(self.func)
        return self._use_counts

    def emit_fused(self, run: list[Op]) -> None:
        accesses = run_accesses(run, self._users())  # charged once, on the run's first vector-op record
        inside: dict[int, int] = {}
        for op in run:
            for o in op.operands:
                inside[id(o)] = inside.get(id(o), 0) + 1
        mem = None
        if run[-1].name in FUSABLE_MEMORY_OPS:  # the run computes this gather/scatter/atomic's addresses
            mem, run = run[-1], run[:-1]
            parts = {"nmp.gather": self._gather_parts, "nmp.scatter": self._scatter_parts,
                     "nmp.atomic": self._atomic_parts}[mem.name](mem)
        users = self._users()
        produced = {id(op.results[0]) for op in run}
        # a result needs its tile if anything outside the run reads it
        keep = {k for k in produced if users.get(k, 0) > inside.get(k, 0)}
        numel = run[0].results[0].type.numel
        if not self.timing_only:
            def body(i):
                regs: dict[int, ir.Value] = {}

                def get(v):
                    if id(v) in regs:
                        return regs[id(v)]
                    return self.load_elem(v, i) if v.type.is_tensor else self.scalar(v)

                for op in run:
                    r = op.results[0]
                    if op.name == "nmp.splat":
                        val = self.scalar(op.operands[0])
                    elif op.name == "nmp.const":
                        val = _const(r.type.scalar, op.attrs["value"])
                    else:
                        val = emit_elementwise(self.b, op.attrs["fn"], op.attrs, [get(o) for o in op.operands],
                                               [o.type for o in op.operands], r.type)
                    regs[id(r)] = val
                    if id(r) in keep:
                        self.store_elem(r, i, val)
                if mem is not None:
                    self._elem_regs = regs
                    try:
                        parts[1](i)
                    finally:
                        self._elem_regs = None

            self.loop(numel, body)
        for op in run:  # the same counters and trace records as unfused ops, in op order
            if op.name == "nmp.vec":
                r = op.results[0]
                self.count("vec_elems", _i64(r.type.numel))
                self.trace(KIND_VEC, [r.type.numel, 0, dtype_code(r.type.elem), classify(op), accesses])
                accesses = 0
        if mem is not None:
            parts[2]()

    def emit_op(self, op: Op) -> None:
        if self.b.block.is_terminated:
            self.b.position_at_end(self.fn.append_basic_block("dead"))
        handler = getattr(self, "op_" + op.name.replace(".", "_"), None)
        try:
            if handler is not None:
                handler(op)
            elif op.results and not op.results[0].type.is_tensor:
                self.op_scalar(op)
            else:
                raise NotImplementedError(op.name)
        except NotImplementedError as e:
            raise NMPCompilationError(f"operation '{_op_label(op)}' is not supported on nmp ({e})",
                                      kernel=self.func.name, loc=str(op.loc)) from None

    def op_scalar(self, op: Op) -> None:
        args = [self.scalar(o) for o in op.operands]
        r = op.results[0]
        self.vals[id(r)] = emit_elementwise(self.b, op.name, op.attrs, args, [o.type for o in op.operands],
                                            r.type)

    def op_arith_constant(self, op: Op) -> None:
        r = op.results[0]
        self.vals[id(r)] = _const(r.type, op.attrs["value"])

    def op_nmp_program_id(self, op: Op) -> None:
        self.vals[id(op.result)] = self.b.trunc(self.pids[op.attrs["axis"]], I32)

    def op_nmp_num_programs(self, op: Op) -> None:
        self.vals[id(op.result)] = self.b.trunc(self.nprogs[op.attrs["axis"]], I32)

    def op_nmp_addptr(self, op: Op) -> None:
        p, off = (self.scalar(o) for o in op.operands)
        off = self.b.sext(off, I64) if off.type.width < 64 else off
        self.vals[id(op.result)] = self.b.add(p, self.b.mul(off, _i64(op.attrs["elem_bytes"])))

    def op_nmp_return(self, op: Op) -> None:
        self.b.ret(_i64(0))

    def op_nmp_const(self, op: Op) -> None:
        if self.timing_only:
            return
        r = op.result
        c = _const(r.type.scalar, op.attrs["value"])
        self.loop(r.type.numel, lambda i: self.store_elem(r, i, c))

    def op_nmp_splat(self, op: Op) -> None:
        if self.timing_only:
            return
        r = op.result
        x = self.scalar(op.operands[0])
        self.loop(r.type.numel, lambda i: self.store_elem(r, i, x))

    def op_nmp_iota(self, op: Op) -> None:
        if self.timing_only:
            return
        r = op.result
        shape, axis, start = r.type.shape, op.attrs["axis"], op.attrs["start"]
        strides = _row_major(shape)
        ct = compute_type(r.type)

        def body(idx):
            flat = self._flat(idx, strides)
            v = self.b.add(idx[axis], _i64(start))
            self.store_elem(r, flat, v if ct.width == 64 else self.b.trunc(v, ct))

        self.loop_nest(shape, body)

    def _flat(self, idx: list[ir.Value], strides: tuple[int, ...]) -> ir.Value:
        acc = None
        for i, s in zip(idx, strides):
            if s == 0:
                continue
            term = i if s == 1 else self.b.mul(i, _i64(s))
            acc = term if acc is None else self.b.add(acc, term)
        return acc if acc is not None else _i64(0)

    def op_nmp_view(self, op: Op) -> None:
        self.bufs[id(op.result)] = self.buffer(op.operands[0])

    def op_nmp_broadcast(self, op: Op) -> None:
        if self.timing_only:
            return
        src, r = op.operands[0], op.result
        out_shape = r.type.shape
        in_strides = tuple(0 if d == 1 else s for d, s in zip(src.type.shape, _row_major(src.type.shape)))
        out_strides = _row_major(out_shape)

        def body(idx):
            x = self.b.load(self.b.gep(self.buffer(src), [self._flat(idx, in_strides)]))
            self.b.store(x, self.b.gep(self.buffer(r), [self._flat(idx, out_strides)]))

        self.loop_nest(out_shape, body)

    def op_nmp_transpose(self, op: Op) -> None:
        if self.timing_only:
            return
        src, r = op.operands[0], op.result
        order = op.attrs["order"]
        in_strides = _row_major(src.type.shape)
        perm_strides = tuple(in_strides[o] for o in order)
        out_strides = _row_major(r.type.shape)

        def body(idx):
            x = self.b.load(self.b.gep(self.buffer(src), [self._flat(idx, perm_strides)]))
            self.b.store(x, self.b.gep(self.buffer(r), [self._flat(idx, out_strides)]))

        self.loop_nest(r.type.shape, body)

    def op_nmp_vec(self, op: Op) -> None:
        r = op.result
        fn = op.attrs["fn"]
        tys = [o.type for o in op.operands]

        def body(i):
            # scalar operands (e.g. the i1 condition of a select between tiles) are used as they are
            args = [self.load_elem(o, i) if o.type.is_tensor else self.scalar(o) for o in op.operands]
            self.store_elem(r, i, emit_elementwise(self.b, fn, op.attrs, args, tys, r.type))

        if not self.timing_only:
            self.loop(r.type.numel, body)
        self.count("vec_elems", _i64(r.type.numel))
        self.trace(KIND_VEC, [r.type.numel, 0, dtype_code(r.type.elem), classify(op),
                            run_accesses([op], self._users())])

    def op_nmp_matmul(self, op: Op) -> None:
        a, bm, acc = op.operands
        r = op.result
        m, k = a.type.shape[-2:]
        n = bm.type.shape[-1]
        if len(a.type.shape) != 2:
            raise NotImplementedError("batched tl.dot (3-D operands)")
        if self.timing_only:
            self.count("macs", _i64(m * n * k))
            self.trace(KIND_MATMUL, [m, n, k, dtype_code(a.type.elem)])
            return
        self.copy_tile(r, acc)
        is_int = r.type.is_int
        b = self.b

        def row(i):
            def kk(kv):
                av = self.load_elem(a, b.add(b.mul(i, _i64(k)), kv))
                if is_int:
                    av = b.sext(av, compute_type(r.type))

                def col(j):
                    bv = self.load_elem(bm, b.add(b.mul(kv, _i64(n)), j))
                    oi = b.add(b.mul(i, _i64(n)), j)
                    cur = self.load_elem(r, oi)
                    if is_int:
                        new = b.add(cur, b.mul(av, b.sext(bv, cur.type)))
                    else:
                        fma = self.module.globals.get("llvm.fmuladd.f32") or ir.Function(
                            self.module, ir.FunctionType(F32, [F32, F32, F32]), "llvm.fmuladd.f32")
                        new = b.call(fma, [av, bv, cur])
                    self.store_elem(r, oi, new)

                self.loop(n, col)

            self.loop(k, kk)

        self.loop(m, row)
        self.count("macs", _i64(m * n * k))
        self.trace(KIND_MATMUL, [m, n, k, dtype_code(a.type.elem)])

    def op_nmp_reduce(self, op: Op) -> None:
        inputs = op.operands
        shape = inputs[0].type.shape
        axis = op.attrs["axis"]
        outer = _prod(shape[:axis])
        n = shape[axis]
        inner = _prod(shape[axis + 1:])
        region = op.regions[0].block
        combine = self._combiner(region, [x.type.elem for x in inputs])
        b = self.b
        results = op.results
        scalar_out = not results[0].type.is_tensor
        if self.timing_only:
            for res in results:
                if not res.type.is_tensor:
                    self.vals[id(res)] = _const(res.type, 0)
            self.count("vec_elems", _i64(_prod(shape)))
            self.trace(KIND_VEC, [_prod(shape), 1, dtype_code(inputs[0].type.elem), region_class(region),
                                len(inputs)])
            return

        def at(o, k):
            return b.add(b.add(b.mul(o, _i64(n * inner)), b.mul(k, _i64(inner))), i_cur[0])

        i_cur = [None]
        out_vals = [None]

        # Independent partial results per lane break the serial dependency chain, so the reduction
        # vectorises; the combine function is associative (Triton requires it), only the order differs.
        lanes = REDUCE_LANES if n % REDUCE_LANES == 0 and n >= 2 * REDUCE_LANES else 1

        def per_position(o, i):
            i_cur[0] = i
            init = [[self.load_elem(x, at(o, _i64(j))) for x in inputs] for j in range(lanes)]
            width = len(inputs)

            def step(kphi, flat):
                base = b.mul(kphi, _i64(lanes))
                new = []
                for j in range(lanes):
                    vals = [self.load_elem(x, at(o, b.add(base, _i64(j)))) for x in inputs]
                    new += combine(flat[j * width:(j + 1) * width], vals)
                return new

            flat = self._carried_loop("red", 1, n // lanes, [v for lane in init for v in lane], step)
            parts = [flat[j * width:(j + 1) * width] for j in range(lanes)]
            while len(parts) > 1:  # pairwise tree of the lanes' partial results
                parts = [combine(parts[k], parts[k + 1]) for k in range(0, len(parts), 2)]
            final = parts[0]
            if scalar_out:
                out_vals[0] = final
            else:
                oi = b.add(b.mul(o, _i64(inner)), i)
                for res, p in zip(results, final):
                    self.store_elem(res, oi, p)

        if scalar_out:
            per_position(_i64(0), _i64(0))
            for res, p in zip(results, out_vals[0]):
                self.vals[id(res)] = round_to(b, p, res.type)  # a wide fp16/bf16 sum rounds here
        else:
            self.loop(outer, lambda o: self.loop(inner, lambda i: per_position(o, i)))
        self.count("vec_elems", _i64(_prod(shape)))
        self.trace(KIND_VEC, [_prod(shape), 1, dtype_code(inputs[0].type.elem), region_class(region),
                            len(inputs)])

    def op_scf_for(self, op: Op) -> None:
        loop = Operands(op)
        lb, ub, step = (self.scalar(o) for o in (loop.lb, loop.ub, loop.step))
        inits = loop.inits
        body = op.regions[0].block
        iv, bargs = body.args[0], body.args[1:]
        b = self.b
        for barg, init in zip(bargs, inits):
            if barg.type.is_tensor:
                self.copy_tile(barg, init)
        pre = b.block
        hdr = self.fn.append_basic_block("for")
        bodyb = self.fn.append_basic_block("for_body")
        exitb = self.fn.append_basic_block("for_end")
        b.branch(hdr)
        b.position_at_end(hdr)
        ivp = b.phi(lb.type)
        ivp.add_incoming(lb, pre)
        phis = {}
        for barg, init in zip(bargs, inits):
            if not barg.type.is_tensor:
                p = b.phi(self.scalar(init).type)
                p.add_incoming(self.scalar(init), pre)
                phis[id(barg)] = p
                self.vals[id(barg)] = p
        self.vals[id(iv)] = ivp
        b.cbranch(b.icmp_signed("<", ivp, ub), bodyb, exitb)
        b.position_at_end(bodyb)
        self.loops.append((ivp, lb))
        self.emit_block(body.ops[:-1])
        self.loops.pop()
        yield_op = body.ops[-1]
        self._copy_yields(bargs, yield_op.operands)
        self.watchdog_tick(op)
        latch = b.block
        ivp.add_incoming(b.add(ivp, step), latch)
        for barg, y in zip(bargs, yield_op.operands):
            if id(barg) in phis:
                phis[id(barg)].add_incoming(self.scalar(y), latch)
        b.branch(hdr)
        b.position_at_end(exitb)
        for r, barg in zip(op.results, bargs):
            if r.type.is_tensor:
                self.bufs[id(r)] = self.buffer(barg)
            else:
                self.vals[id(r)] = phis[id(barg)]

    def _copy_yields(self, dsts: list[Value], srcs: list[Value]) -> None:
        """Copy yielded tiles into loop-carried buffers, through temporaries when they overlap."""
        pairs = [(d, s) for d, s in zip(dsts, srcs) if d.type.is_tensor and self.buffer(d) is not self.buffer(s)]
        dst_bufs = {id(self.buffer(d)) for d, _ in pairs}
        staged = []
        for d, s in pairs:
            if id(self.buffer(s)) in dst_bufs:
                tmp = Value(s.name + "_stage", s.type)
                self.copy_tile(tmp, s)
                staged.append((d, tmp))
            else:
                staged.append((d, s))
        for d, s in staged:
            self.copy_tile(d, s)

    def op_scf_if(self, op: Op) -> None:
        b = self.b
        cond = self.scalar(op.operands[0])
        then_b = self.fn.append_basic_block("then")
        else_b = self.fn.append_basic_block("else")
        merge = self.fn.append_basic_block("endif")
        b.cbranch(cond, then_b, else_b)
        incoming = []
        for region, blk in zip(op.regions, (then_b, else_b)):
            b.position_at_end(blk)
            ops = region.block.ops
            self.emit_block(ops[:-1])
            y = ops[-1]
            if b.block.is_terminated:
                continue
            for r, s in zip(op.results, y.operands):
                if r.type.is_tensor:
                    self.copy_tile(r, s)
            incoming.append((b.block, [self.scalar(s) if not r.type.is_tensor else None
                                       for r, s in zip(op.results, y.operands)]))
            b.branch(merge)
        b.position_at_end(merge)
        if not incoming:
            b.unreachable()
            return
        for k, r in enumerate(op.results):
            if r.type.is_tensor:
                continue
            p = b.phi(compute_type(r.type))
            for blk, vals in incoming:
                p.add_incoming(vals[k], blk)
            self.vals[id(r)] = p

    def op_scf_while(self, op: Op) -> None:
        b = self.b
        before, after = op.regions[0].block, op.regions[1].block
        for a, init in zip(before.args, op.operands):
            if a.type.is_tensor:
                self.copy_tile(a, init)
        pre = b.block
        hdr = self.fn.append_basic_block("while")
        afterb = self.fn.append_basic_block("while_body")
        exitb = self.fn.append_basic_block("while_end")
        b.branch(hdr)
        b.position_at_end(hdr)
        phis = {}
        for a, init in zip(before.args, op.operands):
            if not a.type.is_tensor:
                p = b.phi(self.scalar(init).type)
                p.add_incoming(self.scalar(init), pre)
                phis[id(a)] = p
                self.vals[id(a)] = p
        self.emit_block(before.ops[:-1])
        cond_op = before.ops[-1]
        cond = self.scalar(Operands(cond_op).cond)
        fwd = Operands(cond_op).values
        for a, v in zip(after.args, fwd):
            if a.type.is_tensor:
                self.bufs[id(a)] = self.buffer(v)
            else:
                self.vals[id(a)] = self.scalar(v)
        for r, v in zip(op.results, fwd):
            if r.type.is_tensor:
                self.bufs[id(r)] = self.buffer(v)
            else:
                self.vals[id(r)] = self.scalar(v)
        b.cbranch(cond, afterb, exitb)
        b.position_at_end(afterb)
        self.emit_block(after.ops[:-1])
        y = after.ops[-1]
        self._copy_yields(before.args, y.operands)
        self.watchdog_tick(op)
        latch = b.block
        for a, v in zip(before.args, y.operands):
            if id(a) in phis:
                phis[id(a)].add_incoming(self.scalar(v), latch)
        b.branch(hdr)
        b.position_at_end(exitb)

    # -- memory ----------------------------------------------------------------------------------------
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

    def _box_copy(self, tile: Value, base_addr, offset, strides, valid, to_tile: bool) -> None:
        """Copy the valid box between global memory and a tile buffer (row-major in the tile).

        The innermost two dimensions go to a shared out-of-line row copier; outer dimensions loop here."""
        b = self.b
        shape = tile.type.shape
        st = storage_type(tile.type)
        esize = tile.type.elem_bytes
        tstrides = _row_major(shape)
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
            toff = b.mul(self._flat(idx + [_i64(0)] * (rank - len(idx)), tstrides), _i64(esize))
            tptr = b.gep(buf8, [toff])
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

    def _trace_dma(self, kind: int, root: Value, offset, strides, valid, esize: int, flags=0) -> None:
        """Record a descriptor as rows of contiguous bytes: [arg, first byte, rows, row bytes, row stride].

        Rank <= 2 is exact. For rank 3+ the outer dimensions are folded into rows at the stride of
        dimension -2; a non-unit inner stride makes every element its own row.
        """
        b = self.b
        index = self.arg_info[id(root)][0]
        if not valid:
            self.trace(kind, [index, offset, 1, esize, esize, flags])
            return
        contiguous = b.icmp_signed("==", strides[-1], _i64(esize))
        outer = _prod_values(b, valid[:-1])
        rows = b.select(contiguous, outer, b.mul(outer, valid[-1]))
        row_bytes = b.select(contiguous, b.mul(valid[-1], _i64(esize)), _i64(esize))
        outer_stride = strides[-2] if len(strides) >= 2 else _i64(0)
        row_stride = b.select(contiguous, outer_stride, strides[-1])
        self.trace(kind, [index, offset, rows, row_bytes, row_stride, flags])

    def _prefetch_flag(self, op: Op):
        """Multi-buffered loads: every iteration but the first was prefetched during the previous one
        (flags = FLAG_PREFETCHED, bit 0)."""
        if op.attrs.get("stages", 1) > 1 and self.loops:
            iv, lb = self.loops[-1]
            return self.b.zext(self.b.icmp_signed("!=", iv, lb), I64)
        return 0

    def op_nmp_dma_load(self, op: Op) -> None:
        b = self.b
        r = op.result
        shape = r.type.shape
        root, offset, strides, bounds, guard = self._dma_operands(op)
        other = Operands(op).other
        esize = r.type.elem_bytes
        valid, ok, full = self._valid_box(shape, bounds, guard)
        is_scalar = not r.type.is_tensor
        tile = Value(r.name + "_spm", r.type) if is_scalar else r
        if self.timing_only:
            with b.if_then(ok):
                self._check_range(op, root, offset, strides, valid, esize)
                self.count("dma_loads", _i64(1))
                self.count("dma_load_bytes", b.mul(_prod_values(b, valid), _i64(esize)))
                self._trace_dma(KIND_DMA_LOAD, root, offset, strides, valid, esize, self._prefetch_flag(op))
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
            self._check_range(op, root, offset, strides, valid, esize)
            self._box_copy(tile, self.arg_info[id(root)][1], offset, strides, valid, True)
            self.count("dma_loads", _i64(1))
            self.count("dma_load_bytes", b.mul(_prod_values(b, valid), _i64(esize)))
            self._trace_dma(KIND_DMA_LOAD, root, offset, strides, valid, esize, self._prefetch_flag(op))
        if is_scalar:
            self.vals[id(r)] = self.load_elem(tile, _i64(0))

    def op_nmp_dma_store(self, op: Op) -> None:
        b = self.b
        root, offset, strides, bounds, guard = self._dma_operands(op)
        value = Operands(op).value
        shape = value.type.shape
        esize = value.type.elem_bytes
        valid, ok, _full = self._valid_box(shape, bounds, guard)
        if not value.type.is_tensor:
            tile = Value(value.name + "_spm", value.type)
            if not self.timing_only:
                self.store_elem(tile, _i64(0), self.scalar(value))
        else:
            tile = value
        with b.if_then(ok):
            self._check_range(op, root, offset, strides, valid, esize)
            if not self.timing_only:
                self._box_copy(tile, self.arg_info[id(root)][1], offset, strides, valid, False)
            self.count("dma_stores", _i64(1))
            self.count("dma_store_bytes", b.mul(_prod_values(b, valid), _i64(esize)))
            self._trace_dma(KIND_DMA_STORE, root, offset, strides, valid, esize)

    def _elem_check(self, op: Op, root: Value, addr: ir.Value, esize: int, site: int) -> None:
        b = self.b
        index, base, span = self.arg_info[id(root)]
        off = b.sub(addr, base)
        bad = b.or_(b.icmp_signed("<", off, _i64(0)), b.icmp_signed(">", b.add(off, _i64(esize)), span))
        self.fail_if(bad, STATUS_OUT_OF_BOUNDS, site, index, off, b.add(off, _i64(esize)))

    def op_nmp_gather(self, op: Op) -> None:
        n, body, finish = self._gather_parts(op)
        self.loop(n, body)
        finish()

    def _gather_parts(self, op: Op):
        """(elements, per-element body, epilogue) of a gather, so a fused run can end in one."""
        b = self.b
        g = Operands(op)
        root, ptrs, mask, other = g.base, g.ptrs, g.mask, g.other
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
                    addr = get(ptrs, i)
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

    def op_nmp_scatter(self, op: Op) -> None:
        n, body, finish = self._scatter_parts(op)
        self.loop(n, body)
        finish()

    def _scatter_parts(self, op: Op):
        b = self.b
        sc = Operands(op)
        root, ptrs, value, mask = sc.base, sc.ptrs, sc.value, sc.mask
        st = storage_type(value.type)
        esize = value.type.elem_bytes
        site = self.site(op, root.name)
        n = value.type.numel

        get = self._elem

        def body(i):
            m = get(mask, i) if mask is not None else ir.Constant(I1, 1)
            with b.if_then(m):
                addr = get(ptrs, i)
                self._elem_check(op, root, addr, esize, site)
                x = to_storage(b, get(value, i), value.type)
                b.store(x, b.inttoptr(addr, st.as_pointer()))

        def finish():
            self.count("scatter_elems", _i64(n))
            self.trace(KIND_SCATTER, [self.arg_info[id(root)][0], 0, n, esize, self.arg_info[id(root)][2]])

        return n, body, finish


def _prod(xs) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


def _prod_values(b: ir.IRBuilder, vals: list[ir.Value]) -> ir.Value:
    acc = _i64(1)
    for v in vals:
        acc = b.mul(acc, v)
    return acc


def _const(t: Ty, value) -> ir.Constant:
    ct = compute_type(t)
    if isinstance(ct, ir.IntType):
        v = int(value)
        if ct.width == 1:
            v = 1 if v else 0
        return ir.Constant(ct, v)
    return ir.Constant(ct, float(value))


def _op_label(op: Op) -> str:
    names = {"nmp.dma_load": "tt.load", "nmp.gather": "tt.load", "nmp.dma_store": "tt.store",
             "nmp.scatter": "tt.store"}
    if op.name == "nmp.vec":
        return op.attrs.get("fn", op.name)
    return names.get(op.name, op.name)


def _triton_ty(elem: str | None) -> str:
    return {"f16": "fp16", "bf16": "bf16", "f32": "fp32", "f64": "fp64"}.get(elem or "", elem or "")


def generate_llvm(mod: Module, triple: str, data_layout: str, plan: ScratchpadPlan | None = None,
                  timing_variant: bool = False) -> CodegenResult:
    """nmpir module -> LLVM IR text plus the metadata the simulator needs (and, if asked and possible, the
    timing-only variant of the kernel)."""
    return KernelCodegen(mod.kernel, triple, data_layout, plan, timing_variant).build()

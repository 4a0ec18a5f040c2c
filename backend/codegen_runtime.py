"""Out-of-line runtime code of a compiled kernel: in the kernel's module, the native grid loop that runs every
program and the row copier of DMA descriptors (`define_copy_rows`, one per element size); and the definitions of
the runtime library's helpers (the trace-record appender, the failed-check record, the watchdog:
`runtime_library`), which a kernel's module only declares. Out of line and shared by every call site (and both
kernel variants), the IR stays small, which is what LLVM's compile time scales with.
"""

from __future__ import annotations

from llvmlite import ir

from triton_nmp.abi import (
    CTX_PID,
    CTX_SITE,
    CTX_SPILL_PTR,
    CTX_STATUS,
    CTX_TRACE_CAP,
    CTX_TRACE_LEN,
    CTX_TRACE_ON,
    CTX_TRACE_PTR,
    MAX_TRACE_RECORDS,
    STATUS_NO_MEMORY,
    TRACE_WORDS,
)

from .codegen_base import CodegenBase, _i64, declare_memcpy, for_range, if_unlikely
from .codegen_scalar import I1, I8, I64
from .codegen_watchdog import define_watchdog
from .codegen_watchdog import tick as watchdog_tick
from .runtime_abi import declare, define

I8P = I8.as_pointer()


class RuntimeCodegen(CodegenBase):
    """The grid loop of a kernel and its declarations of the runtime library (see the module docstring)."""

    def _build_grid(self, name: str) -> ir.Function:
        gty = ir.FunctionType(I64, [I64.as_pointer(), I64, I64, I64, I64.as_pointer()])
        g = ir.Function(self.module, gty, name)
        slots, gx, gy, gz, ctx = g.args
        b = ir.IRBuilder(g.append_basic_block("entry"))
        fail = g.append_basic_block("fail")

        grid_site = self.grid_site()
        spill = self._spill_area_bytes()
        area = None
        i8p = I8.as_pointer()
        if spill:  # the spill area of one program at a time (a launch runs its programs one after another)
            malloc = self.module.globals.get("malloc") or ir.Function(self.module, ir.FunctionType(i8p, [I64]),
                                                                       "malloc")
            area = b.call(malloc, [_i64(spill)])
            b.store(b.ptrtoint(area, I64), b.gep(ctx, [_i64(CTX_SPILL_PTR)]))
            with if_unlikely(b, g, b.icmp_unsigned("==", b.ptrtoint(area, I64), _i64(0))):
                b.store(_i64(STATUS_NO_MEMORY), b.gep(ctx, [_i64(CTX_STATUS)]))
                b.ret(_i64(STATUS_NO_MEMORY))

        def ret(bb: ir.IRBuilder, status: ir.Value) -> None:
            if area is not None:
                free = self.module.globals.get("free") or ir.Function(
                    self.module, ir.FunctionType(ir.VoidType(), [i8p]), "free")
                bb.call(free, [area])
                bb.store(_i64(0), bb.gep(ctx, [_i64(CTX_SPILL_PTR)]))
            bb.ret(status)

        def stop_grid(bb: ir.IRBuilder, status: ir.Value, idx: list[ir.Value]) -> None:
            for k, v in ((CTX_STATUS, status), (CTX_SITE, _i64(grid_site)),
                         (CTX_PID, idx[0]), (CTX_PID + 1, idx[1]), (CTX_PID + 2, idx[2])):
                bb.store(v, bb.gep(ctx, [_i64(k)]))
            ret(bb, status)

        def nest(level: int, idx: list[ir.Value]) -> None:
            if level < 0:
                st = b.call(self.fn, [slots, idx[0], idx[1], idx[2], gx, gy, gz, ctx])
                okb = g.append_basic_block("ok")
                b.cbranch(b.icmp_signed("!=", st, _i64(0)), fail, okb)
                b.position_at_end(okb)
                watchdog_tick(b, g, ctx, declare(self.module, "watchdog"),
                              lambda bb, status: stop_grid(bb, status, idx))
                return
            with for_range(b, g, (gx, gy, gz)[level]) as i:
                nest(level - 1, idx[:level] + [i] + idx[level + 1:])

        nest(2, [None, None, None])
        ret(b, _i64(0))
        fb = ir.IRBuilder(fail)
        ret(fb, fb.load(ctx))
        return g

    def _spill_area_bytes(self) -> int:
        """Bytes of the kernel's spill area (its `nmp.spill_area` op, first in the body), 0 without one."""
        ops = self.func.body.ops
        return int(ops[0].attrs["bytes"]) if ops and ops[0].name == "nmp.spill_area" else 0

    def _trace_helper(self) -> ir.Function:
        """The trace-record appender of the runtime library (`define_trace`)."""
        return declare(self.module, "trace")

    def _copy_rows_helper(self, esize: int) -> ir.Function:
        """`nmp_copy_rows_<esize>` (`define_copy_rows`), defined once in the kernel's module. Not in the runtime
        library: in the module its call sites' constant arguments specialise it (a row of a known size is a few
        vector moves instead of a call to memcpy), which GPT-2's 512-token prefill runs ~3 s faster with."""
        name = f"nmp_copy_rows_{esize}"
        return self.module.globals.get(name) or define_copy_rows(self.module, name, esize)


# -- the runtime library's definitions (`runtime_library`: compiled once per process, not per kernel) --

def build_library(module: ir.Module) -> None:
    """Define every helper of the runtime library in `module`."""
    define_trace(module)
    define_fail(module)
    define_watchdog(module, define(module, "watchdog"))


def define_trace(module: ir.Module) -> None:
    """`i64 trace(ctx, w0..w7)`: append a record if tracing is on, growing the buffer with realloc (up to
    MAX_TRACE_RECORDS); returns 1 when out of memory or over the cap."""
    fn = define(module, "trace")
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
    realloc = ir.Function(module, ir.FunctionType(I8P, [I8P, I64]), "realloc")
    new = b.ptrtoint(b.call(realloc, [b.inttoptr(b.load(ptrp), I8P), b.mul(newcap, _i64(TRACE_WORDS * 8))]), I64)
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


def define_fail(module: ir.Module) -> None:
    """`void fail(ctx, status, site, argument, lo, hi, px, py, pz)`: record a failed check in the context
    block's error words (`abi.CTX_STATUS`...: status, site, argument index, byte range, program id)."""
    fn = define(module, "fail")
    ctx, *words = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    for k, w in enumerate(words):
        b.store(w, b.gep(ctx, [_i64(k)]))
    b.ret_void()


def define_copy_rows(module: ir.Module, name: str, esize: int) -> ir.Function:
    """`void <name>(i8* tile, i64 addr, i64 rows, i64 cols, i64 row_stride, i64 col_stride, i64 tile_row_bytes,
    i1 to_tile)`: move `rows` x `cols` elements of `esize` bytes between global memory and a row-major tile;
    contiguous rows use memcpy. Internal and never inlined: one copy serves every call site of the module."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I8P, I64, I64, I64, I64, I64, I64, I1]), name)
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    tile, addr, rows, cols, rstride, cstride, trow, to_tile = fn.args
    et = ir.IntType(esize * 8)
    memcpy = declare_memcpy(module)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    with for_range(b, fn, rows) as r:
        gaddr = b.add(addr, b.mul(r, rstride))
        tp = b.gep(tile, [b.mul(r, trow)])
        with b.if_else(b.icmp_signed("==", cstride, _i64(esize))) as (contiguous, strided):
            with contiguous:
                gp = b.inttoptr(gaddr, I8P)
                nbytes = b.mul(cols, _i64(esize))
                with b.if_else(to_tile) as (t1, t2):
                    with t1:
                        b.call(memcpy, [tp, gp, nbytes, ir.Constant(I1, 0)])
                    with t2:
                        b.call(memcpy, [gp, tp, nbytes, ir.Constant(I1, 0)])
            with strided:
                tpe = b.bitcast(tp, et.as_pointer())
                with for_range(b, fn, cols) as j:
                    gp = b.inttoptr(b.add(gaddr, b.mul(j, cstride)), et.as_pointer())
                    tq = b.gep(tpe, [j])
                    with b.if_else(to_tile) as (t1, t2):
                        with t1:
                            b.store(b.load(gp), tq)
                        with t2:
                            b.store(b.load(tq), gp)
    b.ret_void()
    return fn

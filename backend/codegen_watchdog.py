"""Watchdog checks in generated code: the back-edge tick and the body of the runtime library's
`watchdog` helper it calls (`runtime_library`).

Contract: `simulator/watchdog.py` (the words of the context block, the limits, how a stop is
reported). Here: `tick()` costs a load, a decrement, a store and a not-taken branch per loop
iteration or program; every WATCHDOG_TICKS of them the helper reads the host clock, bounds the
simulated cycles from the counters, and (main thread only, at most every SIGNAL_CHECK_NS) takes the
GIL to run Python's pending signal handlers, so Ctrl-C stops a long kernel.
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from triton_nmp.abi import (
    COUNTERS,
    COUNTERS_BASE,
    CTX_WD_C_BYTE,
    CTX_WD_C_ITER,
    CTX_WD_C_MAC,
    CTX_WD_C_VEC,
    CTX_WD_CYCLE_LIMIT,
    CTX_WD_DEADLINE_NS,
    CTX_WD_EXC,
    CTX_WD_ITERS,
    CTX_WD_NEXT_SIGNAL_NS,
    CTX_WD_SIGNALS,
    CTX_WD_STOP,
    CTX_WD_TICKS,
    SIGNAL_CHECK_NS,
    STATUS_CYCLE_LIMIT,
    STATUS_INTERRUPTED,
    STATUS_TIMEOUT,
    WATCHDOG_TICKS,
)

I32, I64, F64 = ir.IntType(32), ir.IntType(64), ir.DoubleType()
I8P = ir.IntType(8).as_pointer()
CLOCK_MONOTONIC = 1  # Linux; Python's time.monotonic_ns() reads the same clock


def _i64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def _word(b: ir.IRBuilder, ctx: ir.Value, index: int) -> ir.Value:
    return b.gep(ctx, [_i64(index)])


def _declare(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    existing = module.globals.get(name)
    return existing if existing is not None else ir.Function(module, ir.FunctionType(ret, args), name)


def define_watchdog(module: ir.Module, fn: ir.Function) -> None:
    """The body of `i64 watchdog(i64* ctx)` (a runtime-library helper): 0 to go on, else the status that
    stops the launch."""
    (ctx,) = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def load(index: int) -> ir.Value:
        return b.load(_word(b, ctx, index))

    def stop_if(cond: ir.Value, status: int) -> None:
        stop = fn.append_basic_block("stop")
        cont = fn.append_basic_block("go_on")
        b.cbranch(cond, stop, cont)
        ir.IRBuilder(stop).ret(_i64(status))
        b.position_at_end(cont)

    b.store(_i64(WATCHDOG_TICKS), _word(b, ctx, CTX_WD_TICKS))
    iters = b.add(load(CTX_WD_ITERS), _i64(WATCHDOG_TICKS))
    b.store(iters, _word(b, ctx, CTX_WD_ITERS))
    stop_if(b.icmp_signed("!=", load(CTX_WD_STOP), _i64(0)), STATUS_INTERRUPTED)

    timespec = ir.LiteralStructType([I64, I64])
    clock_gettime = _declare(module, "clock_gettime", I32, [I32, timespec.as_pointer()])
    ts = b.alloca(timespec)
    b.call(clock_gettime, [ir.Constant(I32, CLOCK_MONOTONIC), ts])
    sec = b.load(b.gep(ts, [ir.Constant(I32, 0), ir.Constant(I32, 0)]))
    nsec = b.load(b.gep(ts, [ir.Constant(I32, 0), ir.Constant(I32, 1)]))
    now = b.add(b.mul(sec, _i64(1_000_000_000)), nsec)
    deadline = load(CTX_WD_DEADLINE_NS)
    stop_if(b.and_(b.icmp_signed("!=", deadline, _i64(0)), b.icmp_signed(">", now, deadline)), STATUS_TIMEOUT)

    def counter(name: str) -> ir.Value:
        return b.sitofp(load(COUNTERS_BASE + COUNTERS.index(name)), F64)

    def coeff(index: int) -> ir.Value:
        return b.bitcast(load(index), F64)

    limit = coeff(CTX_WD_CYCLE_LIMIT)  # 0.0 when no limit (the word is 0)
    moved = b.fadd(counter("dma_load_bytes"), counter("dma_store_bytes"))
    bound = b.fmul(moved, coeff(CTX_WD_C_BYTE))
    for work, c in ((counter("macs"), CTX_WD_C_MAC), (counter("vec_elems"), CTX_WD_C_VEC),
                    (b.sitofp(iters, F64), CTX_WD_C_ITER)):
        cycles = b.fmul(work, coeff(c))
        bound = b.select(b.fcmp_ordered(">", cycles, bound), cycles, bound)
    over = b.and_(b.fcmp_ordered(">", limit, ir.Constant(F64, 0.0)), b.fcmp_ordered(">", bound, limit))
    stop_if(over, STATUS_CYCLE_LIMIT)

    due = b.and_(b.icmp_signed("!=", load(CTX_WD_SIGNALS), _i64(0)),
                 b.icmp_signed(">=", now, load(CTX_WD_NEXT_SIGNAL_NS)))
    check = fn.append_basic_block("check_signals")
    done = fn.append_basic_block("done")
    b.cbranch(due, check, done)
    b.position_at_end(check)
    b.store(b.add(now, _i64(SIGNAL_CHECK_NS)), _word(b, ctx, CTX_WD_NEXT_SIGNAL_NS))
    gil = b.call(_declare(module, "PyGILState_Ensure", I32, []), [])
    raised = b.icmp_signed("!=", b.call(_declare(module, "PyErr_CheckSignals", I32, []), []), ir.Constant(I32, 0))
    park = fn.append_basic_block("park_exception")
    release = fn.append_basic_block("release")
    b.cbranch(raised, park, release)
    b.position_at_end(park)
    slots = [b.bitcast(_word(b, ctx, CTX_WD_EXC + k), I8P.as_pointer()) for k in range(3)]
    b.call(_declare(module, "PyErr_Fetch", ir.VoidType(), [I8P.as_pointer()] * 3), slots)
    b.branch(release)
    b.position_at_end(release)
    b.call(_declare(module, "PyGILState_Release", ir.VoidType(), [I32]), [gil])
    stop_if(raised, STATUS_INTERRUPTED)
    b.branch(done)
    ir.IRBuilder(done).ret(_i64(0))


def tick(b: ir.IRBuilder, fn: ir.Function, ctx: ir.Value, helper: ir.Function,
         on_stop: Callable[[ir.IRBuilder, ir.Value], None]) -> None:
    """Count one loop iteration (or program); on every WATCHDOG_TICKS-th call `helper` (the runtime
    library's watchdog, declared in the kernel's module) decides.

    `on_stop(builder, status)` emits the exit path for a non-zero status (it must terminate its
    block); the builder continues after the check.
    """
    slot = _word(b, ctx, CTX_WD_TICKS)
    left = b.sub(b.load(slot), _i64(1))
    b.store(left, slot)
    slow = fn.append_basic_block("watchdog")
    cont = fn.append_basic_block("watchdog_ok")
    b.cbranch(b.icmp_signed("<=", left, _i64(0)), slow, cont)
    b.position_at_end(slow)
    status = b.call(helper, [ctx])
    stopped = fn.append_basic_block("watchdog_stop")
    b.cbranch(b.icmp_signed("!=", status, _i64(0)), stopped, cont)
    b.position_at_end(stopped)
    on_stop(b, status)
    b.position_at_end(cont)

"""The codegen's infrastructure, shared by every part of it: the state of one kernel being emitted,
scratchpad buffers and element access, error checks, counters and trace records, and loops.

`CodegenBase` is the base class of the codegen mixins (`codegen` core tile ops, `codegen_memory`,
`codegen_control`, `codegen_runtime`, `codegen_language`), which `codegen.KernelCodegen` combines. A
mixin's `op_<dialect>_<name>` method emits one nmpir op; `emit_block` (the core) emits a block of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from llvmlite import ir

from triton_nmp.abi import (
    COUNTERS,
    COUNTERS_BASE,
    CTX_PID,
    CTX_SITE,
    CTX_STATUS,
    STATUS_NO_MEMORY,
    STATUS_OUT_OF_BOUNDS,
    TRACE_WORDS,
)

from .codegen_scalar import I1, I8, I64, compute_type, narrow_constant, storage_type, to_compute, to_storage
from .codegen_watchdog import tick as watchdog_tick
from .ir import Func, Op, Ty, Value
from .loop_cost import use_counts
from .runtime_abi import declare
from .scratchpad import ScratchpadPlan


@dataclass
class Site:
    op: str
    loc: str
    arg: str


def _i64(x: int) -> ir.Constant:
    return ir.Constant(I64, x)


def _prod(xs) -> int:
    return math.prod(xs)


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
    return ir.Constant(ct, narrow_constant(float(value), t.elem))




def _op_label(op: Op) -> str:
    names = {"nmp.dma_load": "tt.load", "nmp.gather": "tt.load", "nmp.dma_store": "tt.store",
             "nmp.scatter": "tt.store"}
    if op.name == "nmp.vec":
        return op.attrs.get("fn", op.name)
    return names.get(op.name, op.name)


class CodegenBase:
    """State and helpers of the LLVM codegen of one kernel (see the module docstring)."""

    def __init__(self, func: Func, triple: str, data_layout: str, plan: ScratchpadPlan | None = None,
                 timing_variant: bool = False):
        self.func = func
        self.timing_variant = timing_variant
        self.plan = plan
        self.arena: ir.Value | None = None
        self.loops: list[tuple[ir.Value, ir.Value]] = []  # (induction variable, lower bound) of open loops
        self.site_ids: dict[tuple, int] = {}
        self.timing_only = False
        self.address_tiles: set[int] = set()  # tiles the timing-only variant computes (see codegen.skips_tile)
        self._use_counts: dict[int, int] | None = None
        self.temporaries: list[Value] = []  # codegen-made tile values with a buffer, kept alive
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

    def for_range(self, count: ir.Value | int, start: ir.Value | int = 0):
        """`with self.for_range(n) as i:` emits the with-block as the body of `for i in range(start, n)`."""
        return for_range(self.b, self.fn, count, start)

    def loop(self, count: ir.Value | int, body: Callable[[ir.Value], None], start: ir.Value | int = 0) -> None:
        """`body(i)` for i in range(start, count), for bodies written as a function (nests, lambdas); the
        same loop as `for_range` without a generator per loop (codegen emits thousands)."""
        loop = open_counted(self.b, self.fn, count, start)
        body(loop.index)
        loop.carry()

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

        watchdog_tick(self.b, self.fn, self.ctx, declare(self.module, "watchdog"), stop)

    def fail_if(self, cond: ir.Value, status: int, site: int, arg_index: int, lo: ir.Value, hi: ir.Value) -> None:
        """If `cond`: record the error in ctx (status, site, argument, byte range, program) and return."""
        b = self.b
        with if_unlikely(b, self.fn, cond):  # one call, not 8 stores: the IR stays small (compile time)
            b.call(declare(self.module, "fail"), [self.ctx, _i64(status), _i64(site), _i64(arg_index), lo, hi,
                                                 *self.pids])
            b.branch(self.err_exit)

    def _elem_check(self, op: Op, root: Value, addr: ir.Value, esize: int, site: int) -> None:
        """Fail with STATUS_OUT_OF_BOUNDS unless the element at address `addr` lies inside argument `root`."""
        b = self.b
        index, base, span = self.arg_info[id(root)]
        off = b.sub(addr, base)
        bad = b.or_(b.icmp_signed("<", off, _i64(0)), b.icmp_signed(">", b.add(off, _i64(esize)), span))
        self.fail_if(bad, STATUS_OUT_OF_BOUNDS, site, index, off, b.add(off, _i64(esize)))

    def _element_op(self, parts) -> None:
        """A gather, scatter or atomic on its own (not ending a fused run): the per-element loop, then the
        counters and trace records (only those in the timing-only variant)."""
        n, body, finish = parts
        if not self.timing_only:
            self.loop(n, body)
        finish()

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
            self.temporaries.append(v)  # bufs is keyed by id(): a freed temporary's id would be reused
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
        b.call(declare_memcpy(self.module), [b.bitcast(dst, i8p), b.bitcast(src, i8p), nbytes, ir.Constant(I1, 0)])

    def scalar(self, v: Value) -> ir.Value:
        return self.vals[id(v)]

    def _users(self) -> dict[int, int]:
        if self._use_counts is None:
            self._use_counts = use_counts(self.func)
        return self._use_counts

    def _flat(self, idx: list[ir.Value], strides: tuple[int, ...]) -> ir.Value:
        acc = None
        for i, s in zip(idx, strides):
            if s == 0:
                continue
            term = i if s == 1 else self.b.mul(i, _i64(s))
            acc = term if acc is None else self.b.add(acc, term)
        return acc if acc is not None else _i64(0)

    def _combine(self, region_block, accs: list[ir.Value], vals: list[ir.Value]) -> list[ir.Value]:
        """Inline a reduce/scan combine region on scalars; returns the yielded values."""
        for arg, v in zip(region_block.args, list(accs) + list(vals)):
            self.vals[id(arg)] = v
        out = None
        for inner in region_block.ops:
            if inner.name == "nmp.yield":
                out = [self.scalar(o) for o in inner.operands]
            else:
                self.emit_block([inner])
        return out

    def _combiner(self, region_block, elems: list[str]):
        """The combine function of a reduce/scan as `(accs, vals) -> results` on compute values.

        A sum or product of fp16/bf16 (`tl.sum`, `tl.cumsum`, `tl.cumprod`, or a user `a + b` / `a * b`)
        accumulates in fp32, its compute representation, and is rounded to the narrow type once per
        result, when the result is stored: torch does the same, and so does the interpreter's numpy
        sum along a row. Rounding every partial sum (the region as written) loses ~log2(n) bits on long
        rows. Any other region runs as written, rounding after each op."""
        ops = region_block.ops
        if len(elems) == 1 and elems[0] in ("f16", "bf16") and len(ops) == 2 and ops[1].name == "nmp.yield":
            op, ret = ops
            args = {id(a) for a in region_block.args}
            if (op.name in ("arith.addf", "arith.mulf") and ret.operands[0] is op.results[0]
                    and len(op.operands) == 2 and {id(x) for x in op.operands} == args):
                wide = self.b.fadd if op.name == "arith.addf" else self.b.fmul
                return lambda accs, vals: [wide(accs[0], vals[0])]
        return lambda accs, vals: self._combine(region_block, accs, vals)

    def _carried_loop(self, name: str, lo: int, hi: ir.Value | int, init: list[ir.Value], body) -> list[ir.Value]:
        """`for k in range(lo, hi): vals = body(k, vals)` as one LLVM loop whose values live in phis
        (registers, not the scratchpad); returns the values after the loop."""
        with carried_range(self.b, self.fn, name, _i64(lo), hi, init) as loop:
            loop.carry(body(loop.index, loop.values))
        return loop.values

    def _elem(self, v: Value, i: ir.Value) -> ir.Value:
        """Element i of a tile, or the scalar itself (compute representation)."""
        return self.load_elem(v, i) if v.type.is_tensor else self.scalar(v)

    def emit_block(self, ops: list[Op]) -> None:
        """Emit a block of ops (the core: `codegen.KernelCodegen.emit_block`)."""
        raise NotImplementedError

    def _trace_helper(self) -> ir.Function:
        """The out-of-line trace appender (`codegen_runtime`)."""
        raise NotImplementedError


# -- control flow as context managers (blocks are created and named in a fixed order, so the IR of a
# kernel does not depend on how its loops are written) ------------------------------------------------

class Loop:
    """A loop being emitted: the header's phis (the index, if any, then the carried values), its body
    block and its exit block. `test(cond)` ends the header; `carry(values)` ends the body."""

    def __init__(self, b: ir.IRBuilder, header: ir.Block, body: ir.Block, end: ir.Block,
                 index: ir.PhiInstr | None, values: list[ir.PhiInstr], step: ir.Value | None):
        self.b, self.header, self.body, self.end = b, header, body, end
        self.index, self.values, self.step = index, values, step
        self.closed = False

    def test(self, cond: ir.Value) -> None:
        """Run the body while `cond` (computed in the header) holds, else leave the loop."""
        self.b.cbranch(cond, self.body, self.end)
        self.b.position_at_end(self.body)

    def carry(self, values: Sequence[ir.Value] = ()) -> None:
        """The next iteration starts from the current block with `values` (and the index + step); the
        builder continues after the loop, where `values` are the phis' last values."""
        b = self.b
        if self.index is not None:
            self.index.add_incoming(b.add(self.index, self.step), b.block)
        for p, v in zip(self.values, values):
            p.add_incoming(v, b.block)
        b.branch(self.header)
        b.position_at_end(self.end)
        self.closed = True


def open_loop(b: ir.IRBuilder, fn: ir.Function, names: tuple[str, str, str], inits: Sequence[ir.Value] = (),
              start: ir.Value | None = None, step: ir.Value | None = None) -> Loop:
    """Blocks `names` (header, body, exit) and the header's phis: an index from `start` (if given),
    then one per value of `inits`. The builder is left in the header."""
    pre = b.block
    header, body, end = (fn.append_basic_block(n) for n in names)
    b.branch(header)
    b.position_at_end(header)
    index = None
    if start is not None:
        index = b.phi(start.type)
        index.add_incoming(start, pre)
    values = []
    for v in inits:
        p = b.phi(v.type)
        p.add_incoming(v, pre)
        values.append(p)
    return Loop(b, header, body, end, index, values, step)


def declare_memcpy(module: ir.Module) -> ir.Function:
    """LLVM's memcpy intrinsic (i8* dst, i8* src, i64 bytes, i1 volatile), declared in `module` once."""
    name = "llvm.memcpy.p0i8.p0i8.i64"
    i8p = I8.as_pointer()
    return module.globals.get(name) or ir.Function(module, ir.FunctionType(ir.VoidType(), [i8p, i8p, I64, I1]), name)


def open_counted(b: ir.IRBuilder, fn: ir.Function, count: ir.Value | int, start: ir.Value | int = 0) -> Loop:
    """`for i in range(start, count)` with an i64 index, opened: the builder is in the body; `carry()` ends it."""
    count = _i64(count) if isinstance(count, int) else count
    loop = open_loop(b, fn, ("loop", "body", "endloop"), (), _i64(start) if isinstance(start, int) else start,
                     _i64(1))
    loop.test(b.icmp_signed("<", loop.index, count))
    return loop


@contextmanager
def for_range(b: ir.IRBuilder, fn: ir.Function, count: ir.Value | int, start: ir.Value | int = 0) -> Iterator[ir.Value]:
    """`for i in range(start, count)` with an i64 index; the with-block is the body."""
    loop = open_counted(b, fn, count, start)
    yield loop.index
    loop.carry()


@contextmanager
def carried_range(b: ir.IRBuilder, fn: ir.Function, name: str, lo: ir.Value, hi: ir.Value | int,
                  inits: Sequence[ir.Value], step: ir.Value | None = None) -> Iterator[Loop]:
    """`for k in range(lo, hi, step)` carrying `inits` in phis (blocks <name>, <name>_body, <name>_end):
    the with-block reads `loop.index` and `loop.values` and ends with `loop.carry(new values)`; after
    it, `loop.values` hold the values after the loop."""
    loop = open_loop(b, fn, (name, name + "_body", name + "_end"), inits, lo,
                     step if step is not None else ir.Constant(lo.type, 1))
    loop.test(b.icmp_signed("<", loop.index, hi if isinstance(hi, ir.Value) else ir.Constant(lo.type, hi)))
    yield loop
    if not loop.closed:
        raise RuntimeError(f"loop '{name}' was not closed with carry()")


@contextmanager
def if_unlikely(b: ir.IRBuilder, fn: ir.Function, cond: ir.Value) -> Iterator[None]:
    """The with-block runs when `cond` (an error check) holds; it may end in a branch of its own."""
    bad = fn.append_basic_block("check_failed")
    cont = fn.append_basic_block("check_ok")
    b.cbranch(cond, bad, cont)
    b.position_at_end(bad)
    yield
    if not b.block.is_terminated:
        b.branch(cont)
    b.position_at_end(cont)

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
    CTX_SPILL_PTR,
    CTX_TRACE_ON,
    KIND_MATMUL,
    KIND_VEC,
    SPILL_ARG,
    STATUS_OUT_OF_BOUNDS,
    dtype_code,
)
from triton_nmp.errors import NMPCompilationError
from triton_nmp.opclass import classify, region_class

from . import codegen_matmul
from .codegen_base import Site, _const, _i64, _op_label, _prod
from .codegen_control import ControlFlowCodegen
from .codegen_language import LanguageCodegen
from .codegen_memory import MemoryCodegen
from .codegen_runtime import RuntimeCodegen
from .codegen_scalar import F32, F64, I32, I64, compute_type, emit_elementwise, round_to
from .folding_builder import FoldingBuilder
from .ir import Module, Op, Value, row_major
from .loop_cost import run_accesses
from .nmpir import fused_run_length
from .ops import FUSABLE_MEMORY_OPS
from .scratchpad import ScratchpadPlan
from .timing_only import address_tiles, timing_only_eligible

REDUCE_LANES = 8


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


class KernelCodegen(ControlFlowCodegen, MemoryCodegen, RuntimeCodegen, LanguageCodegen):
    """One kernel's LLVM module: the entry points, the dispatch of ops to the mixins' `op_*` methods,
    fused elementwise runs, and the core tile ops (constants, splats, iotas, views, vec, matmul, reduce)."""

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
        self.address_tiles = address_tiles(f) if timing_only else set()
        body_ty = ir.FunctionType(I64, [I64.as_pointer()] + [I64] * 6 + [I64.as_pointer()])
        self.fn = ir.Function(self.module, body_ty, f"nmp_body{suffix}_{f.name}")
        self.fn.linkage = "internal"
        # Not inlined into the grid loop: inlined, LLVM's function simplification ran over the body twice (once
        # on its own, again inside the grid function), ~30% of the kernel's optimisation time; the one call per
        # program costs nothing a tile body would notice.
        self.fn.attributes.add("noinline")
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
        b = FoldingBuilder(start)
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
            grid.attributes.add("noinline")
            for fn in (self.fn, grid):
                fn.attributes.add("optnone")
        return args_meta

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

    # Elementwise fusion: consecutive elementwise tile ops of one shape run in a single loop, and values
    # used only inside the run stay in registers. One loop instead of one per op is both faster to
    # simulate and much faster for LLVM to compile. The scratchpad plan treats a run as one step.
    def _fusable_run(self, ops: list[Op], start: int) -> list[Op]:
        return ops[start:start + fused_run_length(ops, start)]

    def emit_fused(self, run: list[Op]) -> None:
        accesses = run_accesses(run, self._users())  # charged once, on the run's first record
        inside: dict[int, int] = {}
        for op in run:
            for o in op.operands:
                inside[id(o)] = inside.get(id(o), 0) + 1
        mem = red = None
        if run[-1].name in FUSABLE_MEMORY_OPS:  # the run computes this gather/scatter/atomic's addresses
            mem, run = run[-1], run[:-1]
            parts = self._element_parts(mem)
        elif run[-1].name == "nmp.reduce":  # the run computes the elements this reduction combines
            red, run = run[-1], run[:-1]
        users = self._users()
        produced = {id(op.results[0]) for op in run}
        # a result needs its tile if anything outside the run reads it
        keep = {k for k in produced if users.get(k, 0) > inside.get(k, 0)}
        shape = run[0].results[0].type.shape
        numel = run[0].results[0].type.numel
        nested = any(op.name == "nmp.broadcast" or op.name == "nmp.iota" and len(shape) > 1 for op in run)
        computed = [op for op in run if not self.skips_tile(op.results[0])]
        if computed:
            def element(i, idx=None) -> dict[int, ir.Value]:
                """The run's values at element i (multi-index idx when it broadcasts). Results are stored
                after every operand of this element is read: a result may take an operand's buffer."""
                regs: dict[int, ir.Value] = {}
                stores = []

                def get(v):
                    if id(v) in regs:
                        return regs[id(v)]
                    return self.load_elem(v, i) if v.type.is_tensor else self.scalar(v)

                for op in computed:
                    r = op.results[0]
                    if op.name == "nmp.splat":
                        val = self.scalar(op.operands[0])
                    elif op.name == "nmp.const":
                        val = _const(r.type.scalar, op.attrs["value"])
                    elif op.name == "nmp.broadcast":  # the source element this element repeats
                        src = op.operands[0]
                        val = self.load_elem(src, self._flat(idx, _broadcast_strides(src.type.shape)))
                    elif op.name == "nmp.iota":  # this element's index along the axis
                        pos = self.b.add(i if idx is None else idx[op.attrs["axis"]], _i64(op.attrs["start"]))
                        ct = compute_type(r.type)
                        val = pos if ct.width == 64 else self.b.trunc(pos, ct)
                    else:
                        val = emit_elementwise(self.b, op.attrs["fn"], op.attrs, [get(o) for o in op.operands],
                                               [o.type for o in op.operands], r.type)
                    regs[id(r)] = val
                    if id(r) in keep:
                        stores.append((r, val))
                if mem is not None:
                    self._elem_regs = regs
                    try:
                        parts[1](i)
                    finally:
                        self._elem_regs = None
                for r, val in stores:
                    self.store_elem(r, i, val)
                return regs

            if red is not None and not self.timing_only:  # the reduction's loops visit every element once
                self._reduce_elements(red, lambda flat: element(flat, self._unflatten(flat, shape) if nested
                                                                else None))
            elif nested:  # a loop nest: source indices without division
                self.loop_nest(shape, lambda idx: element(self._flat(idx, row_major(shape)), idx))
            else:
                self.loop(numel, element)
        for op in run:  # the same counters and trace records as unfused ops, in op order
            if op.name == "nmp.vec":
                r = op.results[0]
                self.count("vec_elems", _i64(r.type.numel))
                self.trace(KIND_VEC, [r.type.numel, 0, dtype_code(r.type.elem), classify(op), accesses])
                accesses = 0
        if mem is not None:
            parts[2]()
        if red is not None:
            if self.timing_only:
                self._reduce_placeholders(red)
            self._reduce_record(red, accesses)

    def _unflatten(self, flat: ir.Value, shape: tuple[int, ...]) -> list[ir.Value]:
        """The multi-index of row-major element `flat` of a tile of `shape`."""
        b = self.b
        idx = []
        for n, st in zip(shape, row_major(shape)):
            q = flat if st == 1 else b.udiv(flat, _i64(st))
            idx.append(b.urem(q, _i64(n)) if n != _prod(shape) // st else q)
        return idx

    def _element_parts(self, op: Op):
        """(elements, per-element body, epilogue) of a gather, scatter or atomic."""
        return {"nmp.gather": self._gather_parts, "nmp.scatter": self._scatter_parts,
                "nmp.atomic": self._atomic_parts}[op.name](op)

    def emit_op(self, op: Op) -> None:
        if self.b.block.is_terminated:
            self.b.position_at_end(self.fn.append_basic_block("dead"))
        handler = getattr(self, "op_" + op.name.replace(".", "_"), None)
        try:
            if op.name in FUSABLE_MEMORY_OPS:  # alone, not at the end of a fused run
                self._element_op(self._element_parts(op))
            elif handler is not None:
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

    def skips_tile(self, r: Value) -> bool:
        """Whether this variant leaves tile `r` uncomputed: the timing-only variant computes only the
        tiles a row gather's offsets read (`timing_only.address_tiles`)."""
        return self.timing_only and id(r) not in self.address_tiles

    def op_nmp_const(self, op: Op) -> None:
        if self.skips_tile(op.result):
            return
        r = op.result
        c = _const(r.type.scalar, op.attrs["value"])
        self.loop(r.type.numel, lambda i: self.store_elem(r, i, c))

    def op_nmp_splat(self, op: Op) -> None:
        if self.skips_tile(op.result):
            return
        r = op.result
        x = self.scalar(op.operands[0])
        self.loop(r.type.numel, lambda i: self.store_elem(r, i, x))

    def op_nmp_iota(self, op: Op) -> None:
        if self.skips_tile(op.result):
            return
        r = op.result
        shape, axis, start = r.type.shape, op.attrs["axis"], op.attrs["start"]
        strides = row_major(shape)
        ct = compute_type(r.type)

        def body(idx):
            flat = self._flat(idx, strides)
            v = self.b.add(idx[axis], _i64(start))
            self.store_elem(r, flat, v if ct.width == 64 else self.b.trunc(v, ct))

        self.loop_nest(shape, body)

    def op_nmp_view(self, op: Op) -> None:
        self.bufs[id(op.result)] = self.buffer(op.operands[0])

    def op_nmp_slice(self, op: Op) -> None:
        """A contiguous piece of the source's buffer: `start` rows along `axis` further in."""
        src = op.operands[0]
        row = _prod(src.type.shape[op.attrs["axis"] + 1:])
        self.bufs[id(op.result)] = self.b.gep(self.buffer(src), [self.b.mul(self.scalar(op.operands[1]), _i64(row))])

    def op_nmp_spill_area(self, op: Op) -> None:
        """The program's spill area (allocated by the grid entry): DMAs address it like an argument."""
        base = self.b.load(self.b.gep(self.ctx, [_i64(CTX_SPILL_PTR)]))
        self.vals[id(op.result)] = base
        self.arg_info[id(op.result)] = (SPILL_ARG, base, _i64(int(op.attrs["bytes"])))

    def op_nmp_broadcast(self, op: Op) -> None:
        if self.timing_only:
            return
        src, r = op.operands[0], op.result
        out_shape = r.type.shape
        in_strides = _broadcast_strides(src.type.shape)
        out_strides = row_major(out_shape)

        def body(idx):
            x = self.b.load(self.b.gep(self.buffer(src), [self._flat(idx, in_strides)]))
            self.b.store(x, self.b.gep(self.buffer(r), [self._flat(idx, out_strides)]))

        self.loop_nest(out_shape, body)

    def op_nmp_transpose(self, op: Op) -> None:
        if self.timing_only:
            return
        src, r = op.operands[0], op.result
        order = op.attrs["order"]
        in_strides = row_major(src.type.shape)
        perm_strides = tuple(in_strides[o] for o in order)
        out_strides = row_major(r.type.shape)

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

        if not self.skips_tile(r):
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
        if not self.timing_only:
            self.copy_tile(r, acc)
            # Leading columns in register strips (codegen_matmul: same operations in the same order as
            # the scalar nest, which covers the remaining columns).
            first_col = 0
            if codegen_matmul.eligible(a, bm, r) and self._elem_regs is None:
                first_col = codegen_matmul.emit_strips(self, a, bm, r, m, n, k)
            if first_col < n:
                self._matmul_scalar(a, bm, r, m, n, k, first_col)
        self.count("macs", _i64(m * n * k))
        self.trace(KIND_MATMUL, [m, n, k, dtype_code(a.type.elem)])

    def _matmul_scalar(self, a: Value, bm: Value, r: Value, m: int, n: int, k: int, first_col: int) -> None:
        """r[:, first_col:] += a @ bm[:, first_col:], an i-k-j nest of scalar multiply-adds."""
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

                self.loop(n, col, first_col)

            self.loop(k, kk)

        self.loop(m, row)

    def op_nmp_reduce(self, op: Op) -> None:
        if self.timing_only:
            self._reduce_placeholders(op)
        else:
            self._reduce_elements(op, None)
        self._reduce_record(op, len(op.operands))

    def _reduce_placeholders(self, op: Op) -> None:
        """The timing-only variant computes no data: scalar results are zeros."""
        for res in op.results:
            if not res.type.is_tensor:
                self.vals[id(res)] = _const(res.type, 0)

    def _reduce_record(self, op: Op, accesses: int) -> None:
        shape = op.operands[0].type.shape
        self.count("vec_elems", _i64(_prod(shape)))
        self.trace(KIND_VEC, [_prod(shape), 1, dtype_code(op.operands[0].type.elem),
                            region_class(op.regions[0].block), accesses])

    def _reduce_elements(self, op: Op, compute) -> None:
        """Combine the inputs of `op` along its axis. `compute(flat)`, when given, computes the elements
        (a fused run ending in this reduction) and returns them by input tile; inputs it does not
        compute are read from their buffers."""
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

        def at(o, k):
            return b.add(b.add(b.mul(o, _i64(n * inner)), b.mul(k, _i64(inner))), i_cur[0])

        def values(flat):
            regs = compute(flat) if compute is not None else {}
            return [regs[id(x)] if id(x) in regs else self.load_elem(x, flat) for x in inputs]

        i_cur = [None]
        out_vals = [None]

        # Independent partial results per lane break the serial dependency chain, so the reduction
        # vectorises; the combine function is associative (Triton requires it), only the order differs.
        lanes = REDUCE_LANES if n % REDUCE_LANES == 0 and n >= 2 * REDUCE_LANES else 1

        def per_position(o, i):
            i_cur[0] = i
            init = [values(at(o, _i64(j))) for j in range(lanes)]
            width = len(inputs)

            def step(kphi, flat):
                base = b.mul(kphi, _i64(lanes))
                new = []
                for j in range(lanes):
                    new += combine(flat[j * width:(j + 1) * width], values(at(o, b.add(base, _i64(j)))))
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


def _broadcast_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides of a broadcast's source, 0 along its size-1 (repeated) dimensions."""
    return tuple(0 if d == 1 else s for d, s in zip(shape, row_major(shape)))


def _triton_ty(elem: str | None) -> str:
    return {"f16": "fp16", "bf16": "bf16", "f32": "fp32", "f64": "fp64"}.get(elem or "", elem or "")


def generate_llvm(mod: Module, triple: str, data_layout: str, plan: ScratchpadPlan | None = None,
                  timing_variant: bool = False) -> CodegenResult:
    """nmpir module -> LLVM IR text plus the metadata the simulator needs (and, if asked and possible, the
    timing-only variant of the kernel)."""
    return KernelCodegen(mod.kernel, triple, data_layout, plan, timing_variant).build()

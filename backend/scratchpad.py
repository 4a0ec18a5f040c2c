"""Scratchpad buffer planning for the nmp tile dialect.

Every live tile occupies scratchpad. The planner numbers the ops in program order, computes each
tile's live range (a tile used inside a loop it was not defined in stays live to the end of that
loop; loop-carried tiles live across the whole loop; views and loop results share their source's
buffer), and places buffers at aligned offsets, first fit, reusing the space of dead tiles. A result
may take the buffer of an operand it reads for the last time (elementwise ops and fused runs, a dot's
accumulator, a loop's initial value). Loads that are multi-buffered (`num_stages` > 1) get one buffer
per stage. The result is the kernel's peak scratchpad use and the buffers live at the peak, which
legalization (`legalize`) works from: a kernel is never found too big at run time ("ub overflow").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .ir import Block, Func, Loc, Op, Value
from .nmpir import fused_run_length
from .ops import FUSABLE_MEMORY_OPS, Operands, op_def

DEFAULT_ALIGN = 64


def buffer_align(spec) -> int:
    """Alignment of scratchpad buffers on a target: its DMA alignment, at least DEFAULT_ALIGN."""
    return max(spec.dma_alignment_bytes, DEFAULT_ALIGN)


@dataclass
class Buffer:
    """A scratchpad buffer: one tile value and every value that aliases it."""

    value: Value
    nbytes: int
    start: int
    end: int
    loc: Loc
    stages: int = 1
    offset: int = -1
    uses: set[int] = field(default_factory=set)  # steps where a value of the buffer is defined or read

    @property
    def size(self) -> int:
        return self.nbytes * self.stages

    def describe(self) -> str:
        t = self.value.type
        shape = "x".join(map(str, t.shape))
        staged = f" x {self.stages} stages" if self.stages > 1 else ""
        return f"%{self.value.name}: tile<{shape}x{t.elem}> {self.nbytes} B{staged} ({self.loc})"


@dataclass
class ScratchpadPlan:
    buffers: list[Buffer] = field(default_factory=list)
    of_value: dict[int, Buffer] = field(default_factory=dict)
    peak_bytes: int = 0
    live_at_peak: list[Buffer] = field(default_factory=list)
    peak_time: int = 0  # the step at which the buffers of live_at_peak are live together

    def offset(self, v: Value) -> int | None:
        b = self.of_value.get(id(v))
        return None if b is None else b.offset

    def summary(self) -> str:
        lines = [f"// scratchpad plan: peak {self.peak_bytes} bytes, {len(self.buffers)} buffers"]
        for b in sorted(self.buffers, key=lambda b: b.offset):
            lines.append(f"//   [{b.offset:>7}, {b.offset + b.size:>7})  {b.describe()}  live {b.start}..{b.end}")
        return "\n".join(lines)


class _Liveness:
    def __init__(self, func: Func):
        self.time = 0
        self.def_time: dict[int, int] = {}
        self.def_loops: dict[int, tuple[Op, ...]] = {}
        self.last_use: dict[int, int] = {}
        self.use_times: dict[int, list[int]] = {}
        self.loop_span: dict[int, tuple[int, int]] = {}
        self.alias: dict[int, Value] = {}
        self.values: dict[int, Value] = {}
        self.locs: dict[int, Loc] = {}
        self.pipelined: dict[int, int] = {}
        self.pending: list[tuple[int, Op]] = []
        self.ring_loop: dict[int, Op] = {}
        self.vec_ops: list[tuple[Op, int]] = []
        self.matmul_ops: list[tuple[Op, int]] = []
        self.for_ops: list[tuple[Op, int]] = []
        self.runs: list[tuple[list[Op], int]] = []  # fused runs of more than one op and their time step
        self.func = func
        self._block(func.body.ops, (), func.loc)
        for key, loop in self.pending:
            self.last_use[key] = max(self.last_use.get(key, 0), self.loop_span[id(loop)][1])
        for key, loop in self.ring_loop.items():
            start, end = self.loop_span[id(loop)]
            self.def_time[key] = min(self.def_time[key], start)
            self.last_use[key] = max(self.last_use.get(key, 0), end)
        for a in func.body.args:
            self._define(a, 0, (), func.loc)

    def _define(self, v: Value, t: int, loops: tuple[Op, ...], loc: Loc) -> None:
        if v.type.is_tensor:
            self.def_time[id(v)] = t
            self.def_loops[id(v)] = loops
            self.values[id(v)] = v
            self.locs[id(v)] = loc

    def _use(self, v: Value, t: int, loops: tuple[Op, ...]) -> None:
        if not v.type.is_tensor:
            return
        defined_in = self.def_loops.get(id(v), ())
        for loop in loops:
            if loop not in defined_in:
                self.pending.append((id(v), loop))  # live until the loop ends (known after the walk)
                break
        self.last_use[id(v)] = max(self.last_use.get(id(v), 0), t)
        self.use_times.setdefault(id(v), []).append(t)

    def _block(self, ops: list[Op], loops: tuple[Op, ...], loc: Loc) -> None:
        run_left = 0
        for k, op in enumerate(ops):
            if run_left == 0:
                run_left = fused_run_length(ops, k)
                self.time += 1  # a fused run is one step: all its tiles are live together
                if run_left > 1:
                    self.runs.append((ops[k:k + run_left], self.time))
            run_left -= 1
            t = self.time
            for o in op.operands:
                self._use(o, t, loops)
            if op.regions:
                is_loop = op.name in ("scf.for", "scf.while")
                inner_loops = loops + (op,) if is_loop else loops
                for r in op.regions:
                    for b in r.blocks:
                        for a in b.args:
                            self._define(a, t, inner_loops, op.loc)
                            if is_loop:
                                self.last_use[id(a)] = 1 << 60  # loop-carried: live across the loop
                        self._block(b.ops, inner_loops, op.loc)
                end = self.time + 1
                if is_loop:
                    self.loop_span[id(op)] = (t, end)
                    for r in op.regions:
                        for b in r.blocks:
                            for a in b.args:
                                if a.type.is_tensor:
                                    self.last_use[id(a)] = end
                self.time = end
                self._aliases(op)
            for r in op.results:
                self._define(r, t, loops, op.loc)
            if op_def(op.name).view:
                self.alias[id(op.result)] = Operands(op).source
            if op.name == "nmp.vec":
                self.vec_ops.append((op, t))
            if op.name == "nmp.matmul":
                self.matmul_ops.append((op, t))
            if op.name == "scf.for":
                self.for_ops.append((op, t))
            if op.name == "nmp.dma_load" and op.attrs.get("stages", 1) > 1:
                self.pipelined[id(op.result)] = op.attrs["stages"]
                if loops:
                    # the stage buffers form a ring that is in use for the whole loop
                    self.ring_loop[id(op.result)] = loops[-1]

    def _aliases(self, op: Op) -> None:
        if op.name == "scf.for":
            body = op.regions[0].block
            barg = body.args[1:]
            for r, a in zip(op.results, barg):
                if r.type.is_tensor:
                    self.alias[id(r)] = a
            # Accumulate in place: `acc = dot(a, b, acc)` / `acc = acc + x` yielded back into its own
            # loop-carried slot reuses that slot when nothing else reads the old value.
            for a, y in zip(barg, body.ops[-1].operands):
                producer = y.owner if isinstance(y.owner, Op) else None
                if not a.type.is_tensor or producer is None or producer.name not in ("nmp.matmul", "nmp.vec"):
                    continue
                users = [o for o in body.ops if any(x is a for x in o.operands)]
                if users == [producer] and any(x is a for x in producer.operands) and y.type == a.type:
                    self.alias[id(y)] = a
        elif op.name == "scf.while":
            before, after = op.regions[0].block, op.regions[1].block
            forwarded = Operands(before.ops[-1]).values  # what scf.condition passes on
            for a, fwd in zip(after.args, forwarded):
                if a.type.is_tensor:
                    self.alias[id(a)] = fwd
            for r, fwd in zip(op.results, forwarded):
                if r.type.is_tensor:
                    self.alias[id(r)] = fwd

    def root(self, v: Value) -> Value:
        seen = 0
        while id(v) in self.alias and seen < 10000:
            v = self.alias[id(v)]
            seen += 1
        return v


def _root_ends(lv: _Liveness) -> dict[int, int]:
    """Last use of every buffer (root value), over all the values that alias it."""
    ends: dict[int, int] = {}
    for key, v in lv.values.items():
        rk = id(lv.root(v))
        ends[rk] = max(ends.get(rk, 0), lv.last_use.get(key, lv.def_time[key]))
    return ends


def _dies_here(lv: _Liveness, ends: dict[int, int], v: Value, t: int) -> Value | None:
    """The buffer (root) of tile `v` if step t is its last use and it may be taken over: a planned,
    non-argument buffer that is not a multi-buffered ring. None otherwise."""
    root = lv.root(v)
    if id(root) not in lv.values or isinstance(root.owner, Block) or ends.get(id(root)) != t:
        return None
    return None if id(root) in lv.pipelined else root


def _take_buffer(lv: _Liveness, ends: dict[int, int], r: Value, o: Value, root: Value, t: int) -> None:
    """Result `r` is written over operand `o`'s buffer (`root`, dying at step t), which then lives as
    long as `r`."""
    lv.alias[id(r)] = o
    ends[id(root)] = max(t, lv.last_use.get(id(r), t))


def _elementwise_in_place(lv: _Liveness) -> None:
    """An elementwise op may write its result over an operand whose last use it is (same bytes):
    every element is read before the same element is written."""
    ends = _root_ends(lv)
    # Inside a fused run every op has the same time step, so "last used at this step" does not mean
    # "last used by this op", and the run computes element by element: no in-place reuse there
    # (its register-only temporaries already take no scratchpad).
    in_runs = {id(op) for run, _ in lv.runs for op in run}
    for op, t in lv.vec_ops:
        if id(op) in in_runs:
            continue
        r = op.result
        if id(r) in lv.alias or not r.type.is_tensor:
            continue
        for o in op.operands:
            if not o.type.is_tensor or o.type.nbytes != r.type.nbytes:
                continue
            ro = _dies_here(lv, ends, o, t)
            if ro is None:
                continue
            _take_buffer(lv, ends, r, o, ro, t)
            break


def _runs_in_place(lv: _Liveness) -> None:
    """A fused run's result may take the buffer of a tile the run reads for the last time (an
    intermediate of an elementwise chain computed by an earlier run): the run reads every operand of an
    element before it stores that element's results (`codegen.emit_fused`), and a result of at most the
    operand's element size only overwrites elements already read. Operands read through a broadcast (at
    other indices) or by a gather/scatter/atomic ending the run are not taken."""
    ends = _root_ends(lv)
    for run, t in lv.runs:
        compute = run[:-1] if run[-1].name in FUSABLE_MEMORY_OPS or run[-1].name == "nmp.reduce" else run
        shape = compute[0].results[0].type.shape
        produced = {id(op.results[0]) for op in compute}
        other = {id(o) for op in run if op.name == "nmp.broadcast" or op not in compute for o in op.operands}
        free = []
        for op in compute:
            for o in op.operands:
                if (o.type.is_tensor and o.type.shape == shape and id(o) not in produced and id(o) not in other
                        and all(o is not f for f in free)):
                    free.append(o)
        for op in compute:
            r = op.results[0]
            if id(r) not in lv.values or id(r) in lv.alias:
                continue
            for o in free:
                if o.type.elem_bytes < r.type.elem_bytes:
                    continue
                ro = _dies_here(lv, ends, o, t)
                if ro is None:
                    continue
                _take_buffer(lv, ends, r, o, ro, t)
                free = [f for f in free if f is not o]
                break


def _matmul_in_place(lv: _Liveness) -> None:
    """`tl.dot(a, b, acc)` accumulates into its result starting from acc: when the dot is acc's last use
    (e.g. the zero accumulator of a dot outside a loop), the result takes acc's buffer."""
    ends = _root_ends(lv)
    for op, t in lv.matmul_ops:
        r = op.result
        a, bm, acc = op.operands
        if id(r) in lv.alias or not acc.type.is_tensor or acc.type.nbytes != r.type.nbytes:
            continue
        ra = _dies_here(lv, ends, acc, t)
        if ra is None or ra is lv.root(a) or ra is lv.root(bm):
            continue
        _take_buffer(lv, ends, r, acc, ra, t)


def _loop_init_in_place(lv: _Liveness) -> None:
    """A loop-carried tile starts in its initial value's buffer when the loop is that value's last use."""
    ends = _root_ends(lv)
    for op, t in lv.for_ops:
        for init, barg in zip(Operands(op).inits, op.regions[0].block.args[1:]):
            if not barg.type.is_tensor or id(barg) in lv.alias or init.type.nbytes != barg.type.nbytes:
                continue
            ri = _dies_here(lv, ends, init, t)
            if ri is None:
                continue
            lv.alias[id(barg)] = init
            ends[id(ri)] = 1 << 60


def _register_only(lv: _Liveness, func: Func) -> set[int]:
    """Tiles produced and consumed inside one fused run: the codegen keeps them in registers."""
    uses: dict[int, int] = {}
    for op in func.walk():
        for o in op.operands:
            uses[id(o)] = uses.get(id(o), 0) + 1
    out: set[int] = set()
    for run, _ in lv.runs:
        inside: dict[int, int] = {}
        for op in run:
            for o in op.operands:
                inside[id(o)] = inside.get(id(o), 0) + 1
        for op in run:
            if not op.results or op.name in FUSABLE_MEMORY_OPS:
                continue  # a memory op ending the run writes its own result tile
            r = id(op.results[0])
            if uses.get(r, 0) == inside.get(r, 0):
                out.add(r)
    return out


def _unused_atomic_results(func: Func) -> set[int]:
    """Old values an atomic returns that nothing reads: the codegen does not store them."""
    used: set[int] = set()
    atomics: list[Op] = []
    for op in func.walk():
        used.update(id(o) for o in op.operands)
        if op.name == "nmp.atomic":
            atomics.append(op)
    return {id(op.results[0]) for op in atomics if op.results and id(op.results[0]) not in used}


def plan_scratchpad(func: Func, align: int = DEFAULT_ALIGN) -> ScratchpadPlan:
    """Assign every tile a scratchpad offset; returns the plan with the peak bytes."""
    lv = _Liveness(func)
    for key in _register_only(lv, func) | _unused_atomic_results(func):
        lv.values.pop(key, None)
    _elementwise_in_place(lv)
    _runs_in_place(lv)
    _matmul_in_place(lv)
    _loop_init_in_place(lv)
    groups: dict[int, Buffer] = {}
    plan = ScratchpadPlan()
    for key, v in lv.values.items():
        root = lv.root(v)
        start = lv.def_time[key]
        end = max(lv.last_use.get(key, start), start)
        end = min(end, lv.time + 1)
        rk = id(root)
        buf = groups.get(rk)
        if buf is None:
            rv = lv.values.get(rk, root)
            nbytes = -(-rv.type.nbytes // align) * align
            buf = Buffer(rv, nbytes, start, end, lv.locs.get(rk, lv.locs[key]), lv.pipelined.get(rk, 1))
            groups[rk] = buf
        else:
            buf.start = min(buf.start, start)
            buf.end = max(buf.end, end)
        buf.uses.add(lv.def_time[key])
        buf.uses.update(lv.use_times.get(key, ()))
        if not (isinstance(v.owner, Op) and v.owner.name == "nmp.slice"):  # a piece: its own address
            plan.of_value[key] = buf
    plan.buffers = sorted(groups.values(), key=lambda b: (b.start, -b.size))
    active: list[Buffer] = []
    best_live = -1
    for buf in plan.buffers:
        active = [a for a in active if a.end >= buf.start]
        offset = 0
        for a in sorted(active, key=lambda a: a.offset):
            if offset + buf.size <= a.offset:
                break
            offset = max(offset, a.offset + a.size)
        buf.offset = offset
        active.append(buf)
        plan.peak_bytes = max(plan.peak_bytes, offset + buf.size)
        live = sum(a.size for a in active)
        if live > best_live:
            best_live = live
            plan.live_at_peak = list(active)
            plan.peak_time = buf.start
    return plan


_DATA_OPS = {"nmp.dma_load", "nmp.gather", "nmp.reduce", "nmp.atomic"}


def _depends_on_loaded_data(v: Value, body_ops: set[int], depth: int = 0) -> bool:
    op = v.owner if isinstance(v.owner, Op) else None
    if op is None or id(op) not in body_ops or depth > 200:
        return False
    if op.name in _DATA_OPS:
        return True
    return any(_depends_on_loaded_data(o, body_ops, depth + 1) for o in op.operands)


def mark_multibuffered_loads(func: Func, num_stages: int) -> int:
    """Mark loads in loop bodies for `num_stages`-deep multi-buffering; returns how many were marked.

    A load qualifies when it sits directly in an `scf.for` body and its descriptor (offset, strides,
    bounds) does not depend on data loaded in the same iteration, so the next iteration's transfer can
    be issued before this iteration's compute. Each marked load gets `num_stages` scratchpad buffers.
    """
    marked = 0
    for op in func.walk():
        if op.name != "scf.for":
            continue
        body = op.regions[0].block
        body_ops = {id(o) for o in body.ops}
        for inner in body.ops:
            if inner.name != "nmp.dma_load" or not inner.results[0].type.is_tensor:
                continue
            inner.attrs.pop("stages", None)
            if num_stages < 2 or any(_depends_on_loaded_data(o, body_ops) for o in Operands(inner).after("base")):
                continue
            inner.attrs["stages"] = num_stages
            marked += 1
    return marked

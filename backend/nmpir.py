"""The near-memory tile dialect (`nmpir`): textual form, verifier, dead-code elimination, address
sinking and the fused elementwise runs the planner and the codegen share.

`nmpir` is what the machine does, spelled out: DMA descriptors between a kernel argument's banks
and the scratchpad (`nmp.dma_load`/`nmp.dma_store`, with byte offset, byte strides and a valid box),
the gather/scatter fallback for unstructured accesses, tile compute ops on scratchpad tiles
(`nmp.vec` elementwise on the vector unit, `nmp.matmul` on the matrix unit, `nmp.reduce`), scalar
`arith`/`math` ops and `scf` control flow. Tiles are SSA values with static shapes; the codegen gives
each a scratchpad buffer. Op counts and DMA descriptors are visible here, so a timing model and a
buffer planner can work on this IR without re-deriving them. The ops and their operands are listed
in `ops`; `nmpir_parser` reads the text `print_module` writes back into a module.
"""

from __future__ import annotations

import json
import re

from triton_nmp.errors import NMPCompilationError

from .ir import Block, Func, Module, Op, Value
from .ops import FUSABLE_MEMORY_OPS, FUSABLE_OPS, SIDE_EFFECT_OPS, TERMINATORS, Operands, op_def


def tile_type_str(v: Value) -> str:
    t = v.type
    if t.is_tensor:
        elem = f"!tt.ptr<{t.pointee}>" if t.is_ptr else t.elem
        return "!nmp.tile<" + "x".join(map(str, t.shape)) + "x" + elem + ">"
    return str(t)


_NAME_CHARS = re.compile(r"[^A-Za-z0-9_$.#\-]")


class Namer:
    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.used: set[str] = set()

    def __call__(self, v: Value) -> str:
        key = id(v)
        if key not in self.names:
            base = _NAME_CHARS.sub("_", v.name) or "v"  # `%c-1e+30` would not read back
            name, k = base, 0
            while name in self.used:
                k += 1
                name = f"{base}_{k}"
            self.used.add(name)
            self.names[key] = name
        return "%" + self.names[key]


# A string attribute prints bare when it reads back as that string (an identifier such as `arith.addi`
# or `x_ptr`), else quoted (JSON escapes), so `nmpir_parser` reads every attribute back exactly.
BARE_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.$]*")
NOT_BARE = frozenset({"True", "False", "None", "inf", "nan", "loc"})


def _fmt_attr(v) -> str:
    if isinstance(v, tuple):
        return "[" + ", ".join(map(_fmt_attr, v)) + "]"
    if isinstance(v, str):
        return v if BARE_WORD.fullmatch(v) and v not in NOT_BARE else json.dumps(v)
    return repr(v)


def print_op(op: Op, namer: Namer, indent: int, lines: list[str]) -> None:
    pad = "  " * indent
    res = ", ".join(namer(r) for r in op.results)
    head = f"{res} = " if res else ""
    attrs = {k: v for k, v in op.attrs.items() if not k.startswith("_")}
    fn = attrs.pop("fn", None)
    name = op.name + (f" {fn}" if fn else "")
    operands = ", ".join(namer(o) for o in op.operands)
    attr_txt = (" {" + ", ".join(f"{k} = {_fmt_attr(v)}" for k, v in attrs.items()) + "}") if attrs else ""
    types = ", ".join(tile_type_str(r) for r in op.results)
    type_txt = f" : {types}" if types else ""
    loc_txt = f"  loc(\"{op.loc.file}\":{op.loc.line}:{op.loc.col})" if op.loc.known else ""
    if not op.regions:
        lines.append(f"{pad}{head}{name} {operands}{attr_txt}{type_txt}{loc_txt}".replace("  :", " :"))
        return
    lines.append(f"{pad}{head}{name} {operands}{attr_txt}{type_txt} {{")
    for ri, region in enumerate(op.regions):
        if ri:
            lines.append(f"{pad}}} {{")
        for b in region.blocks:
            if b.args:
                lines.append(f"{pad}^bb(" + ", ".join(f"{namer(a)}: {tile_type_str(a)}" for a in b.args) + "):")
            for inner in b.ops:
                print_op(inner, namer, indent + 1, lines)
    lines.append(f"{pad}}}{loc_txt}")


def print_module(mod: Module) -> str:
    """The textual form of `nmpir`, MLIR-like, with source locations."""
    lines: list[str] = []
    namer = Namer()
    for f in mod.funcs:
        args = ", ".join(f"{namer(a)}: {tile_type_str(a)}" for a in f.args)
        lines.append(f"nmp.func @{f.name}({args}) {{")
        for op in f.body.ops:
            print_op(op, namer, 1, lines)
        lines.append("}")
    return "\n".join(lines) + "\n"


# -- verifier --------------------------------------------------------------------------------------

def verify(mod: Module, stage: str) -> None:
    """Structural checks between passes: every value defined once and every use dominated by its
    definition, operand shapes and operand counts of tile ops. A failure is a compiler bug, reported
    with the op and its location."""
    for f in mod.funcs:
        _verify_block(f.body, set(id(a) for a in f.args), f, stage, set())


def _fail(op: Op, f: Func, stage: str, msg: str) -> None:
    raise NMPCompilationError(f"nmpir verifier after {stage}: {op.name}: {msg}", kernel=f.name, loc=str(op.loc))


def _verify_block(block: Block, visible: set[int], f: Func, stage: str, defined: set[int]) -> None:
    scope = set(visible) | {id(a) for a in block.args}
    for op in block.ops:
        for v in op.results:
            _define_once(v, op, f, stage, defined)
        for region in op.regions:  # e.g. one Region object in two ops would define its values twice
            for b in region.blocks:
                for a in b.args:
                    _define_once(a, op, f, stage, defined)
        for o in op.operands:
            if id(o) not in scope:
                _fail(op, f, stage, f"operand %{o.name} is not defined before its use")
        _verify_operands(op, f, stage)
        if op.name == "nmp.vec":
            shape = op.results[0].type.shape
            for o in op.operands:
                if o.type.is_tensor and o.type.shape != shape:
                    _fail(op, f, stage, f"operand shape {o.type.shape} differs from result shape {shape}")
        if op.name in ("nmp.dma_load", "nmp.dma_store") and not Operands(op).base.type.is_ptr:
            _fail(op, f, stage, "the DMA base must be a pointer argument")
        for region in op.regions:
            for b in region.blocks:
                _verify_block(b, scope, f, stage, defined)
        for r in op.results:
            scope.add(id(r))


def _define_once(v: Value, op: Op, f: Func, stage: str, defined: set[int]) -> None:
    if id(v) in defined:
        _fail(op, f, stage, f"%{v.name} is defined twice")
    defined.add(id(v))


def _verify_operands(op: Op, f: Func, stage: str) -> None:
    """The op is in the op table and has the operands its layout asks for."""
    d = op_def(op.name)
    if d is None:
        _fail(op, f, stage, "not an nmpir op (see backend/ops.py)")
    for attr, group in d.count_attrs:
        if not isinstance(op.attrs.get(attr), int):
            _fail(op, f, stage, f"attribute '{attr}' (number of {group} operands) is missing")
    expect, at_least = d.operand_count(op.attrs)
    n = len(op.operands)
    if n < expect or (n > expect and not at_least):
        what = f"{'at least ' if at_least else ''}{expect} operands ({d.layout})"
        if "rank" in op.attrs:
            what += f" for rank {op.attrs['rank']}"
        _fail(op, f, stage, f"expected {what}, found {n}")


# -- dead code elimination ---------------------------------------------------------------------------

def _has_effects(op: Op) -> bool:
    if op.name in SIDE_EFFECT_OPS:
        return True
    return any(inner.name in SIDE_EFFECT_OPS and inner.name not in TERMINATORS
               for inner in op.walk() if inner is not op)


def eliminate_dead_code(mod: Module) -> None:
    """Remove ops without effects whose results are unused (pointer tiles that became DMA descriptors)."""
    for f in mod.funcs:
        while True:
            used: set[int] = set()
            for op in f.walk():
                used.update(id(o) for o in op.operands)
            if not _sweep(f.body, used):
                break


def _sweep(block: Block, used: set[int]) -> bool:
    changed = False
    kept = []
    for op in block.ops:
        for r in op.regions:
            for b in r.blocks:
                changed |= _sweep(b, used)
        dead = not _has_effects(op) and all(id(r) not in used for r in op.results)
        if dead and op.name != "scf.while":  # a while loop may not terminate: keep it
            changed = True
            continue
        kept.append(op)
    block.ops[:] = kept
    return changed


def sink_address_computations(mod: Module) -> None:
    """Move the elementwise ops that only compute a gather/scatter/atomic's tiles (addresses, mask,
    values) right before it, so they form one fused run with it (see `fused_run_length`): the pointer
    tile is then never stored. Moving a pure op down to its only consumer keeps every operand defined."""
    for f in mod.funcs:
        uses: dict[int, int] = {}
        for op in f.walk():
            for o in op.operands:
                uses[id(o)] = uses.get(id(o), 0) + 1
        _sink_block(f.body, uses)


def _sink_block(block: Block, uses: dict[int, int]) -> None:
    for op in block.ops:
        for r in op.regions:
            for b in r.blocks:
                _sink_block(b, uses)
    for mem in [op for op in block.ops if op.name in FUSABLE_MEMORY_OPS]:
        _sink_into(block, mem, uses)


def _sink_into(block: Block, mem: Op, uses: dict[int, int]) -> None:
    pos = {id(op): k for k, op in enumerate(block.ops)}
    last: dict[int, int] = {}
    for k, op in enumerate(block.ops):
        for inner in op.walk():
            for o in inner.operands:
                last[id(o)] = max(last.get(id(o), -1), k)
    at = pos[id(mem)]
    producers = {id(op.results[0]): op for op in block.ops
                 if _fusable(op) and op.results and op.results[0].type.is_tensor and pos[id(op)] < at}
    chain: dict[int, Op] = {}

    def movable(v: Value, picked: dict[int, Op], extended: dict[int, Value]) -> bool:
        """Whether v's producer (and what only it uses) can move next to `mem`; adds the ops to
        `picked` and the tiles whose life that prolongs to `extended`, only when the whole subtree can."""
        op = producers.get(id(v))
        if op is None or uses.get(id(v), 0) != 1:
            return False
        if id(op) in chain or id(op) in picked:
            return True
        sub: dict[int, Op] = {}
        ext: dict[int, Value] = {}
        for o in op.operands:
            if o.type.is_tensor and not movable(o, sub, ext) and last.get(id(o), -1) < at:
                ext[id(o)] = o  # used only by ops that move: it would now live until `mem`
        picked.update(sub)
        extended.update(ext)
        picked[id(op)] = op
        return True

    for o in Operands(mem).after("base"):
        sub: dict[int, Op] = {}
        ext: dict[int, Value] = {}
        if not movable(o, sub, ext):
            continue
        # worth it when the tiles that stop being stored outweigh the tiles that live longer
        saved = sum(op.results[0].type.nbytes for op in sub.values())
        if sum(v.type.nbytes for v in ext.values()) < saved:
            chain.update(sub)
    if chain:
        ordered = [op for op in block.ops if id(op) in chain]  # keep their original order
        rest = [op for op in block.ops if id(op) not in chain]
        k = rest.index(mem)
        block.ops[:] = rest[:k] + ordered + rest[k:]


# -- elementwise fusion groups ---------------------------------------------------------------------------

# Elementwise functions lowered to scalar libm calls: a loop containing one is not vectorised, so they
# are kept out of fused runs and the ops around them stay vectorisable (fp32 exp/exp2 are inline:
# see fastmath).
SCALAR_CALL_FNS = {"math.log", "math.log2", "math.log10", "math.exp10", "math.sin",
                   "math.cos", "math.tan", "math.erf", "math.erfc", "math.tanh", "math.atan", "math.asin",
                   "math.acos", "math.sinh", "math.cosh", "math.log1p", "math.expm1", "math.cbrt", "math.powf",
                   "arith.remf", "tt.extern_elementwise"}


def _fusable(op: Op) -> bool:
    if op.name == "nmp.iota":
        return bool(op.attrs.get("fused"))  # leaner buffers (make_leaner): computed per element in a run
    return op.name in FUSABLE_OPS and op.attrs.get("fn") not in SCALAR_CALL_FNS


def fused_run_length(ops: list[Op], start: int) -> int:
    """Length of the run of elementwise tile ops of one shape starting at `ops[start]` (1 if none).

    The codegen computes such a run in one loop, element by element, so the scratchpad planner must
    treat the whole run as one step: every tile it touches is live for all of it. A broadcast in a run
    reads its (smaller) source in place: the broadcast tile itself is never stored. A run may end in a
    gather, scatter or atomic that uses its addresses, or in a reduction marked `fused` (by the
    leaner-buffer rung of legalization) over tiles of the run's shape: the reduction then combines
    each element as the run computes it, so the tile it reduces is never stored."""
    first = ops[start]
    if not _fusable(first) or not first.results or not first.results[0].type.is_tensor:
        return 1
    shape = first.results[0].type.shape
    n = 0
    for op in ops[start:]:
        if not _fusable(op) or op.results[0].type.shape != shape:
            break
        if op.name == "nmp.vec" and any(o.type.is_tensor and o.type.shape != shape for o in op.operands):
            break
        n += 1
    if 0 < n and start + n < len(ops) and (_ends_run(ops[start + n], ops[start:start + n], shape)
                                           or _reduce_ends_run(ops[start + n], ops[start:start + n], shape)):
        n += 1
    return max(n, 1)


def _reduce_ends_run(op: Op, run: list[Op], shape: tuple[int, ...]) -> bool:
    """Whether the reduction `op` (marked `fused`) can end `run`: it reduces tiles of the run's shape, one
    of them computed by the run."""
    if op.name != "nmp.reduce" or not op.attrs.get("fused"):
        return False
    if any(not o.type.is_tensor or o.type.shape != shape for o in op.operands):
        return False
    produced = {id(r.results[0]) for r in run if r.results}
    return any(id(o) in produced for o in op.operands)


def make_leaner(func: Func) -> int:
    """Leaner buffers, the first rung of legalization when a kernel does not fit as it is; returns how
    many ops changed (0: nothing to gain).

    - A view to the same shape (`tl.sum` flattening a 1-D tile) is dropped: it would end a run.
    - An iota is computed per element inside the run that uses it (`i + tl.arange(0, BLOCK) < n`): its
      tile is never stored (`fused`).
    - A reduction ends the fused run that computes its input (`fused`): each element is combined as the
      run computes it (`tl.sum(x * y)`, `tl.sum(tl.exp(x - m))`), so the tile it reduces is not stored.
    """
    changed = _drop_identity_views(func)
    for op in func.walk():
        if op.name == "nmp.iota" and not op.attrs.get("fused"):
            op.attrs["fused"] = True
            changed += 1
    if changed:
        _place_func(func)  # a fused iota, like a splat, is cloned next to each user
    blocks = [func.body] + [b for op in func.walk() for r in op.regions for b in r.blocks]
    for block in blocks:
        ops = block.ops
        candidates = [op for op in ops if op.name == "nmp.reduce" and not op.attrs.get("fused")]
        for op in candidates:
            op.attrs["fused"] = True
        ends: set[int] = set()
        i = 0
        while i < len(ops):  # the runs as the planner and the codegen cut them
            n = fused_run_length(ops, i)
            ends.add(id(ops[i + n - 1]) if n > 1 else -1)
            i += n
        for op in candidates:
            if id(op) in ends:
                changed += 1
            else:
                del op.attrs["fused"]
    return changed


def _drop_identity_views(func: Func) -> int:
    """Replace every use of a view whose type is its source's by the source; returns how many went."""
    same = {id(op.result): op.operands[0] for op in func.walk()
            if op.name == "nmp.view" and op.result.type == op.operands[0].type}
    if not same:
        return 0

    def resolve(v: Value) -> Value:
        while id(v) in same:
            v = same[id(v)]
        return v

    for op in func.walk():
        op.operands = [resolve(o) for o in op.operands]
    blocks = [func.body] + [b for op in func.walk() for r in op.regions for b in r.blocks]
    for block in blocks:
        block.ops[:] = [op for op in block.ops if not (op.name == "nmp.view" and id(op.result) in same)]
    return len(same)


# Tile ops that cost nothing inside a fused run: they read a scalar, a constant or a smaller tile.
CHEAP_TILE_OPS = ("nmp.broadcast", "nmp.splat", "nmp.const")


def place_cheap_tiles(mod: Module) -> None:
    """Put broadcasts, splats and constants where fused runs can absorb them.

    A view (an alias, no code) moves to right after its source's definition, so it does not split the
    runs around it. A broadcast, splat or constant is cloned right before each op of its block that uses
    it: inside that op's fused run it is computed per element and never stored (`x - mean[:, None]`,
    `tl.where(m, x, 0.0)`, the `tl.zeros` of two accumulators), and where the user is not elementwise
    (a loop's initial value, a dot's accumulator) the tile lives only from there. Uses in nested regions
    keep the original."""
    for f in mod.funcs:
        _place_func(f)


def _place_func(f: Func) -> None:
    for op in list(f.walk()):
        for r in op.regions:
            for b in r.blocks:
                _place_block(b)
    _place_block(f.body)


def _cheap(op: Op) -> bool:
    return (op.name in CHEAP_TILE_OPS or op.name == "nmp.iota" and op.attrs.get("fused")) and bool(op.results) \
        and op.results[0].type.is_tensor


def _place_block(block: Block) -> None:
    _hoist_views(block)
    cheap = {id(op.results[0]): op for op in block.ops if _cheap(op)}
    if not cheap:
        return
    nested: set[int] = set()
    for op in block.ops:
        for inner in op.walk():
            if inner is not op:
                nested.update(id(o) for o in inner.operands if id(o) in cheap)
    out: list[Op] = []
    for op in block.ops:
        if id(op) in {id(c) for c in cheap.values()} and id(op.results[0]) not in nested:
            continue  # cloned next to each user below
        clones: dict[int, Value] = {}
        for k, o in enumerate(op.operands):
            src = cheap.get(id(o))
            if src is None or src is op:
                continue
            if id(o) not in clones or not _fusable(op):  # a loop's two zero inits: two buffers, each taken over
                c = Op(src.name, list(src.operands), [], dict(src.attrs), [], src.loc)
                c.results.append(Value(src.results[0].name, src.results[0].type, c))
                out.append(c)
                clones[id(o)] = c.results[0]
            op.operands[k] = clones[id(o)]
        out.append(op)
    block.ops[:] = out


def _hoist_views(block: Block) -> None:
    views = [op for op in block.ops if op.name == "nmp.view"]
    if not views:
        return
    out = [op for op in block.ops if op.name != "nmp.view"]
    for v in views:  # in order: a view of a view lands after the first
        src = v.operands[0]
        at = next((k + 1 for k, op in enumerate(out) if any(src is r for r in op.results)), 0)
        out.insert(at, v)
    block.ops[:] = out


def _ends_run(op: Op, run: list[Op], shape: tuple[int, ...]) -> bool:
    """Whether the gather/scatter/atomic `op` can end `run`: its addresses are the run's, of its shape."""
    if op.name not in FUSABLE_MEMORY_OPS:
        return False
    tiles = [o for o in Operands(op).after("base") if o.type.is_tensor]
    produced = {id(r.results[0]) for r in run if r.results}
    # the run computes one of its tiles (addresses, offsets, mask, values), all of the run's shape
    return any(id(o) in produced for o in tiles) and all(o.type.shape == shape for o in tiles)

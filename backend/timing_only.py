"""Which kernels can be timed without computing their data ("timing-only" simulation).

The timing model needs the trace of DMA descriptors and compute ops, not the values. When no loop
bound, branch condition or address depends on data a kernel loads (or computes from loaded data),
the trace is the same whether or not tiles are computed, and a variant of the kernel that skips all
tile compute and data movement produces it many times faster. This module decides eligibility.

Data dependence is tracked per value: loads, gathers and atomics produce data; reductions, scans and
every op that turns a tile into a scalar do too (the timing-only variant does not compute tiles, so such
a scalar would be a placeholder there); every other op's results are data exactly when an operand is.
Tiles built only from program ids, aranges, constants and scalar arguments are therefore not data: the
row offsets of a row gather such as the matmul tutorial's `(pid_m * BM + arange) % M` rows. They are
the one kind of tile an address reads (`address_tiles`), and the timing-only variant computes them.
"""

from __future__ import annotations

from .ir import Func, Op, Value
from .ops import Operands, dma_address_operands

# Ops whose results carry data read from memory, or scalars computed from tiles.
_DATA_SOURCES = {"nmp.dma_load", "nmp.gather", "nmp.reduce", "nmp.scan", "nmp.atomic", "nmp.unsplat"}
_FORBIDDEN = {"nmp.gather", "nmp.scatter", "nmp.atomic", "nmp.assert", "nmp.print"}
# The tile ops the timing-only variant computes when a row gather's offsets need them.
ADDRESS_TILE_OPS = ("nmp.iota", "nmp.splat", "nmp.vec", "nmp.const")


def address_tiles(func: Func) -> set[int]:
    """Ids of the tiles a row gather's offsets (the `index` of a DMA) are computed from, through
    `ADDRESS_TILE_OPS`; a value of the set made by another op (or a block argument) ends the walk."""
    need: set[int] = set()
    roots: list[Value] = [Operands(op).index for op in func.walk()
                          if op.name in ("nmp.dma_load", "nmp.dma_store") and Operands(op).index is not None]
    while roots:
        v = roots.pop()
        if id(v) in need:
            continue
        need.add(id(v))
        owner = v.owner
        if isinstance(owner, Op) and owner.name in ADDRESS_TILE_OPS:
            roots.extend(o for o in owner.operands if o.type.is_tensor)
    return need


def _is_source(op: Op) -> bool:
    if op.name in _DATA_SOURCES:
        return True
    # a scalar computed from a tile (the timing-only variant leaves tiles uncomputed); loops and branches
    # are handled by the fixpoint
    return (not op.regions and any(o.type.is_tensor for o in op.operands)
            and any(not r.type.is_tensor for r in op.results))


def timing_only_eligible(func: Func) -> tuple[bool, str]:
    """(eligible, reason). Ineligible kernels are always fully simulated."""
    ops = list(func.walk())
    for op in ops:
        if op.name in _FORBIDDEN or op.name.startswith("nmp.atomic"):
            return False, f"{op.name} needs element addresses computed from tiles"
    tainted: set[int] = set()
    changed = True
    while changed:  # propagate to a fixpoint: loop-carried values feed back through scf.yield
        before = len(tainted)
        for op in ops:
            if _is_source(op) or any(id(o) in tainted for o in op.operands):
                tainted.update(id(r) for r in op.results)
            if op.name == "scf.for":
                body = op.regions[0].block
                for i, (a, init) in enumerate(zip(body.args[1:], Operands(op).inits)):
                    y = body.ops[-1].operands[i]
                    if id(init) in tainted or id(y) in tainted:
                        tainted.update((id(a), id(op.results[i])))
            elif op.name in ("scf.if", "scf.while"):
                tainted.update(id(r) for r in op.results)
        changed = len(tainted) != before
    for op in ops:
        reason = _control_use(op, lambda v: id(v) in tainted)
        if reason:
            return False, reason
    by_id = {id(r): (op, r) for op in ops for r in op.results}
    for key in address_tiles(func):
        op, r = by_id.get(key, (None, None))
        if op is None or op.name not in ADDRESS_TILE_OPS:
            what = f"{op.name} at {op.loc}" if op is not None else "a loop-carried tile"
            return False, f"the row offsets of a row gather come from {what}, which timing-only code does not compute"
    return True, "addresses and trip counts do not depend on loaded data"


def _control_use(op: Op, is_tainted) -> str:
    if op.name == "scf.for" and any(is_tainted(o) for o in _bounds(op)):
        return f"loop bounds at {op.loc} depend on loaded data"
    if op.name == "scf.if" and is_tainted(Operands(op).cond):
        return f"a branch at {op.loc} depends on loaded data"
    if op.name == "scf.while":
        return "while loops may depend on loaded data"
    if op.name in ("nmp.dma_load", "nmp.dma_store"):
        if any(is_tainted(o) for o in dma_address_operands(op)):
            return f"the address or mask of an access at {op.loc} depends on loaded data"
    return ""


def _bounds(loop: Op) -> tuple:
    at = Operands(loop)
    return at.lb, at.ub, at.step

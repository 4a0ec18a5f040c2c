"""Loop-invariant code motion on nmpir: pure ops of an `scf.for` body whose operands are all defined
outside the loop move to right before it, so they run once instead of once per iteration.

What matters most is not the saved work but the schedule: the timing model overlaps a multi-buffered
load with the compute before it only when no other compute separates the loop's prefetched loads
(`simulator/timing.py`, item 5). Inductor's matmul template recomputes the row offsets of both operands
in every iteration (`xindex = idx_n + 768 * idx_m` with `idx_m = rm % M` from before the loop); their
`nmp.vec` ops between the A and the B load left B's DMA exposed, about 40% of the template's time.

Moved: scalar `arith.*`/`math.*` ops and `nmp.vec` tiles of at most `MAX_TILE_BYTES` (a hoisted tile lives
in the scratchpad for the whole loop), never integer division or remainder (a loop that runs zero times
must not fault on them). Broadcasts, splats and constants stay: `place-cheap-tiles` fuses them into their
users, and a tile op that reads one stays with it. Inner loops are done first, so an op leaves a nest as
far as its operands allow. Results are unchanged: the ops are pure and see the same operand values.
"""

from __future__ import annotations

from .ir import Block, Module, Op

__all__ = ["hoist_loop_invariants", "MAX_TILE_BYTES"]

MAX_TILE_BYTES = 4096
_NO_HOIST_FNS = frozenset({"arith.divsi", "arith.divui", "arith.remsi", "arith.remui", "arith.ceildivsi",
                           "arith.floordivsi", "arith.ceildivui"})


def hoist_loop_invariants(mod: Module) -> int:
    """Hoist loop-invariant ops in every function; returns how many ops moved."""
    return sum(_hoist_block(f.body) for f in mod.funcs)


def _hoist_block(block: Block) -> int:
    moved = 0
    out: list[Op] = []
    for op in block.ops:
        for r in op.regions:
            for b in r.blocks:
                moved += _hoist_block(b)
        if op.name == "scf.for":
            hoisted = _invariants(op)
            out.extend(hoisted)
            moved += len(hoisted)
        out.append(op)
    block.ops[:] = out
    return moved


def _movable(op: Op) -> bool:
    if op.regions or len(op.results) != 1:
        return False
    ty = op.results[0].type
    if op.name == "nmp.vec":
        return ty.is_tensor and ty.nbytes <= MAX_TILE_BYTES and op.attrs.get("fn") not in _NO_HOIST_FNS
    return (op.name.startswith(("arith.", "math.")) and not ty.is_tensor and op.name not in _NO_HOIST_FNS)


def _invariants(loop: Op) -> list[Op]:
    """Remove the invariant ops from `loop`'s body (in order) and return them."""
    body = loop.regions[0].block
    inside = {id(a) for a in body.args}
    hoisted: list[Op] = []
    kept: list[Op] = []
    for op in body.ops:
        if _movable(op) and not any(id(o) in inside for o in op.operands):
            hoisted.append(op)
            continue
        kept.append(op)
        for inner in op.walk():
            inside.update(id(r) for r in inner.results)
        for r in op.regions:
            for b in r.blocks:
                inside.update(id(a) for a in b.args)
    body.ops[:] = kept
    return hoisted


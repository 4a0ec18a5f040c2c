"""What the element loops of tile compute cost a scalar core besides the arithmetic: scratchpad accesses.

The codegen computes a run of elementwise tile ops (`nmpir.fused_run_length`) in one loop whose
intermediate values stay in registers; only the tiles it reads from outside the run are loaded and
only results used after it are stored. A scalar core (UPMEM) issues one instruction per such element
access, so the vector-op records of the execution trace carry the count (`triton_nmp.opclass`).
The codegen and the static trace predictor both take it from here, so they emit the same records.
"""

from __future__ import annotations

from .ir import Func, Op
from .nmpir import FUSABLE_MEMORY_OPS, fused_run_length

__all__ = ["use_counts", "run_accesses", "vec_accesses"]


def use_counts(func: Func) -> dict[int, int]:
    """Uses of every value (by id) in the whole function."""
    counts: dict[int, int] = {}
    for op in func.walk():
        for o in op.operands:
            counts[id(o)] = counts.get(id(o), 0) + 1
    return counts


def run_accesses(run: list[Op], users: dict[int, int]) -> int:
    """Scratchpad element accesses per element of the loop computing `run` (a fused run or one op): a
    load per distinct tile read from outside the run, a store per result that is used after it. A
    reduction ending the run reads its inputs like the run's ops and stores no element."""
    inside: dict[int, int] = {}
    for op in run:
        for o in op.operands:
            inside[id(o)] = inside.get(id(o), 0) + 1
    ends = bool(run) and (run[-1].name in FUSABLE_MEMORY_OPS or run[-1].name == "nmp.reduce" and len(run) > 1)
    compute = run[:-1] if ends else run
    reads = run if ends and run[-1].name == "nmp.reduce" else compute
    produced = {id(op.results[0]) for op in compute if op.results}
    loads = {id(o) for op in reads for o in op.operands if o.type.is_tensor and id(o) not in produced}
    stores = sum(1 for k in produced if users.get(k, 0) > inside.get(k, 0))
    return len(loads) + stores


def vec_accesses(ops: list[Op], users: dict[int, int]) -> dict[int, int]:
    """id(nmp.vec or nmp.reduce op) -> accesses its trace record carries: the loop's count on the first
    record of each loop, 0 on the others of a fused run (their loop is already charged). A reduction
    alone reads each of its inputs once per element."""
    out: dict[int, int] = {}
    i = 0
    while i < len(ops):
        n = fused_run_length(ops, i)
        run = ops[i:i + n]
        first = True
        for op in run:
            if op.name == "nmp.reduce" and n == 1:
                out[id(op)] = len(op.operands)
            elif op.name in ("nmp.vec", "nmp.reduce"):
                out[id(op)] = run_accesses(run, users) if first else 0
                first = False
        i += n
    return out

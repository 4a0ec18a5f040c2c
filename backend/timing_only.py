"""Which kernels can be timed without computing their data ("timing-only" simulation).

The timing model needs the trace of DMA descriptors and compute ops, not the values. When no loop
bound, branch condition or address depends on data a kernel loads (or computes from loaded data),
the trace is the same whether or not tiles are computed, and a variant of the kernel that skips all
tile compute and data movement produces it many times faster. This module decides eligibility.
"""

from __future__ import annotations

from .ir import Func, Op
from .ops import Operands, dma_address_operands

# Ops whose results carry data read from memory or computed from tiles.
_DATA_SOURCES = {"nmp.dma_load", "nmp.gather", "nmp.reduce", "nmp.scan", "nmp.atomic"}
_FORBIDDEN = {"nmp.gather", "nmp.scatter", "nmp.atomic", "nmp.assert", "nmp.print"}


def timing_only_eligible(func: Func) -> tuple[bool, str]:
    """(eligible, reason). Ineligible kernels are always fully simulated."""
    ops = list(func.walk())
    for op in ops:
        if op.name in _FORBIDDEN or op.name.startswith("nmp.atomic"):
            return False, f"{op.name} needs element addresses computed from tiles"
    tainted: set[int] = set()
    changed = True
    while changed:  # propagate to a fixpoint: loop-carried values feed back through scf.yield
        changed = False
        before = len(tainted)
        for op in ops:
            if op.name in _DATA_SOURCES or any(r.type.is_tensor for r in op.results):
                tainted.update(id(r) for r in op.results)
            elif any(id(o) in tainted for o in op.operands):
                tainted.update(id(r) for r in op.results)
            if op.name == "scf.for":
                body = op.regions[0].block
                for i, (a, init) in enumerate(zip(body.args[1:], Operands(op).inits)):
                    y = body.ops[-1].operands[i]
                    if id(init) in tainted or id(y) in tainted or a.type.is_tensor:
                        tainted.update((id(a), id(op.results[i])))
            elif op.name in ("scf.if", "scf.while"):
                tainted.update(id(r) for r in op.results)
        changed = len(tainted) != before
    for op in ops:
        reason = _control_use(op, lambda v: id(v) in tainted)
        if reason:
            return False, reason
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

"""TTIR rewrite: an access through a pointer chosen at run time between two arguments becomes a branch.

`p = tl.where(flag, a_ptr, b_ptr); tl.load(p + offs)` reads from one of two kernel arguments, decided by
a scalar at run time. Every access on nmp is a DMA descriptor (or gather) of one argument's banks, so
the access is duplicated under `scf.if flag`: the then-branch recomputes the address from `a_ptr`, the
else-branch from `b_ptr`, and each branch is an ordinary access of one argument (structured DMA when its
offsets are affine). Only scalar conditions are rewritten; a per-element choice of argument keeps the
"cannot tell which kernel argument" error.
"""

from __future__ import annotations

from .ir import Block, Builder, Func, Op, Region, Value

# ops a pointer passes through on its way from an argument to an access
_ADDRESS_OPS = {"tt.splat", "tt.broadcast", "tt.expand_dims", "tt.reshape", "tt.trans", "tt.addptr",
                "arith.select"}
_ACCESSES = {"tt.load", "tt.store", "tt.atomic_rmw", "tt.atomic_cas"}


def _owner(v: Value) -> Op | None:
    return v.owner if isinstance(v.owner, Op) else None


def _root(v: Value, args: list[Value]) -> Value | None:
    """The argument a scalar pointer derives from through addptr (None if it cannot be told)."""
    for _ in range(1000):
        if any(v is a for a in args):
            return v
        op = _owner(v)
        if op is None or op.name != "tt.addptr":
            return None
        v = op.operands[0]
    return None


def _select_in(v: Value, args: list[Value]) -> Op | None:
    """A scalar-conditioned select of pointers rooted in two different arguments on `v`'s address path."""
    op = _owner(v)
    while op is not None and op.name in _ADDRESS_OPS:
        if op.name == "arith.select":
            cond, a, b = op.operands
            ra, rb = _root(a, args), _root(b, args)
            if not cond.type.is_tensor and ra is not None and rb is not None and ra is not rb:
                return op
            return None
        v = op.operands[0]
        op = _owner(v)
    return None


def _clone(v: Value, sel: Op, pick: Value, out: Builder, memo: dict[int, Value]) -> Value:
    """`v` recomputed with `sel`'s result replaced by `pick` (new ops appended by `out`)."""
    if v is sel.results[0]:
        return pick
    if id(v) in memo:
        return memo[id(v)]
    op = _owner(v)
    if op is None or op.name not in _ADDRESS_OPS:
        return v
    operands = [_clone(o, sel, pick, out, memo) for o in op.operands]
    if all(a is b for a, b in zip(operands, op.operands)):
        return v
    new = out.op(op.name, operands, [r.type for r in op.results], op.attrs, names=[r.name + "_sel" for r in op.results],
                 loc=op.loc)
    memo[id(v)] = new.results[op.results.index(v)]
    return memo[id(v)]


def _branch(access: Op, sel: Op, pick: Value) -> Region:
    b = Builder(Block(), access.loc)
    ptr = _clone(access.operands[0], sel, pick, b, {})
    new = b.op(access.name, [ptr, *access.operands[1:]], [r.type for r in access.results], access.attrs,
               names=[r.name + "_br" for r in access.results])
    b.op("scf.yield", new.results)
    return Region([b.block])


def _rewrite_block(block: Block, args: list[Value]) -> int:
    n = 0
    for i, op in enumerate(block.ops):
        for region in op.regions:
            for b in region.blocks:
                n += _rewrite_block(b, args)
        if op.name not in _ACCESSES:
            continue
        sel = _select_in(op.operands[0], args)
        if sel is None:
            continue
        cond, a, b = sel.operands
        # not a new op from a Builder: the access's results keep their uses, the branch now defines them
        branch = Op("scf.if", [cond], list(op.results), {}, [_branch(op, sel, a), _branch(op, sel, b)], op.loc)
        for r in op.results:
            r.owner = branch
        block.ops[i] = branch
        n += 1
    return n


def split_pointer_selects(func: Func) -> int:
    """Rewrite every access through a run-time choice between two argument pointers; returns how many."""
    blocks = [func.body, *(getattr(func, "cfg_blocks", None) or {}).values()]
    return sum(_rewrite_block(b, func.args) for b in blocks if b is not None)

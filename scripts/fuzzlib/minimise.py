"""Delta debugging over a failing program: shrink it while the failure keeps its class.

Greedy passes, repeated until none applies (or the budget of runs is spent): drop writes (then the
statements nothing uses), replace an expression by one of its operands, unroll a loop into one
iteration / shorten it / make it a plain `range`, shrink each dimension, drop the grid, masks,
strided layouts, eviction hints and run-time strides, replace constants by 1 and the input data by
ones. A candidate must type-check (`typecheck.check`) and reproduce the same `CaseResult.signature()`
(for a mismatch: still a mismatch; for a compile error: the same exception type).

`minimise(program, result, runner)` uses a `case.Runner`; `minimise_with(program, predicate)` takes any
predicate (the unit tests plant one).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace

from .program import (
    Atomic,
    Bin,
    Call,
    Cast,
    Const,
    Dot,
    Expand,
    Let,
    Load,
    Loop,
    Program,
    Reduce,
    Scan,
    Store,
    Un,
    Var,
    children,
    stmt_exprs,
    walk_exprs,
    walk_stmts,
)
from .typecheck import check

MAX_RUNS = 150


def minimise(p: Program, result, runner, max_runs: int = MAX_RUNS) -> tuple[Program, int]:
    want = result.signature()

    def still_fails(q: Program) -> bool:
        return runner.run(q, seed=result.seed).signature() == want

    return minimise_with(p, still_fails, max_runs)


def minimise_with(p: Program, still_fails: Callable[[Program], bool], max_runs: int = MAX_RUNS) -> tuple[Program, int]:
    runs = 0
    seen: set[Program] = {p}
    if dce(p) != p and _valid(dce(p)):
        runs += 1
        if still_fails(dce(p)):
            p = dce(p)
    changed = True
    while changed and runs < max_runs:
        changed = False
        for cand in candidates(p):
            cand = dce(cand)
            if cand in seen or not _valid(cand):
                continue
            seen.add(cand)
            runs += 1
            if still_fails(cand):
                p = cand
                changed = True
                break
            if runs >= max_runs:
                break
    return p, runs


def _valid(p: Program) -> bool:
    try:
        check(p)
        return True
    except (TypeError, KeyError, ValueError):
        return False


def size(p: Program) -> int:
    """A measure of a program: statements, expression nodes and tile elements."""
    n = 0
    for s in walk_stmts(p.body):
        n += 1
        for e in stmt_exprs(s):
            n += sum(1 for _ in walk_exprs(e))
    elems = 1
    for _, v in p.dims:
        elems *= v
    return n * 1000 + elems


# -- candidates, most shrinking first ----------------------------------------------------------------

def candidates(p: Program) -> Iterator[Program]:
    yield from _drop_writes(p)
    yield from _loops(p)
    yield from _hoist(p)
    yield from _knobs(p)
    yield from _shrink_dims(p)
    yield from _constants(p)
    yield from _scans(p)


def _drop_writes(p: Program) -> Iterator[Program]:
    paths = [path for path, s in _stmt_paths(p.body) if isinstance(s, (Store, Atomic))]
    if len(paths) > 1:
        for path in paths:
            yield replace(p, body=_edit(p.body, path, []))
    for path, s in _stmt_paths(p.body):
        if isinstance(s, Atomic) and s.old_out is not None:
            yield replace(p, body=_edit(p.body, path, [replace(s, old_out=None)]))
        if isinstance(s, Atomic) and s.op != "add":
            yield replace(p, body=_edit(p.body, path, [replace(s, op="add", cmp=None)]))
        if isinstance(s, Atomic):
            yield replace(p, body=_edit(p.body, path, [Store(s.out, s.value, s.masked)]))


def _loops(p: Program) -> Iterator[Program]:
    for path, s in _stmt_paths(p.body):
        if not isinstance(s, Loop):
            continue
        flat = [Let(n, e) for n, e in s.carried] + [_unwalk(x) for x in s.body] + [Let(n, e) for n, e in s.updates]
        yield replace(p, body=_edit(p.body, path, flat))
        if s.trips > 1:
            yield replace(p, body=_edit(p.body, path, [replace(s, trips=1)]))
        if s.dynamic or s.kind != "for":
            yield replace(p, body=_edit(p.body, path, [replace(s, dynamic=False, kind="for")]))


def _unwalk(s):
    return _map_stmt(s, lambda e: replace(e, along=None, carried_ptr=False) if isinstance(e, Load) else e)


def _hoist(p: Program) -> Iterator[Program]:
    for path, s in _stmt_paths(p.body):
        if not isinstance(s, Let):
            continue
        for sub in _subtrees(s.expr):
            for child in children(sub):
                yield replace(p, body=_edit(p.body, path, [Let(s.name, _swap(s.expr, sub, child))]))


def _subtrees(e):
    yield e
    for c in children(e):
        yield from _subtrees(c)


def _swap(e, old, new):
    if e is old:
        return new
    if isinstance(e, Bin):
        return replace(e, a=_swap(e.a, old, new), b=_swap(e.b, old, new))
    if isinstance(e, (Un, Cast, Reduce, Scan, Expand)):
        return replace(e, a=_swap(e.a, old, new))
    if isinstance(e, Call):
        return replace(e, args=tuple(_swap(x, old, new) for x in e.args))
    if isinstance(e, Dot):
        return replace(e, a=_swap(e.a, old, new), b=_swap(e.b, old, new),
                       acc=None if e.acc is None else _swap(e.acc, old, new))
    return e


def _knobs(p: Program) -> Iterator[Program]:
    if p.grid > 1:
        yield replace(p, grid=1, grid_dim=None)
    if any(lay != "contig" for lay in p.layouts):
        yield replace(p, layouts=tuple("contig" for _ in p.layouts))
    if p.const_strides:
        yield replace(p, const_strides=False)
    if p.data_kind != "ones":
        yield replace(p, data_kind="ones")
    if p.data_kind == "wide":
        yield replace(p, data_kind="small")
    full = tuple((d, v * (p.grid if d == p.grid_dim else 1) * max([s.trips for s in p.body if isinstance(s, Loop)]
                                                                    + [1])) for d, v in p.dims)
    if p.bounds != full:
        yield replace(p, bounds=full)
    yield _map_program(p, lambda e: replace(e, masked=False, other=0, evict="") if isinstance(e, Load) else e)
    yield _map_program(p, lambda e: replace(e, carried_ptr=False) if isinstance(e, Load) else e)
    for path, s in _stmt_paths(p.body):
        if isinstance(s, (Store, Atomic)) and s.masked:
            yield replace(p, body=_edit(p.body, path, [replace(s, masked=False)]))


def _shrink_dims(p: Program) -> Iterator[Program]:
    dot_dims = {d for s in walk_stmts(p.body) for e in stmt_exprs(s) for x in walk_exprs(e) if isinstance(x, Dot)
                for d in ("M", "N", "K")}
    for k, (d, v) in enumerate(p.dims):
        floor = 16 if d in dot_dims else 1
        if v // 2 >= floor:
            dims = p.dims[:k] + ((d, v // 2),) + p.dims[k + 1:]
            bounds = tuple((n, min(b, b // 2 if n == d else b)) for n, b in p.bounds)
            yield replace(p, dims=dims, bounds=bounds)


def _constants(p: Program) -> Iterator[Program]:
    consts = {x for s in walk_stmts(p.body) for e in stmt_exprs(s) for x in walk_exprs(e)
              if isinstance(x, Const) and x.value not in (0, 1)}
    for c in sorted(consts, key=repr):
        one = Const(1.0 if isinstance(c.value, float) else 1)
        yield _map_program(p, lambda e, c=c, one=one: one if e == c else e)


def _scans(p: Program) -> Iterator[Program]:
    yield _map_program(p, lambda e: replace(e, reverse=False) if isinstance(e, Scan) and e.reverse else e)


# -- rewriting utilities -----------------------------------------------------------------------------

def _stmt_paths(body, prefix=()):
    for k, s in enumerate(body):
        yield prefix + (k,), s
        if isinstance(s, Loop):
            yield from _stmt_paths(s.body, prefix + (k,))


def _edit(body, path, new: list):
    k = path[0]
    if len(path) == 1:
        return tuple(body[:k]) + tuple(new) + tuple(body[k + 1:])
    loop = body[k]
    return tuple(body[:k]) + (replace(loop, body=_edit(loop.body, path[1:], new)),) + tuple(body[k + 1:])


def _map_expr(e, f):
    if isinstance(e, Bin):
        e = replace(e, a=_map_expr(e.a, f), b=_map_expr(e.b, f))
    elif isinstance(e, (Un, Cast, Reduce, Scan, Expand)):
        e = replace(e, a=_map_expr(e.a, f))
    elif isinstance(e, Call):
        e = replace(e, args=tuple(_map_expr(x, f) for x in e.args))
    elif isinstance(e, Dot):
        e = replace(e, a=_map_expr(e.a, f), b=_map_expr(e.b, f), acc=None if e.acc is None else _map_expr(e.acc, f))
    return f(e)


def _map_stmt(s, f):
    if isinstance(s, Let):
        return replace(s, expr=_map_expr(s.expr, f))
    if isinstance(s, Store):
        return replace(s, value=_map_expr(s.value, f))
    if isinstance(s, Atomic):
        return replace(s, value=_map_expr(s.value, f), cmp=None if s.cmp is None else _map_expr(s.cmp, f))
    return replace(s, carried=tuple((n, _map_expr(e, f)) for n, e in s.carried),
                   body=tuple(_map_stmt(x, f) for x in s.body),
                   updates=tuple((n, _map_expr(e, f)) for n, e in s.updates))


def _map_program(p: Program, f) -> Program:
    return replace(p, body=tuple(_map_stmt(s, f) for s in p.body))


def dce(p: Program) -> Program:
    """Drop `Let`s nothing reads (repeatedly), carried values read only by their own update, and loops
    left with nothing carried and nothing written."""
    defs = Counter(s.name for s in walk_stmts(p.body) if isinstance(s, Let))
    carried = {n for s in walk_stmts(p.body) if isinstance(s, Loop) for n, _ in s.carried}
    aliases = {s.name: s.expr for s in walk_stmts(p.body) if isinstance(s, Let) and isinstance(s.expr, Var)
               and defs[s.name] == 1 and s.name not in carried and defs[s.expr.name] <= 1}
    if aliases:  # v2 = v1, each defined once: read v1 instead (the Let then dies)
        def resolve(e):
            seen = set()
            while isinstance(e, Var) and e.name in aliases and e.name not in seen:
                seen.add(e.name)
                e = aliases[e.name]
            return e
        p = _map_program(p, resolve)
    while True:
        new = _drop_unused(p.body, _used(p.body))
        if new == p.body:
            return p
        p = replace(p, body=new)


def _vars(e) -> set[str]:
    return {x.name for x in walk_exprs(e) if isinstance(x, Var)}


def _used(body) -> set[str]:
    used: set[str] = set()
    for s in walk_stmts(body):
        if isinstance(s, Loop):
            for _, e in s.carried:
                used |= _vars(e)
            for n, e in s.updates:
                used |= _vars(e) - {n}
        else:
            for e in stmt_exprs(s):
                used |= _vars(e)
    return used


def _drop_unused(body, used):
    out = []
    for s in body:
        if isinstance(s, Let) and s.name not in used:
            continue
        if isinstance(s, Loop):
            inner = _drop_unused(s.body, used)
            carried = tuple((n, e) for n, e in s.carried if n in used)
            keep = {n for n, _ in carried}
            s = replace(s, body=inner, carried=carried, updates=tuple((n, e) for n, e in s.updates if n in keep))
            if not s.carried and not any(isinstance(x, (Store, Atomic)) for x in walk_stmts(s.body)):
                continue
        out.append(s)
    return tuple(out)

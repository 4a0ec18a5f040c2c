"""The generated program: a small typed tree IR of one Triton kernel, free of randomness.

The generator builds it, the renderer (`render.py`) prints it as `@triton.jit` source, the reference
evaluator (`evaluate.py`) runs it on torch, and the minimiser rewrites it. Everything is a frozen
dataclass, so a rewrite is `dataclasses.replace` and a program can be hashed and compared.

Shapes are tuples of dimension names ("M", "N", "K"; "1" is a broadcast dimension of size 1), sized
by `Program.dims`. Every `Load` reads its own input tensor; `Store`/`Atomic` write their own output.
A dimension named in `Program.grid_dim` is split over the programs (`pid * size + arange`); a load
inside a loop may walk one dimension (`along`: `i * size + arange`), by index or by a loop-carried
pointer.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Var:
    name: str


@dataclass(frozen=True)
class Const:
    """A Python scalar literal: weakly typed as Triton types scalars (see dtypes.computation_type)."""
    value: int | float | bool


@dataclass(frozen=True)
class Full:
    value: int | float
    dtype: str
    dims: tuple[str, ...]


@dataclass(frozen=True)
class Load:
    arg: int  # input index
    dtype: str
    dims: tuple[str, ...]
    masked: bool = False
    other: int | float = 0
    along: str | None = None  # dimension walked by the enclosing loop
    carried_ptr: bool = False  # advance a loop-carried pointer instead of indexing with i
    evict: str = ""  # a cache/eviction hint (ignored by nmp, must still compile)


@dataclass(frozen=True)
class Bin:
    op: str  # + - * / // % & | ^ << >> < <= > >= == !=
    a: Expr
    b: Expr


@dataclass(frozen=True)
class Un:
    op: str  # neg, abs, invert, not, and math functions (exp, log, sqrt, ...)
    a: Expr


@dataclass(frozen=True)
class Call:
    fn: str  # minimum, maximum, where, fma, clamp, cdiv, umulhi
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Cast:
    a: Expr
    dtype: str


@dataclass(frozen=True)
class Reduce:
    op: str  # sum max min argmax argmin xor_sum, or a combine function of combine.py
    a: Expr
    axis: int


@dataclass(frozen=True)
class Scan:
    op: str  # cumsum cumprod, or a combine function of combine.py
    a: Expr
    axis: int
    reverse: bool = False


@dataclass(frozen=True)
class Dot:
    a: Expr
    b: Expr
    acc: Expr | None = None
    out_dtype: str | None = None  # tl.dot(..., out_dtype=) (fp16 inputs only)
    precision: str | None = None  # input_precision of fp32 dots: "ieee" (default here) or "tf32"


@dataclass(frozen=True)
class Expand:
    """`a[:, None]` (axis 1) or `a[None, :]` (axis 0) of a 1-D value."""
    a: Expr
    axis: int


Expr = Var | Const | Full | Load | Bin | Un | Call | Cast | Reduce | Scan | Dot | Expand


@dataclass(frozen=True)
class Let:
    name: str
    expr: Expr


@dataclass(frozen=True)
class Store:
    out: int
    value: Expr
    masked: bool = True


@dataclass(frozen=True)
class Atomic:
    op: str  # add max min xchg cas
    out: int
    value: Expr
    masked: bool = True
    cmp: Expr | None = None  # cas only
    old_out: int | None = None  # also store the returned old values to this output


@dataclass(frozen=True)
class Loop:
    kind: str  # "for" | "range" (tl.range) | "while"
    trips: int
    dynamic: bool  # trip count passed as a run-time argument
    carried: tuple[tuple[str, Expr], ...]
    body: tuple[Stmt, ...]
    updates: tuple[tuple[str, Expr], ...]  # name = expr at the end of each iteration (types kept)


Stmt = Let | Store | Atomic | Loop


@dataclass(frozen=True)
class Program:
    dims: tuple[tuple[str, int], ...]  # ("M", 8), ("N", 16) ...
    bounds: tuple[tuple[str, int], ...]  # mask bound of each dimension, over the whole extent
    body: tuple[Stmt, ...]
    grid: int = 1
    grid_dim: str | None = None  # dimension split over the programs (else every program does the same)
    layouts: tuple[str, ...] = ()  # per input: contig | transposed | step2 | offset
    const_strides: bool = False  # strides as literals instead of run-time arguments
    data_seed: int = 0
    data_kind: str = "small"  # input data: small | wide | ones (the minimiser simplifies to ones)
    notes: tuple[str, ...] = field(default=(), compare=False)  # the generator's feature tags

    def size(self, d: str) -> int:
        return 1 if d == "1" else dict(self.dims)[d]

    def bound(self, d: str) -> int:
        return dict(self.bounds)[d]


def walk_exprs(e: Expr):
    """Every sub-expression of `e`, parents first."""
    yield e
    for child in children(e):
        yield from walk_exprs(child)


def children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, (Bin,)):
        return (e.a, e.b)
    if isinstance(e, (Un, Cast, Reduce, Scan, Expand)):
        return (e.a,)
    if isinstance(e, Call):
        return e.args
    if isinstance(e, Dot):
        return (e.a, e.b) + ((e.acc,) if e.acc is not None else ())
    return ()


def walk_stmts(body):
    """Every statement, loop bodies included (a loop before its body)."""
    for s in body:
        yield s
        if isinstance(s, Loop):
            yield from walk_stmts(s.body)


def stmt_exprs(s: Stmt) -> list[Expr]:
    if isinstance(s, Let):
        return [s.expr]
    if isinstance(s, Store):
        return [s.value]
    if isinstance(s, Atomic):
        return [s.value] + ([s.cmp] if s.cmp is not None else [])
    return [e for _, e in s.carried] + [e for _, e in s.updates]


def loads(p: Program) -> list[Load]:
    out = []
    for s in walk_stmts(p.body):
        for e in stmt_exprs(s):
            out += [x for x in walk_exprs(e) if isinstance(x, Load)]
    return sorted({ld.arg: ld for ld in out}.values(), key=lambda ld: ld.arg)


def writes(p: Program) -> list[Store | Atomic]:
    return [s for s in walk_stmts(p.body) if isinstance(s, (Store, Atomic))]


def enclosing_loop(p: Program, target: Stmt) -> Loop | None:
    for s in p.body:
        if isinstance(s, Loop) and any(t is target for t in walk_stmts(s.body)):
            return s
    return None

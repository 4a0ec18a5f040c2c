"""Random programs from a seed: `generate(seed)` is deterministic and always returns a program that
type-checks (every candidate node is typed with `typecheck.infer`, a rejected one is drawn again).

A program is built as a sequence of actions on a pool of typed values: loads (masked or not, strided
views, eviction hints), elementwise expression trees (arithmetic with Triton's promotion, bitwise ops
and shifts, comparisons, `where`, min/max, casts, math functions, fma/clamp/cdiv/umulhi), reductions
and scans (builtin and user combine functions), `tl.dot` (int8/fp16/bf16/fp32/fp64, optional
accumulator), a loop (`range`, `tl.range` or `while`, constant or run-time trip count) whose loads walk
a dimension by index or by a loop-carried pointer and whose carried values accumulate, and finally
stores and atomics (add/max/min/xchg/cas, masked, colliding across programs or not).

Values stay where every reference is defined: denominators are |b| + 1, integer divisors (b & 7) + 1,
shift amounts masked to the type's width, log/sqrt arguments made non-negative.
"""

from __future__ import annotations

import random

from . import combine
from .dtypes import DTYPES, dt
from .program import (
    Atomic,
    Bin,
    Call,
    Cast,
    Const,
    Dot,
    Expand,
    Full,
    Let,
    Load,
    Loop,
    Program,
    Reduce,
    Scan,
    Store,
    Un,
    Var,
)
from .typecheck import VT, check, infer

ELEM_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16",
               "float32", "float64"]
DOT_DTYPES = ["int8", "float16", "bfloat16", "float32", "float64", "float8e5", "float8e4nv"]
MATH = ["exp", "exp2", "log", "log2", "sin", "cos", "sqrt", "sqrt_rn", "rsqrt", "erf", "floor", "ceil"]
MAX_ELEMS = 1024


class Gen:
    def __init__(self, seed: int, no_bf16: bool = False):
        self.rng = random.Random(seed)
        self.seed = seed
        self.no_bf16 = no_bf16
        self.stmts: list = []
        self.env: dict[str, VT] = {}
        self.pool: list[str] = []
        self.n_var = 0
        self.n_in = 0
        self.n_out = 0
        self.tags: set[str] = set()
        self.in_loop: Loop | None = None
        self.loop_dim: str | None = None

    # -- helpers ------------------------------------------------------------------------------------
    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def dtype(self, choices=None) -> str:
        choices = choices or ELEM_DTYPES
        if self.no_bf16:
            choices = [c for c in choices if c != "bfloat16"] or ["float32"]
        return self.rng.choice(choices)

    def new_var(self) -> str:
        self.n_var += 1
        return f"v{self.n_var}"

    def bind(self, e, pool: bool = True) -> Var:
        name = self.new_var()
        t = infer(e, self.env)
        self.stmts.append(Let(name, e))
        self.env[name] = t
        if pool:
            self.pool.append(name)
        return Var(name)

    def vars_with(self, pred) -> list[str]:
        return [n for n in self.pool if pred(self.env[n])]

    def typed(self, e):
        try:
            return infer(e, self.env)
        except TypeError:
            return None

    # -- leaves -------------------------------------------------------------------------------------
    def other_for(self, dtype: str):
        d = dt(dtype)
        if d.kind == "bool":
            return self.rng.choice([False, True])
        if d.is_float:
            return self.rng.choice([0.0, 1.0, -1.5, 2.5])
        return self.rng.choice([0, 1, 3] + ([-1, -5] if d.signed else [7]))

    def load(self, dims: tuple[str, ...], dtype: str | None = None, along: str | None = None) -> Var:
        dtype = dtype or self.dtype()
        fp8 = dtype.startswith("float8")
        masked = self.chance(0.6) and bool(dims) and not fp8
        ld = Load(self.n_in, dtype, dims, masked, self.other_for(dtype) if masked else 0, along,
                  carried_ptr=along is not None and self.chance(0.5),
                  evict=self.rng.choice(["", "", "", "evict_last", "evict_first"]))
        self.n_in += 1
        self.tags.add(f"load:{dtype}")
        if fp8:  # fp8 values only feed tl.dot
            return self.bind(ld, pool=False)
        if masked:
            self.tags.add("mask")
        if ld.carried_ptr:
            self.tags.add("carried_ptr")
        return self.bind(ld)

    def const_for(self, t: VT):
        d = t.d
        if d.is_float:
            return Const(self.rng.choice([0.5, -1.25, 2.0, 3.0, 0.1]))
        if d.kind == "uint":
            return Const(self.rng.choice([1, 2, 3, 5]))
        return Const(self.rng.choice([-3, -1, 1, 2, 5]))

    def leaf(self, dims: tuple[str, ...]):
        same = self.vars_with(lambda t: t.dims == dims)
        if same and self.chance(0.85 if len(same) > 2 else 0.6):
            return Var(self.rng.choice(same))
        if len(dims) == 2:
            for axis, dim in ((1, dims[0]), (0, dims[1])):
                ones = self.vars_with(lambda t, dim=dim: t.dims == (dim,))
                if ones and self.chance(0.5):
                    return Expand(Var(self.rng.choice(ones)), axis)
        scal = self.vars_with(lambda t: t.dims == ())
        if scal and self.chance(0.3):
            return Var(self.rng.choice(scal))
        if same:
            return Var(self.rng.choice(same))
        return self.load(dims)

    # -- expressions --------------------------------------------------------------------------------
    def expr(self, dims: tuple[str, ...], depth: int):
        for _ in range(12):
            e = self._expr_once(dims, depth)
            t = self.typed(e)
            if t is not None and (t.dims == dims or (not dims and not t.dims)):
                return e
        return self.leaf(dims)

    def _expr_once(self, dims, depth):
        if depth <= 0:
            return self.leaf(dims)
        kind = self.rng.choices(["bin", "cmpwhere", "minmax", "unary", "math", "cast", "div", "idiv", "shift",
                                 "bit", "fma", "clamp", "cdiv", "umulhi", "const"],
                                [8, 3, 2, 2, 2, 3, 1, 1, 1, 1, 0.3, 0.3, 0.3, 0.3, 1.5])[0]
        a = self.expr(dims, depth - 1)
        ta = self.typed(a)
        if ta is None:
            return a
        if kind == "const":
            op = self.rng.choice(["+", "-", "*"])
            c = self.const_for(ta)
            return Bin(op, a, c) if self.chance(0.5) else Bin(op, c, a)
        if kind == "unary":
            return Un(self.rng.choice(["neg", "abs", "invert"]), a)
        if kind == "math":
            fn = self.rng.choice(MATH)
            self.tags.add(f"math:{fn}")
            x = a if ta.dtype in ("float32", "float64") else Cast(a, "float32")
            if fn in ("log", "log2", "rsqrt"):
                x = Bin("+", Un("abs", x), Const(1.0))
            elif fn in ("sqrt", "sqrt_rn"):
                x = Un("abs", x)
            if fn == "sqrt_rn" and self.typed(x) is not None and self.typed(x).dtype != "float32":
                fn = "sqrt"
            if fn in ("exp", "exp2"):
                x = Bin("*", x, Const(0.25))
            return Un(fn, x) if self.chance(0.9) else Un("sigmoid", x if fn in ("exp", "exp2") else a)
        if kind == "cast":
            target = self.dtype(ELEM_DTYPES + ["int1"])
            self.tags.add(f"cast:{ta.dtype}->{target}")
            return Cast(a, target)
        b = self.expr(dims, depth - 1)
        if b == a:  # x - x, x != x: degenerate, one more draw
            b = self.expr(dims, depth - 1)
        if kind == "bin":
            return Bin(self.rng.choice(["+", "-", "*"]), a, b)
        if kind == "div":
            return Bin("/", a, Bin("+", Un("abs", b), Const(1)))
        if kind == "idiv":
            return Bin(self.rng.choice(["//", "%"]), a, Bin("+", Bin("&", b, Const(7)), Const(1)))
        if kind == "shift":
            t = self.typed(Bin("&", a, b))
            if t is None:
                return a
            return Bin(self.rng.choice(["<<", ">>"]), a, Bin("&", b, Const(t.d.bits - 1)))
        if kind == "bit":
            return Bin(self.rng.choice(["&", "|", "^"]), a, b)
        if kind == "minmax":
            return Call(self.rng.choice(["minimum", "maximum"]), (a, b))
        if kind == "fma":
            t = "float32" if self.chance(0.7) else "float64"
            return Call("fma", (Cast(a, t), Cast(b, t), Cast(self.expr(dims, depth - 1), t)))
        if kind == "clamp":
            return Call("clamp", (a, Const(-2.5), Const(3.0)))
        if kind == "cdiv":
            return Call("cdiv", (a, Const(self.rng.choice([2, 3, 4]))))
        if kind == "umulhi":
            t = self.rng.choice(["int32", "uint32", "int64", "uint64"])
            return Call("umulhi", (Cast(a, t), Cast(b, t)))
        c = self.expr(dims, depth - 1)
        cmp = self.rng.choice(["<", "<=", ">", ">=", "==", "!="])
        return Call("where", (Bin(cmp, a, b), b, c))

    # -- actions ------------------------------------------------------------------------------------
    def act_elementwise(self, dims) -> None:
        self.bind(self.expr(dims, self.rng.randint(1, 3)))

    def act_reduce(self, dims) -> None:
        src = self.vars_with(lambda t: t.dims == dims and t.dtype != "int1")
        if not src:
            return
        v = Var(self.rng.choice(src))
        axis = self.rng.randrange(len(dims))
        ops = ["sum", "max", "min", "argmax", "argmin", "xor_sum"] + list(combine.FUNCTIONS)
        for _ in range(6):
            op = self.rng.choice(ops)
            if op in combine.FUNCTIONS and not combine.get(op).reduce_ok:
                continue
            e = Reduce(op, v, axis)
            if self.typed(e) is not None:
                self.tags.add(f"reduce:{op}")
                r = self.bind(e)
                centred = Bin("-", v, Expand(r, 1 - axis))
                if len(dims) == 2 and self.chance(0.4) and self.typed(centred) is not None:
                    self.bind(centred)  # used against the 2-D tile again (softmax-like)
                return

    def act_scan(self, dims) -> None:
        src = self.vars_with(lambda t: t.dims == dims and t.dtype != "int1")
        if not src:
            return
        v = Var(self.rng.choice(src))
        ops = ["cumsum", "cumprod"] + [f for f, c in combine.FUNCTIONS.items() if c.scan_ok]
        for _ in range(6):
            op = self.rng.choice(ops)
            x = v
            if op == "cumprod" and self.env[v.name].d.is_float:
                x = Bin("+", Bin("*", v, Const(0.125)), Const(1.0))  # factors near 1: no overflow
            e = Scan(op, x, self.rng.randrange(len(dims)), self.chance(0.3))
            if self.typed(e) is not None:
                self.tags.add(f"scan:{op}")
                self.bind(e)
                return

    def act_dot(self) -> None:
        dtype = self.dtype(DOT_DTYPES)
        self.tags.add(f"dot:{dtype}")
        a = self.load(("M", "K"), dtype)
        b = self.load(("K", "N"), dtype)
        if self.chance(0.3) and not dtype.startswith("float8"):  # a prologue, cast back to the operand type
            a = self.bind(Cast(Bin("+", a, Const(1 if dtype == "int8" else 0.5)), dtype))
        out_dtype = "float16" if dtype == "float16" and self.chance(0.2) else None
        precision = "tf32" if dtype == "float32" and self.chance(0.3) else None
        acc = None
        if self.chance(0.4):
            res = infer(Dot(a, b, None, out_dtype), self.env).dtype
            acc = self.bind(Cast(self.leaf(("M", "N")), res), pool=False)
        self.bind(Dot(a, b, acc, out_dtype, precision))

    def act_loop(self, dims_choices) -> None:
        kind = self.rng.choice(["for", "range", "while"])
        trips = self.rng.randint(1, 4)
        dynamic = self.chance(0.4)
        self.tags.add(f"loop:{kind}")
        outer_stmts, outer_pool, outer_env = self.stmts, list(self.pool), dict(self.env)
        # carried values: accumulators of some shape
        dims = self.rng.choice(dims_choices)
        walk = self.rng.choice(dims) if dims else None
        carried = []
        for _ in range(self.rng.randint(1, 2)):
            name = f"acc{len(carried)}_{self.n_var}"
            dtype = self.dtype(["int32", "int64", "uint32", "float32", "float64", "float16", "bfloat16"])
            init = Full(self.rng.choice([0, 1]), dtype, dims) if dims else None
            if init is None:
                continue
            carried.append((name, init))
            self.env[name] = infer(init, self.env)
        if not carried:
            return
        self.stmts = []
        loop = Loop(kind, trips, dynamic, (), (), ())
        self.in_loop = loop
        x = self.load(dims, along=walk)
        if self.chance(0.5):
            self.bind(self.expr(dims, 1))
        updates = []
        for name, _ in carried:
            t = self.env[name]
            val = Var(self.rng.choice(self.vars_with(lambda vt: vt.dims == dims) or [x.name]))
            op = self.rng.choice(["+", "max", "*", "^"])
            if op == "max":
                upd = Call("maximum", (Var(name), val))
            elif op == "^" and t.d.is_int:
                upd = Bin("^", Var(name), Cast(val, t.dtype))
            elif op == "*" and t.d.is_float:
                upd = Bin("*", Var(name), Bin("+", Bin("*", Cast(val, t.dtype), Const(0.125)), Const(1.0)))
            else:
                upd = Bin("+", Var(name), val)
            tu = self.typed(upd)
            if tu is None or tu.dtype != t.dtype:
                upd = Cast(upd, t.dtype) if tu is not None else Var(name)
            updates.append((name, upd))
        if self.chance(0.2):  # an atomic inside the loop: applied every iteration
            self.write(dims, atomic_only=True)
        body = tuple(self.stmts)
        self.stmts = outer_stmts
        self.pool = outer_pool + [n for n, _ in carried]
        self.env = {**outer_env, **{n: self.env[n] for n, _ in carried}}
        self.in_loop = None
        self.stmts.append(Loop(kind, trips, dynamic, tuple(carried), body, tuple(updates)))

    def act_kloop_dot(self) -> None:
        dtype = self.dtype(DOT_DTYPES)
        self.tags.add(f"dot:{dtype}")
        self.tags.add("dot:kloop")
        res = infer(Dot(Full(0, dtype, ("M", "K")), Full(0, dtype, ("K", "N"))), {}).dtype
        name = f"acc_{self.n_var}"
        init = Full(0, res, ("M", "N"))
        self.env[name] = infer(init, self.env)
        outer_stmts, outer_pool = self.stmts, list(self.pool)
        self.stmts = []
        a = self.load(("M", "K"), dtype, along="K")
        b = self.load(("K", "N"), dtype, along="K")
        upd = Dot(a, b, Var(name)) if self.chance(0.6) else Bin("+", Var(name), Dot(a, b))
        kind = self.rng.choice(["for", "range", "while"])
        loop = Loop(kind, self.rng.randint(1, 3), self.chance(0.4), ((name, init),), tuple(self.stmts),
                    ((name, upd),))
        self.stmts = outer_stmts
        self.pool = outer_pool + [name]
        for n in [st.name for st in loop.body if isinstance(st, Let)]:
            self.env.pop(n, None)
        self.stmts.append(loop)

    def sinks(self) -> list[str]:
        """Pool values nothing reads yet: writing them keeps the generated code live."""
        from .program import stmt_exprs, walk_exprs, walk_stmts
        exprs = [e for st in walk_stmts(self.stmts) for e in
                 ([i for _, i in st.carried] if isinstance(st, Loop) else stmt_exprs(st))]
        used = {x.name for e in exprs for x in walk_exprs(e) if isinstance(x, Var)}
        return [n for n in self.pool if n not in used]

    def write(self, dims_any=None, atomic_only: bool = False) -> None:
        cands = [n for n in self.pool if "1" not in self.env[n].dims]
        if dims_any is not None:
            cands = [n for n in cands if self.env[n].dims == dims_any] or cands
        if not cands:
            return
        live = [n for n in self.sinks() if n in cands]
        name = self.rng.choice(live if live and self.chance(0.9) else cands)
        t = self.env[name]
        if atomic_only or self.chance(0.25):
            op = self.rng.choice(["add", "add", "max", "min", "xchg", "cas"])
            target = {"add": ["int32", "uint32", "int64", "float32", "float64", "float16"],
                      "max": ["int32", "uint32", "int64", "uint64", "float32", "float64"],
                      "min": ["int32", "uint32", "int64", "uint64", "float32", "float64"],
                      "xchg": ["int32", "int64", "float32", "float64"],
                      "cas": ["int32", "int64"]}[op]
            dtype = t.dtype if t.dtype in target else self.rng.choice(target)
            val = Var(name) if dtype == t.dtype else Cast(Var(name), dtype)
            cmp = None
            if op == "cas":
                cmp = Cast(Bin("&", Cast(Var(name), dtype), Const(1)), dtype)
            old = None
            if op in ("xchg", "cas") or self.chance(0.3):
                old = self.n_out + 1
            w = Atomic(op, self.n_out, val, self.chance(0.7) and op != "cas", cmp, old)
            self.tags.add(f"atomic:{op}")
            self.n_out += 2 if old is not None else 1
        else:
            w = Store(self.n_out, Var(name), self.chance(0.8))
            self.n_out += 1
        self.stmts.append(w)


def _dims(rng: random.Random, dot: bool) -> tuple[tuple[str, int], ...]:
    if dot:
        return (("M", rng.choice([16, 32])), ("N", rng.choice([16, 32])), ("K", rng.choice([16, 32])))
    m = rng.choice([1, 2, 4, 8, 16, 32])
    n = rng.choice([2, 4, 8, 16, 32])
    while m * n > MAX_ELEMS // 2:
        m //= 2
    return (("M", max(m, 1)), ("N", n), ("K", rng.choice([2, 4, 8, 16])))


def generate(seed: int, no_bf16: bool = False) -> Program:
    """The program of `seed` (retries internally with derived seeds until it type-checks)."""
    for attempt in range(50):
        p = _try_generate(seed * 101 + attempt if attempt else seed, no_bf16)
        if p is not None:
            return p
    raise RuntimeError(f"no valid program for seed {seed}")


def _try_generate(seed: int, no_bf16: bool) -> Program | None:
    g = Gen(seed, no_bf16)
    rng = g.rng
    recipe = rng.choices(["elementwise", "reduce", "scan", "dot", "kloop", "loop", "atomic", "mixed"],
                         [3, 2, 2, 1.2, 1, 2, 1.5, 2])[0]
    g.tags.add(f"recipe:{recipe}")
    dims = _dims(rng, recipe in ("dot", "kloop"))
    shapes = [("M", "N"), ("N",), ("M",)] if recipe not in ("dot", "kloop") else [("M", "N")]
    main = rng.choice(shapes)
    for _ in range(rng.randint(1, 2)):
        g.load(main)
    steps = {"elementwise": ["elementwise"], "reduce": ["elementwise", "reduce"], "scan": ["elementwise", "scan"],
             "dot": ["dot", "elementwise"], "kloop": ["kloop", "elementwise"], "loop": ["loop", "elementwise"],
             "atomic": ["elementwise"], "mixed": ["elementwise", "reduce", "scan", "loop", "elementwise"]}[recipe]
    for step in steps:
        if step == "elementwise":
            for _ in range(rng.randint(1, 2)):
                g.act_elementwise(rng.choice([main] + ([()] if g.vars_with(lambda t: t.dims == ()) else [])))
        elif step == "reduce":
            g.act_reduce(main)
        elif step == "scan":
            g.act_scan(main)
        elif step == "dot":
            g.act_dot()
        elif step == "kloop":
            g.act_kloop_dot()
        elif step == "loop":
            g.act_loop([main, ("M", "N"), ("K",), ("N",)])
    for k in range(4):
        if k >= 1 and not g.sinks() or k >= 2 and rng.random() < 0.5:
            break
        g.write(atomic_only=recipe == "atomic" and rng.random() < 0.7)
    grid = rng.choice([1, 1, 1, 2, 3])
    grid_dim = rng.choice([None, "M"]) if grid > 1 else None
    body = tuple(g.stmts)
    trips_max = max([s.trips for s in body if isinstance(s, Loop)] + [1])
    bounds = []
    for d, size in dims:
        extent = size * (grid if d == grid_dim else 1) * trips_max
        bounds.append((d, extent if rng.random() < 0.5 else rng.randint(0, extent)))
    n_in = g.n_in
    layouts = tuple(rng.choice(["contig", "contig", "contig", "transposed", "step2", "offset"]) for _ in range(n_in))
    p = Program(tuple(dims), tuple(bounds), body, grid, grid_dim, layouts, rng.random() < 0.3, seed,
                "wide" if rng.random() < 0.1 else "small", tuple(sorted(g.tags)))
    try:
        check(p)
    except TypeError:
        return None
    from dataclasses import replace

    from .features import features
    recipe_tag = {t for t in g.tags if t.startswith("recipe:")}
    return replace(p, notes=tuple(sorted(features(p) | recipe_tag)))


def _dtypes_of(p: Program) -> set[str]:
    from .program import stmt_exprs, walk_exprs, walk_stmts
    out = set()
    for s in walk_stmts(p.body):
        for e in stmt_exprs(s):
            for x in walk_exprs(e):
                if isinstance(x, (Load, Full)):
                    out.add(x.dtype)
                if isinstance(x, Cast):
                    out.add(x.dtype)
                if isinstance(x, Dot) and x.out_dtype:
                    out.add(x.out_dtype)
    return out


def uses_bf16(p: Program) -> bool:
    return "bfloat16" in _dtypes_of(p)


__all__ = ["generate", "uses_bf16", "DTYPES"]

"""Print a `Program` as a Python module with one `@triton.jit` kernel named `kernel`.

Signature: `kernel(in0.., out0.., n_<dim>.., t<loop>.., s<in>_<axis>.., <dim>: tl.constexpr..)`:
inputs, outputs, the mask bound of each dimension, run-time loop trip counts, input strides (unless
the program bakes them in as literals), the tile sizes. `launch_args` builds the matching argument
list for the runner.
"""

from __future__ import annotations

from . import combine
from .layout import Access, input_buffers, load_access, write_access, writes_in_order
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
    stmt_exprs,
    walk_exprs,
    walk_stmts,
)
from .typecheck import check

_MATH = {"exp": "tl.exp", "exp2": "tl.exp2", "log": "tl.log", "log2": "tl.log2", "sin": "tl.sin", "cos": "tl.cos",
         "sqrt": "tl.sqrt", "sqrt_rn": "tl.sqrt_rn", "rsqrt": "tl.rsqrt", "erf": "tl.erf", "floor": "tl.floor",
         "ceil": "tl.ceil", "sigmoid": "tl.sigmoid", "abs": "tl.abs"}
_REDUCE = {"sum": "tl.sum", "max": "tl.max", "min": "tl.min", "argmax": "tl.argmax", "argmin": "tl.argmin",
           "xor_sum": "tl.xor_sum"}


def _lit(v) -> str:
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            return f'float("{v}")'
        return f"({v!r})" if v < 0 else repr(v)
    return f"({v})" if v < 0 else str(v)


def _shape(dims: tuple[str, ...]) -> str:
    parts = ["1" if d == "1" else d for d in dims]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


class Renderer:
    def __init__(self, p: Program):
        self.p = p
        self.types = check(p)
        self.inputs = {ld.arg: (ld, acc, buf) for ld, acc, buf in input_buffers(p)}
        self.loops = [s for s in p.body if isinstance(s, Loop)]
        self.lines: list[str] = []
        self.env_types: dict = {}

    # -- expressions -------------------------------------------------------------------------------
    def expr(self, e) -> str:
        if isinstance(e, Var):
            return e.name
        if isinstance(e, Const):
            return _lit(e.value)
        if isinstance(e, Full):
            return f"tl.full({_shape(e.dims)}, {_lit(e.value)}, dtype=tl.{e.dtype})"
        if isinstance(e, Load):
            return self.load(e)
        if isinstance(e, Bin):
            return f"({self.expr(e.a)} {e.op} {self.expr(e.b)})"
        if isinstance(e, Un):
            if e.op == "neg":
                return f"(-{self.expr(e.a)})"
            if e.op == "invert":
                return f"(~{self.expr(e.a)})"
            return f"{_MATH[e.op]}({self.expr(e.a)})"
        if isinstance(e, Call):
            args = ", ".join(self.expr(a) for a in e.args)
            return f"tl.{e.fn}({args})"
        if isinstance(e, Cast):
            return f"{self.expr(e.a)}.to(tl.{e.dtype})"
        if isinstance(e, Reduce):
            if e.op in _REDUCE:
                return f"{_REDUCE[e.op]}({self.expr(e.a)}, axis={e.axis})"
            fn = combine.get(e.op)
            if fn.pair:
                return f"tl.reduce(({self.expr(e.a)}, {self.index_tile(e.a, e.axis)}), {e.axis}, {fn.name})[1]"
            return f"tl.reduce({self.expr(e.a)}, {e.axis}, {fn.name})"
        if isinstance(e, Scan):
            if e.op in ("cumsum", "cumprod"):
                return f"tl.{e.op}({self.expr(e.a)}, axis={e.axis}, reverse={e.reverse})"
            return f"tl.associative_scan({self.expr(e.a)}, {e.axis}, {e.op}, reverse={e.reverse})"
        if isinstance(e, Dot):
            args = [self.expr(e.a), self.expr(e.b)]
            if e.acc is not None:
                args.append(self.expr(e.acc))
            from .typecheck import infer
            if infer(e.a, self.env_types).dtype == "float32":
                args.append(f'input_precision="{e.precision or "ieee"}"')
            if e.out_dtype is not None:
                args.append(f"out_dtype=tl.{e.out_dtype}")
            return f"tl.dot({', '.join(args)})"
        if isinstance(e, Expand):
            return f"{self.expr(e.a)}[:, None]" if e.axis == 1 else f"{self.expr(e.a)}[None, :]"
        raise TypeError(f"cannot render {e!r}")

    def index_tile(self, e, axis: int) -> str:
        from .typecheck import infer
        dims = infer(e, self.env_types).dims
        r = f"tl.arange(0, {dims[axis]})"
        if len(dims) == 1:
            return r
        r = f"{r}[:, None]" if axis == 0 else f"{r}[None, :]"
        return f"tl.broadcast_to({r}, {_shape(dims)})"

    # -- memory ------------------------------------------------------------------------------------
    def _axis(self, a: Access, k: int, loop_var: str | None) -> str:
        d = a.dims[k]
        idx = f"r_{d}"
        if a.gridded[k]:
            idx = f"(pid * {d} + {idx})"
        if a.along[k] and loop_var is not None:
            idx = f"({loop_var} * {d} + {idx})"
        if len(a.dims) == 2:
            idx = f"{idx}[:, None]" if k == 0 else f"{idx}[None, :]"
        return idx

    def _offsets(self, a: Access, strides: list[str], loop_var: str | None) -> str:
        terms = []
        for k in range(len(a.dims)):
            s = strides[k]
            ax = self._axis(a, k, loop_var)
            terms.append(ax if s == "1" else f"{ax} * {s}")
        if a.prefix:
            n = 1
            for x in a.extent:
                n *= x
            terms.append(f"pid * {n}")
        return " + ".join(terms) if terms else "0"

    def _mask(self, a: Access, loop_var: str | None) -> str:
        return " & ".join(f"({self._axis(a, k, loop_var)} < n_{d})" for k, d in enumerate(a.dims))

    def in_strides(self, arg: int) -> list[str]:
        _, acc, buf = self.inputs[arg]
        if self.p.const_strides:
            return [str(s) for s in buf.strides]
        return [f"s{arg}_{k}" for k in range(len(acc.dims))]

    def load(self, ld: Load) -> str:
        _, acc, _ = self.inputs[ld.arg]
        if ld.carried_ptr and ld.along is not None:
            ptr = f"p{ld.arg}"
        else:
            ptr = f"in{ld.arg} + {self._offsets(acc, self.in_strides(ld.arg), 'i')}"
        kw = ""
        if ld.masked:
            kw += f", mask={self._mask(acc, 'i')}, other={_lit(ld.other)}"
        if ld.evict:
            kw += f", eviction_policy=\"{ld.evict}\""
        return f"tl.load({ptr}{kw})"

    def write(self, w) -> str:
        from .typecheck import infer
        vt = infer(w.value, self.env_types)
        acc = write_access(self.p, w, vt.dims)
        offs = self._offsets(acc, _row_major(acc.extent), None)
        ptr = f"out{w.out} + {offs}" if acc.dims or acc.prefix else f"out{w.out}"
        mask = f", mask={self._mask(acc, None)}" if w.masked and acc.dims else ""
        if isinstance(w, Store):
            return f"tl.store({ptr}, {self.expr(w.value)}{mask})"
        if w.op == "cas":
            call = f"tl.atomic_cas({ptr}, {self.expr(w.cmp)}, {self.expr(w.value)})"
        else:
            call = f"tl.atomic_{w.op}({ptr}, {self.expr(w.value)}{mask})"
        if w.old_out is None:
            return call
        old_ptr = f"out{w.old_out} + {offs}" if acc.dims or acc.prefix else f"out{w.old_out}"
        self.lines.append(f"{self.indent}old{w.out} = {call}")
        return f"tl.store({old_ptr}, old{w.out}{mask})"

    # -- statements --------------------------------------------------------------------------------
    indent = "    "

    def stmt(self, s) -> None:
        from .typecheck import infer
        if isinstance(s, Let):
            self.env_types[s.name] = infer(s.expr, self.env_types)
            self.lines.append(f"{self.indent}{s.name} = {self.expr(s.expr)}")
        elif isinstance(s, (Store, Atomic)):
            self.lines.append(f"{self.indent}{self.write(s)}")
        elif isinstance(s, Loop):
            self.loop(s)

    def loop(self, s: Loop) -> None:
        from .typecheck import infer
        k = self.loops.index(s)
        trips = f"t{k}" if s.dynamic else str(s.trips)
        for name, init in s.carried:
            self.env_types[name] = infer(init, self.env_types)
            self.lines.append(f"{self.indent}{name} = {self.expr(init)}")
        carried_loads = sorted({x.arg: x for st in walk_stmts(s.body) for e in stmt_exprs(st)
                                for x in walk_exprs(e) if isinstance(x, Load) and x.carried_ptr and x.along},
                               key=int)
        for arg in carried_loads:
            _, acc, _ = self.inputs[arg]
            self.lines.append(f"{self.indent}p{arg} = in{arg} + {self._offsets(acc, self.in_strides(arg), '0')}")
        if s.kind == "while":
            self.lines.append(f"{self.indent}i = 0")
            self.lines.append(f"{self.indent}while i < {trips}:")
        elif s.kind == "range":
            self.lines.append(f"{self.indent}for i in tl.range(0, {trips}):")
        else:
            self.lines.append(f"{self.indent}for i in range(0, {trips}):")
        outer = self.indent
        self.indent = outer + "    "
        for st in s.body:
            self.stmt(st)
        for name, upd in s.updates:
            self.lines.append(f"{self.indent}{name} = {self.expr(upd)}")
        for arg in carried_loads:
            _, acc, _ = self.inputs[arg]
            ax = acc.along.index(True)
            step = f"{acc.dims[ax]} * {self.in_strides(arg)[ax]}"
            self.lines.append(f"{self.indent}p{arg} += {step}")
        if s.kind == "while":
            self.lines.append(f"{self.indent}i += 1")
        if not s.body and not s.updates and not carried_loads and s.kind != "while":
            self.lines.append(f"{self.indent}pass")
        self.indent = outer
        for st in walk_stmts(s.body):
            if isinstance(st, Let):
                self.env_types.pop(st.name, None)

    def source(self) -> str:
        p = self.p
        params = [f"in{k}" for k in sorted(self.inputs)] + [f"out{k}" for k in sorted(self.types)]
        params += [f"n_{d}" for d, _ in p.dims]
        params += [f"t{k}" for k, lp in enumerate(self.loops) if lp.dynamic]
        if not p.const_strides:
            params += [f"s{k}_{a}" for k in sorted(self.inputs) for a in range(len(self.inputs[k][1].dims))]
        params += [f"{d}: tl.constexpr" for d, _ in p.dims]
        used = sorted({e.op for s in walk_stmts(p.body) for x in stmt_exprs(s) for e in walk_exprs(x)
                       if isinstance(e, (Reduce, Scan)) and e.op in combine.FUNCTIONS})
        head = ["import triton", "import triton.language as tl", ""]
        for name in used:
            head += ["", combine.get(name).source]
        self.lines = ["", "@triton.jit", f"def kernel({', '.join(params)}):", "    pid = tl.program_id(0)"]
        for d, _ in p.dims:
            self.lines.append(f"    r_{d} = tl.arange(0, {d})")
        for s in p.body:
            self.stmt(s)
        return "\n".join(head + self.lines) + "\n"


def _row_major(extent: tuple[int, ...]) -> list[str]:
    out = []
    for k in range(len(extent)):
        n = 1
        for x in extent[k + 1:]:
            n *= x
        out.append(str(n))
    return out


def render(p: Program) -> str:
    return Renderer(p).source()


def write_accesses(p: Program):
    """(write, access, output index) for every output, including atomics' old-value outputs."""
    from .typecheck import infer
    r = Renderer(p)
    out = []
    env: dict = {}

    def visit(body):
        for s in body:
            if isinstance(s, Let):
                env[s.name] = infer(s.expr, env)
            elif isinstance(s, Loop):
                for name, init in s.carried:
                    env[name] = infer(init, env)
                visit(s.body)
            else:
                vt = infer(s.value, env)
                acc = write_access(p, s, vt.dims)
                out.append((s, acc, s.out, vt))
                if isinstance(s, Atomic) and s.old_out is not None:
                    out.append((s, acc, s.old_out, vt))
    visit(p.body)
    del r
    return out


__all__ = ["render", "write_accesses", "load_access", "writes_in_order"]

"""The torch oracle: run a `Program` on torch with Triton's semantics, with error bounds.

Each program instance (`pid`) runs in turn, as the interpreter runs them; values are `RV`s (see
values.py for the representation and the justification of every tolerance). The result is, per
output, the expected tensor, its error bound and its undetermined elements. Semantics restated here:
integer ops wrap at the type's width; `//` and `%` truncate (C); `>>` is arithmetic on signed types and
logical on unsigned; float -> int conversions saturate and send NaN to 0 (GPU `cvt.rzi.sat`, which nmp
implements; the interpreter wraps through numpy, a documented difference); fp16/bf16 ops compute in
fp32 and round after each op; fp16/bf16 sums/products (and their scans) accumulate in fp32 and round
once; argmax/argmin take the first index among equal values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from . import combine
from .dtypes import BOOL, DType, computation_type, dt, scalar_type
from .inputs import RunData
from .layout import indices, load_access, load_sites
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
from .render import write_accesses
from .typecheck import binary_type, infer
from .values import (
    LIBM_ULPS,
    RV,
    add_err,
    as_signed_order,
    from_tensor,
    max_finite,
    or_unc,
    storage_dtype,
    ulp_bound,
    wrap,
)


@dataclass
class Expected:
    value: torch.Tensor  # reference representation (see values.py)
    err: torch.Tensor | None
    unc: torch.Tensor | None
    dtype: str


class Evaluator:
    def __init__(self, p: Program, data: RunData):
        self.p = p
        self.data = data
        self.sites = {ld.arg: (ld, load_access(p, ld, loop)) for ld, loop in load_sites(p)}
        self.bounds = dict(p.bounds)
        self.outs = {k: _Out(from_tensor(data.outputs[k].clone(), dt(data.out_dtypes[k])), dt(data.out_dtypes[k]))
                     for k in data.outputs}
        self.accesses = {(id(w), k): acc for w, acc, k, _ in write_accesses(p)}
        self.types: dict = {}

    # ---------------------------------------------------------------------------------------------
    def run(self) -> dict[int, Expected]:
        for pid in range(self.p.grid):
            self.pid = pid
            self.i = 0
            self.env: dict[str, RV] = {}
            self.types = {}
            self.body(self.p.body)
        return {k: Expected(o.v.view(o.shape), None if o.err is None else o.err.view(o.shape),
                            None if o.unc is None else o.unc.view(o.shape), o.d.name) for k, o in self.outs.items()}

    def body(self, stmts) -> None:
        for s in stmts:
            if isinstance(s, Let):
                self.types[s.name] = infer(s.expr, self.types)
                self.env[s.name] = self.expr(s.expr)
            elif isinstance(s, Store):
                self.store(s)
            elif isinstance(s, Atomic):
                self.atomic(s)
            elif isinstance(s, Loop):
                for name, init in s.carried:
                    self.types[name] = infer(init, self.types)
                    self.env[name] = self.expr(init)
                for i in range(s.trips):
                    self.i = i
                    self.body(s.body)
                    new = {name: self.expr(upd) for name, upd in s.updates}
                    self.env.update(new)
                self.i = 0

    # -- memory -------------------------------------------------------------------------------------
    def load(self, ld: Load) -> RV:
        _, acc = self.sites[ld.arg]
        buf = self.data.buffers[ld.arg]
        flat, mask = indices(acc, buf.strides, buf.offset, self.pid, self.i, self.bounds)
        d = dt(ld.dtype)
        storage = from_tensor(self.data.storages[ld.arg], d)
        v = storage[torch.where(mask, flat, torch.zeros_like(flat)) if ld.masked else flat]
        if ld.masked:
            other = torch.tensor(ld.other, dtype=storage_dtype(d))
            v = torch.where(mask, v, other.to(v.dtype) if d.is_float else wrap(other.to(torch.int64), d)
                            if d.kind != "bool" else other)
        return RV(v, d)

    def _write_index(self, w, k):
        acc = self.accesses[(id(w), k)]
        n = 1
        for x in acc.extent:
            n *= x
        strides = tuple(_prod(acc.extent[j + 1:]) for j in range(len(acc.extent)))
        flat, mask = indices(acc, strides, 0, self.pid, 0, self.bounds)
        if not w.masked:
            mask = torch.ones_like(mask)
        return flat, mask

    def store(self, s: Store) -> None:
        val = self.convert_for(self.expr(s.value), self.outs[s.out].d)
        flat, mask = self._write_index(s, s.out)
        self.outs[s.out].put(flat, mask, val)

    def atomic(self, s: Atomic) -> None:
        out = self.outs[s.out]
        val = self.expr(s.value)
        flat, mask = self._write_index(s, s.out)
        old = out.get(flat)
        if s.op == "add":
            new = self.arith("+", old, val, out.d)
            if out.d.is_float:
                # the programs' additions land in any order: each may round differently
                new.err = add_err(new.err, ulp_bound(new.v, out.d.name) * 2)
        elif s.op in ("max", "min"):
            new = self.minmax(s.op == "max", old, val, out.d)
        elif s.op == "xchg":
            new = val
        else:  # cas
            cmp = self.expr(s.cmp)
            eq = old.v == cmp.v
            new = RV(torch.where(eq, val.v, old.v), out.d, None, or_unc(old.unc, val.unc, cmp.unc))
        out.put(flat, mask, new)
        if s.old_out is not None:
            self.outs[s.old_out].put(flat, mask, old)

    def convert_for(self, v: RV, d: DType) -> RV:
        if v.dtype == d:
            return v
        return self.cast(v, d)

    # -- expressions --------------------------------------------------------------------------------
    def expr(self, e) -> RV:
        if isinstance(e, Var):
            return self.env[e.name]
        if isinstance(e, Const):
            d = scalar_type(e.value)
            return RV(torch.tensor(e.value, dtype=storage_dtype(d)), d)
        if isinstance(e, Full):
            d = dt(e.dtype)
            shape = [self.p.size(x) for x in e.dims]
            v = torch.full(shape, e.value, dtype=torch.float64 if d.is_float else torch.int64)
            return RV(v.to(d.torch) if d.is_float else wrap(v, d), d)
        if isinstance(e, Load):
            return self.load(e)
        if isinstance(e, Bin):
            return self.binary(e)
        if isinstance(e, Un):
            return self.unary(e.op, self.expr(e.a))
        if isinstance(e, Call):
            return self.call(e)
        if isinstance(e, Cast):
            return self.cast(self.expr(e.a), dt(e.dtype))
        if isinstance(e, Reduce):
            return self.reduce(e)
        if isinstance(e, Scan):
            return self.scan(e)
        if isinstance(e, Dot):
            return self.dot(e)
        if isinstance(e, Expand):
            a = self.expr(e.a)
            ax = e.axis
            return RV(a.v.unsqueeze(ax), a.dtype, None if a.err is None else a.err.expand(a.v.shape).unsqueeze(ax),
                      None if a.unc is None else a.unc.expand(a.v.shape).unsqueeze(ax))
        raise TypeError(f"cannot evaluate {e!r}")

    def operand(self, e, ct: DType) -> RV:
        """An operand converted to the computation type; a Python scalar converts from its exact value
        (`semantic.scalar_constant(value, dtype=computation type)`), not through its default type."""
        if isinstance(e, Const):
            if ct.is_float:
                return RV(torch.tensor(float(e.value), dtype=torch.float64).to(ct.torch), ct)
            return RV(wrap(torch.tensor(int(e.value), dtype=torch.int64), ct), ct)
        return self.cast(self.expr(e), ct)

    def binary(self, e: Bin) -> RV:
        ta, tb = infer(e.a, self.types), infer(e.b, self.types)
        sa, sb = isinstance(e.a, Const), isinstance(e.b, Const)
        res = dt(binary_type(e.op, ta, tb, sa, sb))
        if e.op in ("<", "<=", ">", ">=", "==", "!="):
            ct = computation_type(ta.d, tb.d, False, sa, sb)
            return self.compare(e.op, self.operand(e.a, ct), self.operand(e.b, ct), ct)
        # `>>` is arithmetic when the left operand is signed, whatever type the operands are promoted to
        # (core.tensor.__rshift__ picks ashr/lshr from self.dtype): int8 >> uint8 shifts uint8 bits arithmetically
        ashr = e.op == ">>" and (ta.d.signed or isinstance(e.a, Const))
        return self.arith(e.op, self.operand(e.a, res), self.operand(e.b, res), res, ashr)

    def arith(self, op: str, a: RV, b: RV, d: DType, ashr: bool = False) -> RV:
        unc = or_unc(a.unc, b.unc)
        if d.kind == "bool" or d.is_int:
            x, y = a.v.to(torch.int64), b.v.to(torch.int64)
            if op == "+":
                r = x + y
            elif op == "-":
                r = x - y
            elif op == "*":
                r = x * y
            elif op in ("//", "%"):
                r = _int_divmod(op, x, y, d)
            elif op == "&":
                r = x & y
            elif op == "|":
                r = x | y
            elif op == "^":
                r = x ^ y
            elif op == "<<":
                r = torch.where((y >= 0) & (y < d.bits), x << y.clamp(0, 63), torch.zeros_like(x))
                unc = or_unc(unc, (y < 0) | (y >= d.bits))
            elif op == ">>":
                r = _shift_right(x, y, d, ashr)
                unc = or_unc(unc, (y < 0) | (y >= d.bits))
            else:
                raise TypeError(f"integer {op}")
            return RV(wrap(r, d), d, None, unc)
        x, y = a.v, b.v
        if op == "+":
            r = x + y
            err = add_err(a.err, b.err)
        elif op == "-":
            r = x - y
            err = add_err(a.err, b.err)
        elif op == "*":
            r = x * y
            err = None
            if a.err is not None or b.err is not None:
                ea = a.err if a.err is not None else torch.zeros(())
                eb = b.err if b.err is not None else torch.zeros(())
                err = x.double().abs() * eb + y.double().abs() * ea + ea * eb
        elif op == "/":
            r = x / y
            err = None
            if a.err is not None or b.err is not None:
                ea = a.err if a.err is not None else torch.zeros(())
                eb = b.err if b.err is not None else torch.zeros(())
                den = y.double().abs()
                err = (ea * den + x.double().abs() * eb) / (den * (den - eb)).clamp(min=1e-300)
                unc = or_unc(unc, den <= eb)
        else:
            raise TypeError(f"float {op}")
        if err is not None:
            err = err + ulp_bound(r, d.name)
        return self._finite(RV(r, d, err, unc))

    def _finite(self, v: RV) -> RV:
        """Results at the edge of the range (or beyond) are undetermined when the value is inexact."""
        if v.err is not None and v.dtype.is_float:
            near = (v.v.double().abs() + v.err) >= max_finite(v.dtype.name)
            bad = ~torch.isfinite(v.err) | near
            v.unc = or_unc(v.unc, bad)
            v.err = torch.where(torch.isfinite(v.err), v.err, torch.zeros_like(v.err))
        return v

    def compare(self, op: str, a: RV, b: RV, d: DType) -> RV:
        x, y = a.v, b.v
        if d.is_int:
            x, y = as_signed_order(x.to(torch.int64), d), as_signed_order(y.to(torch.int64), d)
        fn = {"<": torch.lt, "<=": torch.le, ">": torch.gt, ">=": torch.ge, "==": torch.eq, "!=": torch.ne}[op]
        r = fn(x, y)
        unc = or_unc(a.unc, b.unc)
        err = add_err(a.err, b.err)
        if err is not None:
            unc = or_unc(unc, (x.double() - y.double()).abs() <= err)
        return RV(r, BOOL, None, unc)

    def unary(self, op: str, a: RV) -> RV:
        d = a.dtype
        if op == "neg":
            if d.is_int:
                return RV(wrap(-a.v, d), d, None, a.unc)
            return RV(-a.v, d, a.err, a.unc)
        if op == "abs":
            if d.is_int:
                return RV(wrap(a.v.abs(), d) if d.signed else a.v, d, None, a.unc)
            return RV(a.v.abs(), d, a.err, a.unc)
        if op == "invert":
            if d.kind == "bool":
                return RV(~a.v, d, None, a.unc)
            return RV(wrap(~a.v, d), d, None, a.unc)
        x = a.v
        xd = x.double()
        e = a.err
        unc = a.unc
        if op in ("floor", "ceil"):
            f = torch.floor if op == "floor" else torch.ceil
            r = f(x)
            if e is not None:
                unc = or_unc(unc, f(xd - e) != f(xd + e))
            return RV(r, d, None, unc)
        fns = {"exp": torch.exp, "exp2": torch.exp2, "log": torch.log, "log2": torch.log2, "sin": torch.sin,
               "cos": torch.cos, "sqrt": torch.sqrt, "sqrt_rn": torch.sqrt, "rsqrt": torch.rsqrt, "erf": torch.erf,
               "sigmoid": torch.sigmoid}
        # fp32 (and narrower) results from the fp64 function, rounded once: torch's own fp32 sqrt/exp/... on
        # CPU are vectorised approximations (its fp32 sqrt is not correctly rounded: sqrt(559.5))
        r = fns[op](x.double()).to(x.dtype) if d.name != "float64" else fns[op](x)
        if op == "sigmoid":  # defined as 1 / (1 + exp(-x)) in the input's type: exp(-x) overflows to inf below
            ex = torch.exp(-x.double())  # about -88.7 in fp32, and the result is then 0, not a subnormal
            e_t = ex.to(x.dtype)
            r = 1 / (1 + e_t)
            top = max_finite(d.name)
            unc = or_unc(unc, (ex > top / 4) & (ex < top * 4))  # exp may or may not overflow there
        rd = r.double().abs()
        prop = None
        if e is not None:
            if op == "exp":
                prop = rd * torch.expm1(e)
            elif op == "exp2":
                prop = rd * torch.expm1(e * math.log(2))
            elif op in ("log", "log2"):
                prop = e / (xd.abs() - e).clamp(min=1e-300) / (1.0 if op == "log" else math.log(2))
                unc = or_unc(unc, xd.abs() <= e)
            elif op in ("sqrt", "sqrt_rn"):
                prop = e / (xd.clamp(min=0).sqrt() + (xd - e).clamp(min=0).sqrt()).clamp(min=1e-300)
            elif op == "rsqrt":
                prop = 0.5 * e * (xd - e).clamp(min=1e-300) ** -1.5
                unc = or_unc(unc, xd <= e)
            elif op in ("sin", "cos"):
                prop = e
            elif op == "erf":
                prop = e * 1.1284
            elif op == "sigmoid":
                prop = e * 0.25
        if d.name in ("float16", "bfloat16"):  # computed in fp32 (sigmoid upcasts), then rounded
            allowance = LIBM_ULPS[op] * ulp_bound(r, "float32") + ulp_bound(r, d.name)
        else:
            allowance = LIBM_ULPS[op] * ulp_bound(r, d.name)
        err = add_err(prop, allowance if LIBM_ULPS[op] or prop is not None else None)
        if err is not None and prop is not None:
            err = err + ulp_bound(r, d.name)
        return self._finite(RV(r, d, err, unc))

    def minmax(self, is_max: bool, a: RV, b: RV, d: DType) -> RV:
        x, y = a.v, b.v
        if d.is_int:
            xo, yo = as_signed_order(x, d), as_signed_order(y, d)
            r = torch.where((xo >= yo) if is_max else (xo <= yo), x, y)
            return RV(r, d, None, or_unc(a.unc, b.unc))
        # tl.maximum/minimum default to PropagateNan.NONE: maxnum/minnum, a NaN operand loses
        r = torch.fmax(x, y) if is_max else torch.fmin(x, y)
        err = None
        if a.err is not None or b.err is not None:
            ea = a.err if a.err is not None else torch.zeros(())
            eb = b.err if b.err is not None else torch.zeros(())
            # the chosen operand's error; either one's when they are within their errors of each other
            close = (x.double() - y.double()).abs() <= ea + eb
            took_a = (x >= y) if is_max else (x <= y)
            err = torch.where(close, torch.maximum(ea, eb), torch.where(took_a, ea, eb)).expand(r.shape).clone()
        return RV(r, d, err, or_unc(a.unc, b.unc))

    def call(self, e: Call) -> RV:
        if e.fn in ("minimum", "maximum"):
            t = dt(infer(e, self.types).dtype)
            a, b = (self.operand(x, t) for x in e.args)
            return self.minmax(e.fn == "maximum", a, b, t)
        if e.fn == "where":
            t = dt(infer(e, self.types).dtype)
            c = self.expr(e.args[0])
            a, b = (self.operand(x, t) for x in e.args[1:])
            r = torch.where(c.v, a.v, b.v)
            err = None
            if a.err is not None or b.err is not None:
                za = a.err if a.err is not None else torch.zeros(())
                zb = b.err if b.err is not None else torch.zeros(())
                err = torch.where(c.v, za, zb)
            return RV(r, t, err, or_unc(c.unc, a.unc, b.unc))
        if e.fn == "fma":
            a, b, c = (self.expr(x) for x in e.args)
            r = torch.addcmul(c.v.double(), a.v.double(), b.v.double()).to(a.v.dtype) \
                if a.dtype.name == "float32" else a.v * b.v + c.v
            prod = self.arith("*", a, b, a.dtype)
            err = add_err(prod.err, c.err)
            if a.dtype.name == "float64":
                err = add_err(err, ulp_bound(r, "float64"))  # fma rounds once, a*b+c twice
            if err is not None:
                err = err + ulp_bound(r, a.dtype.name)
            return self._finite(RV(r, a.dtype, err, or_unc(a.unc, b.unc, c.unc)))
        if e.fn == "clamp":
            a = self.expr(e.args[0])
            lo, hi = (float(x.value) for x in e.args[1:])
            r = a.v.clamp(min=torch.tensor(lo, dtype=a.v.dtype).item(), max=torch.tensor(hi, dtype=a.v.dtype).item())
            return RV(r, a.dtype, a.err, a.unc)
        if e.fn == "cdiv":
            a = self.expr(e.args[0])
            t = dt(infer(e, self.types).dtype)
            c = int(e.args[1].value)
            x = self.cast(a, t).v
            r = _int_divmod("//", wrap(x + (c - 1), t), torch.full_like(x, c), t)  # (x + c - 1) wraps first
            return RV(wrap(r, t), t, None, a.unc)
        if e.fn == "umulhi":
            a, b = (self.expr(x) for x in e.args)
            d = a.dtype
            r = torch.tensor([_umulhi(int(x), int(y), d) for x, y in zip(a.v.flatten().tolist(),
                                                                        b.v.expand(a.v.shape).flatten().tolist())],
                             dtype=torch.int64).view(a.v.shape)
            return RV(r, d, None, or_unc(a.unc, b.unc))
        raise TypeError(f"call {e.fn}")

    def cast(self, a: RV, d: DType) -> RV:
        s = a.dtype
        if s == d:
            return a
        x = a.v
        if d.kind == "bool":
            r = x != 0
            unc = a.unc
            if a.err is not None:
                unc = or_unc(unc, x.double().abs() <= a.err)
            return RV(r, d, None, unc)
        if d.is_float:
            if s.is_float:
                r = x.to(d.torch)
                err = None
                if a.err is not None:
                    err = a.err + ulp_bound(r, d.name)
                return self._finite(RV(r, d, err, a.unc))
            if s.kind == "uint" and s.bits == 64:
                big = x < 0
                r = torch.where(big, x.double() + 2.0 ** 64, x.double()).to(d.torch)
                return RV(r, d, None, or_unc(a.unc, big))
            return RV(x.to(d.torch) if s.kind != "bool" else x.to(d.torch), d, None, a.unc)
        # -> integer
        if s.is_float:
            xd = x.double()
            lo, hi = d.int_range
            r = torch.where(torch.isnan(xd), torch.zeros_like(xd), xd.clamp(min=lo, max=hi)).trunc()
            unc = a.unc
            out_of_range = (xd < lo) | (xd > hi) | torch.isnan(xd)
            unc = or_unc(unc, out_of_range)  # saturated (nmp, GPUs) vs wrapped (interpreter): not compared
            if a.err is not None:
                below, above = (xd - a.err).clamp(min=lo, max=hi), (xd + a.err).clamp(min=lo, max=hi)
                unc = or_unc(unc, below.trunc() != above.trunc())
            if d.kind == "uint" and d.bits == 64:
                r64 = torch.where(r >= 2.0 ** 63, r - 2.0 ** 64, r).to(torch.int64)
            else:
                r64 = r.to(torch.int64)
            return RV(r64, d, None, unc)
        if s.kind == "bool":
            return RV(x.to(torch.int64), d, None, a.unc)
        return RV(wrap(x.to(torch.int64), d), d, None, a.unc)

    # -- reductions, scans, dots ----------------------------------------------------------------------
    def reduce(self, e: Reduce) -> RV:
        a = self.expr(e.a)
        ax = e.axis
        vt = infer(e, self.types)
        out = dt(vt.dtype)
        unc = None if a.unc is None else a.unc.any(ax)
        if e.op in ("argmax", "argmin") or (e.op in combine.FUNCTIONS and combine.get(e.op).pair):
            x = a.v if a.dtype.is_float else as_signed_order(a.v, a.dtype)
            y = -x if e.op == "argmin" else x
            if a.dtype.is_float and e.op == "argmin":
                y = -x
            elif not a.dtype.is_float and e.op == "argmin":
                y = ~x  # order-reversing without overflow
            idx = combine._first_argmax(y, ax)
            if a.dtype.is_float:  # NaN loses every comparison: where it ends up depends on the order
                unc = or_unc(unc, torch.isnan(a.v).any(ax))
            if a.err is not None:
                m = y.double().amax(ax, keepdim=True)
                close = (y.double() >= m - 2 * a.err.amax(ax, keepdim=True)).sum(ax) > 1
                unc = or_unc(unc, close)
            return RV(idx.to(torch.int64), out, None, unc)
        if e.op in ("max", "min"):
            a = self.cast(a, out)  # promoted first (int32 / fp32 below 32 bits)
            if a.dtype.is_int:
                xo = as_signed_order(a.v, a.dtype)
                pos = (xo.argmax(ax) if e.op == "max" else xo.argmin(ax)).unsqueeze(ax)
                r = a.v.gather(ax, pos).squeeze(ax)
                return RV(r, out, None, unc)
            r = combine.nan_ignoring(a.v, ax, e.op == "max")
            err = None if a.err is None else a.err.expand(a.v.shape).amax(ax)
            return RV(r, out, err, unc)
        if e.op == "xor_sum":
            acc = a.v.select(ax, 0).clone()
            for k in range(1, a.v.shape[ax]):
                acc = acc ^ a.v.select(ax, k)
            return RV(acc, out, None, unc)
        if e.op == "sum" or e.op == "comb_add":
            x = self.cast(a, out)
            if out.is_int:
                return RV(wrap(x.v.sum(ax), out), out, None, unc)
            acc_u = out.unit_roundoff if e.op == "comb_add" else _acc_roundoff(out)
            r = _narrow_sum(x.v, ax, out)
            n = a.v.shape[ax]
            mag = x.v.double().abs().sum(ax)
            err = 2 * (n - 1) * acc_u * mag + ulp_bound(r, out.name)
            if x.err is not None:
                err = err + x.err.expand(x.v.shape).sum(ax)
            return self._finite(RV(r, out, err, unc))
        fn = combine.get(e.op)
        r = _ordered(fn, a.dtype, fn.fold, a.v, ax)
        err = None if a.err is None else a.err.expand(a.v.shape).amax(ax)
        return RV(r, out, err, unc)

    def scan(self, e: Scan) -> RV:
        a = self.expr(e.a)
        ax = e.axis
        out = dt(infer(e, self.types).dtype)
        x = self.cast(a, out)
        v = x.v.flip(ax) if e.reverse else x.v
        err_in = None if x.err is None else (x.err.expand(x.v.shape).flip(ax) if e.reverse else x.err.expand(x.v.shape))
        unc = None if a.unc is None else (a.unc.flip(ax) if e.reverse else a.unc).cumsum(ax) > 0
        err = None
        if e.op in ("cumsum", "cumprod", "comb_add") and out.is_int:
            r = wrap((v.cumsum(ax) if e.op != "cumprod" else _int_cumprod(v, ax)), out)
        elif e.op in ("cumsum", "comb_add"):
            acc_u = out.unit_roundoff if e.op == "comb_add" else _acc_roundoff(out)
            r = v.float().cumsum(ax).to(out.torch) if out.name != "float64" else v.cumsum(ax)
            n = torch.arange(v.shape[ax], dtype=torch.float64).view([-1 if k == ax else 1 for k in range(v.dim())])
            err = 2 * n * acc_u * v.double().abs().cumsum(ax) + ulp_bound(r, out.name)
            if err_in is not None:
                err = err + err_in.cumsum(ax)
        elif e.op == "cumprod":
            acc_u = _acc_roundoff(out)
            r = v.float().cumprod(ax).to(out.torch) if out.name != "float64" else v.cumprod(ax)
            mag = v.double().abs() + (err_in if err_in is not None else 0)
            n = torch.arange(1, v.shape[ax] + 1, dtype=torch.float64)
            n = n.view([-1 if k == ax else 1 for k in range(v.dim())])
            big = mag.cumprod(ax)
            err = (big - v.double().abs().cumprod(ax)) + 2 * n * acc_u * big + ulp_bound(r, out.name)
        else:
            fn = combine.get(e.op)
            r = _ordered(fn, x.dtype, fn.cumulative, v, ax)
            if err_in is not None:
                err = err_in.cummax(ax).values
        if e.reverse:
            r = r.flip(ax)
            err = None if err is None else err.flip(ax)
            unc = None if unc is None else unc.flip(ax)
        return self._finite(RV(r, out, err, unc))

    def dot(self, e: Dot) -> RV:
        a, b = self.expr(e.a), self.expr(e.b)
        out = dt(infer(e, self.types).dtype)
        unc = None
        if a.unc is not None or b.unc is not None:
            ua = a.unc.any(1, keepdim=True) if a.unc is not None else torch.zeros(a.v.shape[0], 1, dtype=torch.bool)
            ub = b.unc.any(0, keepdim=True) if b.unc is not None else torch.zeros(1, b.v.shape[1], dtype=torch.bool)
            unc = ua | ub
        if out.is_int:
            r = a.v.to(torch.int64) @ b.v.to(torch.int64)
            if e.acc is not None:
                c = self.expr(e.acc)
                r = r + c.v
                unc = or_unc(unc, c.unc)
            return RV(wrap(r, out), out, None, unc)
        ad, bd = a.v.double(), b.v.double()
        r = ad @ bd
        mag = ad.abs() @ bd.abs()
        k = a.v.shape[1]
        acc_u = out.unit_roundoff if e.out_dtype == "float16" else (2.0 ** -53 if out.name == "float64" else 2.0 ** -24)
        err_prop = None
        if a.err is not None or b.err is not None:
            ea = a.err.expand(a.v.shape) if a.err is not None else torch.zeros(a.v.shape, dtype=torch.float64)
            eb = b.err.expand(b.v.shape) if b.err is not None else torch.zeros(b.v.shape, dtype=torch.float64)
            err_prop = ad.abs() @ eb + ea @ bd.abs() + ea @ eb
        if e.acc is not None:
            c = self.expr(e.acc)
            r = r + c.v.double()
            mag = mag + c.v.double().abs()
            err_prop = add_err(err_prop, c.err)
            unc = or_unc(unc, c.unc)
        rr = r.to(out.torch)
        err = 2 * (k + 1) * acc_u * mag + ulp_bound(rr, out.name)
        if e.precision == "tf32":  # inputs rounded (or truncated) to 10 mantissa bits: 2**-10 each, both sides
            err = err + 4 * 2.0 ** -10 * (ad.abs() @ bd.abs())
        err = add_err(err, err_prop)
        return self._finite(RV(rr, out, err, unc))


class _Out:
    """An output tensor in reference representation, with per-element error and undetermined masks."""

    def __init__(self, v: torch.Tensor, d: DType):
        self.v = v.flatten().clone()
        self.shape = v.shape
        self.d = d
        self.err = None
        self.unc = None

    def get(self, flat: torch.Tensor) -> RV:
        err = None if self.err is None else self.err[flat]
        unc = None if self.unc is None else self.unc[flat]
        return RV(self.v[flat].clone(), self.d, err, unc)  # a 0-d index would give a view

    def put(self, flat: torch.Tensor, mask: torch.Tensor, val: RV) -> None:
        shape = flat.shape
        v = val.v.expand(shape) if val.v.shape != shape else val.v
        f, m = flat[mask], v[mask]
        self.v[f] = m.to(self.v.dtype)
        if val.err is not None:
            if self.err is None:
                self.err = torch.zeros(self.v.shape, dtype=torch.float64)
            self.err[f] = val.err.expand(shape)[mask]
        elif self.err is not None:
            self.err[f] = 0.0
        if val.unc is not None:
            if self.unc is None:
                self.unc = torch.zeros(self.v.shape, dtype=torch.bool)
            self.unc[f] = val.unc.expand(shape)[mask]
        elif self.unc is not None:
            self.unc[f] = False


def _ordered(fn, d: DType, f, v: torch.Tensor, ax: int) -> torch.Tensor:
    """A combine function that compares values, on uint64 bit patterns held in int64: compare them in
    the order-preserving signed form and map the result back (indices are left as they are)."""
    if not (fn.ordered and d.kind == "uint" and d.bits == 64):
        return f(v, ax)
    r = f(as_signed_order(v, d), ax)
    return r if fn.pair else as_signed_order(r, d)


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def _acc_roundoff(d: DType) -> float:
    return 2.0 ** -53 if d.name == "float64" else 2.0 ** -24


def _narrow_sum(x: torch.Tensor, ax: int, d: DType) -> torch.Tensor:
    """Sum accumulated in fp32 (fp64 for fp64), rounded once to the element type."""
    if d.name == "float64":
        return x.sum(ax)
    return x.float().sum(ax).to(d.torch)


def _int_divmod(op: str, x: torch.Tensor, y: torch.Tensor, d: DType) -> torch.Tensor:
    y_safe = torch.where(y == 0, torch.ones_like(y), y)
    if d.kind == "uint" and d.bits == 64 and bool(((x < 0) | (y < 0)).any()):
        xs, ys = x.flatten().tolist(), y_safe.expand(x.shape).flatten().tolist()
        res = []
        for p, q in zip(xs, ys):
            p, q = p % 2 ** 64, q % 2 ** 64
            r = p // q if op == "//" else p % q
            res.append(r - 2 ** 64 if r >= 2 ** 63 else r)
        return torch.tensor(res, dtype=torch.int64).view(x.shape)
    if op == "//":
        return torch.div(x, y_safe, rounding_mode="trunc")
    return torch.fmod(x, y_safe)


def _shift_right(x: torch.Tensor, y: torch.Tensor, d: DType, ashr: bool) -> torch.Tensor:
    y = y.clamp(0, 63)
    if ashr and d.kind == "uint" and d.bits < 64:  # the bit pattern shifted as a signed number
        half = 1 << (d.bits - 1)
        return ((x + half) % (2 * half) - half) >> y
    if ashr or d.signed or d.kind == "bool" or d.bits < 64:
        return x >> y  # unsigned values below 64 bits are non-negative in int64
    logical = (x >> y) & torch.where(y == 0, torch.full_like(y, -1), (1 << (64 - y).clamp(max=63)) - 1)
    return torch.where(x < 0, logical, x >> y)


def _int_cumprod(v: torch.Tensor, ax: int) -> torch.Tensor:
    out = v.clone()
    for k in range(1, v.shape[ax]):
        out.select(ax, k).copy_(out.select(ax, k - 1) * v.select(ax, k))
    return out


def _umulhi(x: int, y: int, d: DType) -> int:
    bits = d.bits  # tl.umulhi multiplies the operands' bit patterns as unsigned numbers
    r = ((x % 2 ** bits) * (y % 2 ** bits)) >> bits
    if d.signed and r >= 2 ** (bits - 1):
        r -= 2 ** bits
    if not d.signed and bits == 64 and r >= 2 ** 63:
        r -= 2 ** 64
    return r


def expected(p: Program, data: RunData) -> dict[int, Expected]:
    return Evaluator(p, data).run()

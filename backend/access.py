"""Memory access analysis: recover DMA descriptors from Triton's tensors of pointers.

Triton kernels address memory with tensors of pointers built from `make_range`, `splat`,
`broadcast`, `expand_dims`, `addptr` and integer arithmetic. Pointer analysis (`AffineAnalysis`)
rewrites such a tensor as

    root argument + offset + sum_d index_d * stride_d        (offset and strides in bytes)

where offset and strides are scalar expressions (`SExpr`) the compiler can compute once per access.
One dimension may also carry a run-time index (`RowIndex`): element j of that dimension adds
sum_k scale_k * vector_k[j] for 1-D integer tensors vector_k the compiler cannot see through (loaded
ids, `(pid * B + arange(B)) % M`, a page table lookup). Such an access is a row gather: one DMA per
row, or per run of rows whose offsets step evenly.
Mask analysis (`MaskAnalysis`) is separate, as in triton-shared: it turns `offs < n` style masks into
an upper bound per dimension (a rectangular valid box). Anything that does not fit these forms is
answered with `None`, and the caller falls down the ladder to element gather/scatter; the analysis
never guesses.
"""

from __future__ import annotations

from dataclasses import dataclass

from .ir import Func, Op, Ty, Value

# -- scalar expressions ---------------------------------------------------------------------------
# An SExpr is an int constant, or a tuple: ("val", Value) for a TTIR scalar, ("sym", key) for a
# value the lowering provides (a loop-carried offset), or (op, a, b) for op in add/sub/mul/min,
# ("gt0", a) -> 1 if a > 0 else 0 (used for guards), ("i1", Value) an i1 condition as 0/1; and from the
# piecewise-affine analysis (access_split.py): ("div", a, c) and ("rem", a, c) (truncating, as arith.divsi
# and arith.remsi), ("cmp", pred, a, b) -> 1 if `a pred b` (an arith.cmpi predicate) else 0, and
# ("sel", cond, a, b) -> a if cond != 0 else b.
SExpr = object


def s_add(a: SExpr, b: SExpr) -> SExpr:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if a == 0:
        return b
    if b == 0:
        return a
    return ("add", a, b)


def s_sub(a: SExpr, b: SExpr) -> SExpr:
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    if b == 0:
        return a
    if a == b:
        return 0
    return ("sub", a, b)


def s_mul(a: SExpr, b: SExpr) -> SExpr:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if a == 0 or b == 0:
        return 0
    if a == 1:
        return b
    if b == 1:
        return a
    return ("mul", a, b)


def s_min(a: SExpr, b: SExpr) -> SExpr:
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    if a is None:
        return b
    if b is None:
        return a
    return ("min", a, b)


@dataclass(frozen=True)
class RowIndex:
    """A run-time index along tile dimension `axis`: element j of that dimension adds
    sum(scale * vector[j] for vector, scale in terms), each vector a 1-D integer TTIR tensor."""

    axis: int
    terms: tuple[tuple[Value, SExpr], ...]

    def scaled(self, k: SExpr) -> RowIndex:
        return RowIndex(self.axis, tuple((v, s_mul(s, k)) for v, s in self.terms))

    def moved(self, axis: int) -> RowIndex:
        return RowIndex(axis, self.terms)


def _join_index(a: RowIndex | None, b: RowIndex | None, sign: int = 1) -> RowIndex | None | bool:
    """The index of a sum (or difference, sign -1) of two forms; False when they index different axes."""
    if b is not None and sign < 0:
        b = b.scaled(-1)
    if a is None or b is None:
        return a if b is None else b
    if a.axis != b.axis:
        return False
    return RowIndex(a.axis, a.terms + b.terms)


@dataclass(frozen=True)
class Affine:
    """`root` + offset + sum(index_d * strides[d]) (+ the run-time `index`, if any); `root` is a pointer
    argument or None for integers.

    For integer tensors offset/strides are in units of the value; for pointer tensors in bytes.
    """

    root: Value | None
    offset: SExpr
    strides: tuple[SExpr, ...]
    index: RowIndex | None = None

    @property
    def is_uniform(self) -> bool:
        return self.index is None and all(s == 0 for s in self.strides)


def _def(v: Value) -> Op | None:
    return v.owner if isinstance(v.owner, Op) else None


class MemoisedAnalysis:
    """A form per value, computed once (`_compute`); a value met again while its own form is being
    computed (a cycle through a loop) is unknown (None)."""

    memo: dict[int, object]

    def __call__(self, v: Value):
        key = id(v)
        if key not in self.memo:
            self.memo[key] = None
            self.memo[key] = self._compute(v)
        return self.memo[key]

    def _compute(self, v: Value):
        raise NotImplementedError


class AffineAnalysis(MemoisedAnalysis):
    """Affine forms of integer and pointer values (scalars and tensors), memoised per value."""

    def __init__(self, func_args: list[Value]):
        self.memo: dict[int, Affine | None] = {}
        self.func_args = {id(a) for a in func_args}

    def assume(self, v: Value, form: Affine | None) -> None:
        """Give a value (a loop-carried block argument) a form chosen by the lowering."""
        self.memo[id(v)] = form

    def forget(self, v: Value) -> None:
        self.memo.pop(id(v), None)

    def _scalar(self, v: Value) -> Affine | None:
        if v.type.is_ptr:
            if id(v) in self.func_args:
                return Affine(v, 0, ())
            op = _def(v)
            if op is not None and op.name == "tt.addptr":
                base = self(op.operands[0])
                off = self(op.operands[1])
                if base is None or off is None or base.root is None:
                    return None
                return Affine(base.root, s_add(base.offset, s_mul(off.offset, v.type.pointee_bytes)), ())
            return None
        if not v.type.is_int or v.type.elem == "i1":
            return None
        op = _def(v)
        if op is not None and op.name == "arith.constant" and isinstance(op.attrs.get("value"), int):
            return Affine(None, int(op.attrs["value"]), ())
        return Affine(None, ("val", v), ())

    def _compute(self, v: Value) -> Affine | None:
        form = self._structured(v)
        ty: Ty = v.type
        if form is None and ty.is_tensor and ty.is_int and ty.elem != "i1" and len(ty.shape) == 1:
            # an integer vector the analysis cannot see through is a run-time index of itself
            return Affine(None, 0, (0,), RowIndex(0, ((v, 1),)))
        return form

    def _structured(self, v: Value) -> Affine | None:
        ty: Ty = v.type
        if not ty.is_tensor:
            return self._scalar(v)
        if not (ty.is_int or ty.is_ptr) or ty.elem == "i1":
            return None
        op = _def(v)
        if op is None:
            return None
        rank = len(ty.shape)
        name = op.name
        if name == "tt.make_range":
            return Affine(None, int(op.attrs.get("start", 0)), (1,))
        if name == "arith.constant":
            val = op.attrs.get("value")
            if isinstance(val, int) and not isinstance(val, bool):
                return Affine(None, val, (0,) * rank)
            return None
        if name == "tt.splat":
            src = self(op.operands[0])
            if src is None:
                return None
            return Affine(src.root, src.offset, (0,) * rank)
        if name == "tt.broadcast":
            src = self(op.operands[0])
            if src is None:
                return None
            in_shape = op.operands[0].type.shape
            if src.index is not None and in_shape[src.index.axis] == 1:
                return None  # a one-element index broadcast along its axis
            strides = tuple(0 if d_in == 1 else s for d_in, s in zip(in_shape, src.strides))
            return Affine(src.root, src.offset, strides, src.index)
        if name == "tt.expand_dims":
            src = self(op.operands[0])
            if src is None:
                return None
            axis = int(op.attrs["axis"])
            strides = list(src.strides)
            strides.insert(axis, 0)
            index = src.index.moved(src.index.axis + (axis <= src.index.axis)) if src.index else None
            return Affine(src.root, src.offset, tuple(strides), index)
        if name == "tt.trans":
            src = self(op.operands[0])
            order = op.attrs.get("order")
            if src is None or order is None:
                return None
            index = src.index.moved(list(order).index(src.index.axis)) if src.index else None
            return Affine(src.root, src.offset, tuple(src.strides[i] for i in order), index)
        if name in ("arith.extsi", "arith.extui", "arith.trunci"):
            return self(op.operands[0])
        if name == "tt.reshape":
            src = self(op.operands[0])
            shape_in = op.operands[0].type.shape
            strides = _reshape_unit_dims(shape_in, ty.shape, src.strides if src else None, 0)
            if src is None or strides is None:
                return None
            index = None
            if src.index is not None:
                on_axis = tuple(d == src.index.axis for d in range(len(shape_in)))
                marks = _reshape_unit_dims(shape_in, ty.shape, on_axis, False)
                if marks is None or shape_in[src.index.axis] == 1:
                    return None
                index = src.index.moved(list(marks).index(True))
            return Affine(src.root, src.offset, strides, index)
        if name == "tt.addptr":
            base = self(op.operands[0])
            off = self(op.operands[1])
            if base is None or off is None or base.root is None or off.root is not None:
                return None
            size = ty.pointee_bytes
            index = _join_index(base.index, off.index.scaled(size) if off.index else None)
            if index is False:
                return None
            return Affine(base.root, s_add(base.offset, s_mul(off.offset, size)),
                          tuple(s_add(a, s_mul(b, size)) for a, b in zip(base.strides, off.strides)), index)
        if name in ("arith.addi", "arith.subi"):
            a, b = self(op.operands[0]), self(op.operands[1])
            if a is None or b is None or a.root is not None or b.root is not None:
                return None
            f = s_add if name == "arith.addi" else s_sub
            index = _join_index(a.index, b.index, 1 if name == "arith.addi" else -1)
            if index is False:
                return None
            return Affine(None, f(a.offset, b.offset), tuple(f(x, y) for x, y in zip(a.strides, b.strides)), index)
        if name == "arith.muli":
            a, b = self(op.operands[0]), self(op.operands[1])
            if a is None or b is None or a.root is not None or b.root is not None:
                return None
            if b.is_uniform:
                k = b.offset
                return Affine(None, s_mul(a.offset, k), tuple(s_mul(s, k) for s in a.strides),
                              a.index.scaled(k) if a.index else None)
            if a.is_uniform:
                k = a.offset
                return Affine(None, s_mul(b.offset, k), tuple(s_mul(s, k) for s in b.strides),
                              b.index.scaled(k) if b.index else None)
            return None
        return None


def _reshape_unit_dims(src_shape: tuple[int, ...], dst_shape: tuple[int, ...], per_dim, fill) -> tuple | None:
    """`per_dim` (one entry per source dimension) for a reshape that only adds or drops dimensions of
    size 1 (Triton's tensor-descriptor rewrite makes 16 -> 16x1); added dimensions get `fill`. None
    for any other reshape."""
    if per_dim is None or [d for d in src_shape if d != 1] != [d for d in dst_shape if d != 1]:
        return None
    kept = iter(x for d, x in zip(src_shape, per_dim) if d != 1)
    return tuple(fill if d == 1 else next(kept) for d in dst_shape)


def nonneg_value(v: Value, loops: dict[int, Op], depth: int = 0) -> bool:
    """Whether the integer scalar `v` is provably >= 0: program ids, non-negative constants, induction
    variables of loops from a non-negative start with a positive step, and sums, products, quotients,
    remainders and extensions of those. Like Triton's own analyses, it assumes index arithmetic does not overflow
    (if it did, the DMA bounds check would report the access instead of letting it through)."""
    if depth > 24 or v.type.is_tensor:
        return False
    op = _def(v)
    if op is None:
        loop = loops.get(id(v))
        if loop is None:
            return False
        step = _def(loop.operands[2])
        return (nonneg_value(loop.operands[0], loops, depth + 1) and step is not None
                and step.name == "arith.constant" and _int_attr(step) > 0)
    name = op.name
    if name == "arith.constant":
        return _int_attr(op) >= 0
    if name in ("tt.get_program_id", "tt.get_num_programs"):
        return True
    if name in ("arith.extsi", "arith.extui", "arith.index_cast", "arith.addi", "arith.muli", "arith.minsi"):
        return all(nonneg_value(o, loops, depth + 1) for o in op.operands)
    if name == "arith.maxsi":
        return any(nonneg_value(o, loops, depth + 1) for o in op.operands)
    if name in ("arith.divsi", "arith.divui"):  # Inductor's grouped program order: pid // width
        return all(nonneg_value(o, loops, depth + 1) for o in op.operands)
    if name in ("arith.remsi", "arith.remui"):  # a truncating remainder has the sign of the dividend
        return nonneg_value(op.operands[0], loops, depth + 1)
    return False


def _int_attr(op: Op) -> int:
    val = op.attrs.get("value")
    return val if isinstance(val, int) and not isinstance(val, bool) else -1


def nonneg_sexpr(e: SExpr, loops: dict[int, Op]) -> bool:
    if isinstance(e, bool) or e is None:
        return False
    if isinstance(e, int):
        return e >= 0
    if e[0] == "val":
        return nonneg_value(e[1], loops)
    if e[0] in ("add", "mul"):
        return nonneg_sexpr(e[1], loops) and nonneg_sexpr(e[2], loops)
    if e[0] in ("div", "rem"):  # truncating quotient or remainder of a non-negative value by a positive one
        return isinstance(e[2], int) and e[2] > 0 and nonneg_sexpr(e[1], loops)
    return False


@dataclass(frozen=True)
class MaskBox:
    """A rectangular mask: element (i_0, ..., i_r) is valid iff i_d < bounds[d] for every bounded d
    and every guard is > 0."""

    bounds: tuple[SExpr | None, ...]
    guards: tuple[SExpr, ...] = ()


class MaskAnalysis(MemoisedAnalysis):
    def __init__(self, affine: AffineAnalysis, func: Func | None = None):
        self.affine = affine
        self.memo: dict[int, MaskBox | None] = {}
        self.func = func
        self._loops: dict[int, Op] | None = None

    @property
    def loops(self) -> dict[int, Op]:
        """scf.for ops by (the id of) their induction variable, for `nonneg_value`."""
        if self._loops is None:
            walk = self.func.walk() if self.func is not None else ()
            self._loops = {id(op.regions[0].block.args[0]): op for op in walk if op.name == "scf.for"}
        return self._loops

    def _compute(self, v: Value) -> MaskBox | None:
        ty = v.type
        rank = len(ty.shape)
        op = _def(v)
        if not ty.is_tensor:
            # a scalar condition: guard
            return MaskBox((), (("i1", v),))
        if op is None:
            return None
        name = op.name
        if name == "arith.constant":
            val = op.attrs.get("value")
            if val is True or val == 1:
                return MaskBox((None,) * rank)
            if val is False or val == 0:
                return MaskBox((None,) * rank, (0,))
            return None
        if name == "tt.splat":
            src = op.operands[0]
            return MaskBox((None,) * rank, (("i1", src),))
        if name == "arith.andi":
            a, b = self(op.operands[0]), self(op.operands[1])
            if a is None or b is None:
                return None
            return MaskBox(tuple(s_min(x, y) for x, y in zip(a.bounds, b.bounds)), a.guards + b.guards)
        if name == "tt.broadcast":
            src = self(op.operands[0])
            if src is None:
                return None
            in_shape = op.operands[0].type.shape
            bounds, guards = [], list(src.guards)
            for d_in, d_out, b in zip(in_shape, ty.shape, src.bounds):
                if d_in == 1 and d_out != 1 and b is not None:
                    guards.append(b)  # index 0 is valid iff 0 < b
                    bounds.append(None)
                else:
                    bounds.append(b)
            return MaskBox(tuple(bounds), tuple(guards))
        if name == "tt.expand_dims":
            src = self(op.operands[0])
            if src is None:
                return None
            b = list(src.bounds)
            b.insert(int(op.attrs["axis"]), None)
            return MaskBox(tuple(b), src.guards)
        if name == "tt.reshape":
            src = self(op.operands[0])
            in_shape = op.operands[0].type.shape
            if src is None or any(d == 1 and b is not None for d, b in zip(in_shape, src.bounds)):
                return None
            bounds = _reshape_unit_dims(in_shape, ty.shape, src.bounds, None)
            return None if bounds is None else MaskBox(bounds, src.guards)
        if name == "arith.cmpi":
            pred = op.attrs["_words"][0]
            lhs, rhs = op.operands
            flip = {"sgt": "slt", "sge": "sle"}
            if pred in flip:
                lhs, rhs, pred = rhs, lhs, flip[pred]
            if pred not in ("slt", "sle"):
                return None
            x, n = self.affine(lhs), self.affine(rhs)
            if x is None or n is None or x.root is not None or n.root is not None or x.index or n.index:
                return None
            if x.is_uniform and not n.is_uniform:
                return self._lower_bound(x, n, pred, rank)
            if not n.is_uniform:
                return None
            limit = s_sub(n.offset, x.offset)
            if pred == "sle":
                limit = s_add(limit, 1)
            nonzero = [d for d, s in enumerate(x.strides) if s != 0]
            if not nonzero:
                return MaskBox((None,) * rank, (limit,))
            if len(nonzero) != 1 or x.strides[nonzero[0]] != 1:
                return None
            bounds = [None] * rank
            bounds[nonzero[0]] = limit
            return MaskBox(tuple(bounds))
        return None

    def _lower_bound(self, c: Affine, x: Affine, pred: str, rank: int) -> MaskBox | None:
        """`c <= x` (or `c < x`) for a uniform integer constant c: a box only when it holds for every
        element, i.e. x's smallest element (its offset: all strides are non-negative) is provably
        >= c. That is the `offs >= 0` half of the masks of Triton's tensor-descriptor rewrite, for
        offsets built from program ids, constants and loop counters; other lower bounds stay gathers."""
        need = c.offset + (1 if pred == "slt" else 0) if isinstance(c.offset, int) else None
        loops = self.loops
        if need is None or need > 0 or not nonneg_sexpr(x.offset, loops):
            return None
        if not all(nonneg_sexpr(s, loops) for s in x.strides):
            return None
        return MaskBox((None,) * rank)


def magnitude_bound(v: Value, depth: int = 0) -> int:
    """An upper bound on |x| for every element x of the integer value `v` (a TTIR scalar or tensor).

    Values of a type of w bits are bounded by 2**(w-1) whatever they compute (wrapping included), so
    an op's bound is the smaller of what its operands allow and what its type allows. Loaded data gets
    its type's bound. Used to narrow the offsets of element gathers to 32 bits only when provable."""
    ty: Ty = v.type
    width = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64}.get(ty.elem or "", 64)
    limit = 1 if width == 1 else 1 << (width - 1)
    op = _def(v)
    if op is None or depth > 32:
        return limit
    name = op.name

    def of(k: int) -> int:
        return magnitude_bound(op.operands[k], depth + 1)

    if name == "arith.constant":
        val = op.attrs.get("value")
        return min(abs(val), limit) if isinstance(val, int) and not isinstance(val, bool) else limit
    if name == "tt.make_range":
        start = int(op.attrs.get("start", 0))
        return min(max(abs(start), abs(start + ty.shape[0] - 1)), limit)
    if name in ("tt.splat", "tt.broadcast", "tt.expand_dims", "tt.reshape", "tt.trans", "arith.extsi",
                "arith.trunci"):
        return min(of(0), limit)
    if name in ("arith.addi", "arith.subi"):
        return min(of(0) + of(1), limit)
    if name == "arith.muli":
        return min(of(0) * of(1), limit)
    if name == "arith.remsi":  # |x rem y| <= |x| and < |y|
        return min(of(0), of(1), limit)
    if name == "arith.select":
        return min(max(of(1), of(2)), limit)
    return limit

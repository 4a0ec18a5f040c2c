"""TTIR -> nmpir: choose a DMA descriptor or a gather for every access, turn tensor ops into tile ops.

The conversion walks the imported TTIR in order. Loads and stores go down the ladder: a structured
DMA when pointer analysis and mask analysis both succeed, else an element gather/scatter with
per-element checks. Loop-carried tensors of pointers or offsets whose strides do not change in the
loop become a scalar loop-carried byte offset (their tile is never built). Every other tensor op
becomes a tile op; tiles that only fed DMA descriptors are removed by dead-code elimination.
"""

from __future__ import annotations

import dataclasses

from triton_nmp.errors import NMPCompilationError

from .access import Affine, AffineAnalysis, MaskAnalysis, MaskBox, RowIndex, magnitude_bound, s_add, s_mul
from .access_split import SplitAnalysis, split_mask
from .codegen_scalar import ELEMENTWISE_OPS
from .ir import Block, Builder, Func, Module, Op, Region, Ty, Value
from .lower_language import LanguageLowering
from .ops import FUSABLE_OPS, make_operands

I64 = Ty("i64")
I1 = Ty("i1")

_SIMPLE = {
    "tt.splat": "nmp.splat",
    "tt.broadcast": "nmp.broadcast",
    "tt.expand_dims": "nmp.view",
    "tt.reshape": "nmp.view",
    "tt.trans": "nmp.transpose",
    "tt.dot": "nmp.matmul",
    "tt.get_program_id": "nmp.program_id",
    "tt.get_num_programs": "nmp.num_programs",
}
_SHAPE_OPS = ("tt.broadcast", "tt.expand_dims", "tt.reshape", "tt.trans")


def _simple_attrs(op: Op) -> dict:
    """The attributes a `_SIMPLE` op keeps."""
    return {k: v for k, v in op.attrs.items() if k in ("axis", "order", "inputPrecision", "_words")}


class Lowering(LanguageLowering):
    def __init__(self, func: Func, callees: dict[str, Func] | None = None):
        self.func = func
        self.callees = callees or {}  # functions Triton's inliner left as calls (see op_tt_call)
        self.cfg_owner = func  # the function whose CFG blocks branches name
        self.returns: list[list[list[Value]]] = []  # per inlined call: the values its returns give
        self.aff = AffineAnalysis(func.args)
        self.masks = MaskAnalysis(self.aff, func)
        self.split = SplitAnalysis(self.aff, self.masks.loops)
        self.vmap: dict[int, Value] = {}
        self.syms: dict[object, Value] = {}
        self.builder = Builder(prefix="t")  # its block and loc are where the next op goes
        self.block_arg_init: dict[int, Value] = {}
        self.deferred = _nested_only_constants(func)
        self.sunk: dict[tuple[int, int], tuple[Block, Value]] = {}
        self.hoisted: dict[tuple, Value] = {}
        self.row_offset_tiles: dict[tuple, Value] = {}  # row gathers of loop-carried pointers (op_scf_for)

    # -- helpers -----------------------------------------------------------------------------------
    def error(self, msg: str, hint: str = "") -> NMPCompilationError:
        return NMPCompilationError(msg, kernel=self.func.name, loc=str(self.builder.loc), hint=hint)

    def emit(self, name: str, operands: list[Value], result_types: list[Ty], attrs: dict | None = None,
             regions: list[Region] | None = None, names: list[str] | None = None) -> Op:
        return self.builder.op(name, operands, result_types, attrs, regions or (), names)

    def const(self, value, ty: Ty = I64) -> Value:
        return self.builder.const(value, ty, f"c{value}")

    def vec_operand(self, v: Value) -> Value:
        """An elementwise op's operand: a uniform constant tile (`arith.constant dense<c>`) is passed as
        the scalar c (nmp.vec broadcasts scalars), so it takes no scratchpad for the whole kernel."""
        op = v.owner if isinstance(v.owner, Op) else None
        if (v.type.is_tensor and op is not None and op.name == "arith.constant"
                and not isinstance(op.attrs.get("value"), list)):
            return self.hoisted_const(op.attrs["value"], v.type.scalar)
        return self.get(v)

    def hoisted_const(self, value, ty: Ty) -> Value:
        """A scalar constant defined at the top of the block: between two tile ops it would split their
        fused run (see `fused_run_length`)."""
        key = (id(self.builder.block), repr(value), ty)
        c = self.hoisted.get(key)
        if c is None:
            c = self.const(value, ty)
            self.builder.block.ops.insert(0, self.builder.block.ops.pop())
            self.hoisted[key] = c
        return c

    def get(self, v: Value) -> Value:
        """The nmpir value of a TTIR value; builds the tile from its affine form when it has none."""
        nv = self.vmap.get(id(v))
        if nv is not None:
            return nv
        if id(v) in self.deferred:
            return self._sunk_constant(v)
        form = self.aff(v)
        if form is not None and v.type.is_tensor:
            nv = self.materialize(form, v.type)
            return nv
        raise self.error(f"internal: value %{v.name} has no lowering")

    def sexpr(self, e) -> Value:
        """Emit i64 scalar code for an `access.SExpr`."""
        if isinstance(e, bool):
            return self.const(int(e))
        if isinstance(e, int):
            return self.const(e)
        kind = e[0]
        if kind == "val":
            v = self.get(e[1])
            if v.type.elem == "i64":
                return v
            cast = "arith.extui" if v.type.elem == "i1" else "arith.extsi"
            return self.emit(cast, [v], [I64]).result
        if kind == "sym":
            return self.syms[e[1]]
        if kind == "i1":
            return self.emit("arith.extui", [self.get(e[1])], [I64]).result
        if kind == "cmp":
            c = self.emit("arith.cmpi", [self.sexpr(e[2]), self.sexpr(e[3])], [I1], {"pred": e[1]}).result
            return self.emit("arith.extui", [c], [I64]).result
        if kind == "sel":
            c = self.emit("arith.cmpi", [self.sexpr(e[1]), self.const(0)], [I1], {"pred": "ne"}).result
            return self.emit("arith.select", [c, self.sexpr(e[2]), self.sexpr(e[3])], [I64]).result
        a, b = self.sexpr(e[1]), self.sexpr(e[2])
        name = {"add": "arith.addi", "sub": "arith.subi", "mul": "arith.muli", "min": "arith.minsi",
                "div": "arith.divsi", "rem": "arith.remsi"}[kind]
        return self.emit(name, [a, b], [I64]).result

    def row_offsets(self, index: RowIndex, stride, n: int) -> Value:
        """The i64 tile [n] of a run-time index's offsets, sum(scale * vector), plus j * stride (the
        form's affine stride along the same axis, when not 0). A loop-carried pointer's offsets are built
        once before its loop (`op_scf_for`)."""
        key = (index, stride)
        if key in self.row_offset_tiles:
            return self.row_offset_tiles[key]
        tile = Ty("i64", (n,))
        acc = None
        for vec, scale in index.terms:
            v = self.get(vec)
            if v.type.elem != "i64":
                v = self.emit("nmp.vec", [v], [tile], {"fn": "arith.extsi"}).result
            if scale != 1:
                v = self.emit("nmp.vec", [v, self.sexpr(scale)], [tile], {"fn": "arith.muli"}).result
            acc = v if acc is None else self.emit("nmp.vec", [acc, v], [tile], {"fn": "arith.addi"}).result
        if stride != 0:
            j = self.emit("nmp.iota", [], [tile], {"start": 0, "axis": 0}).result
            js = self.emit("nmp.vec", [j, self.sexpr(stride)], [tile], {"fn": "arith.muli"}).result
            acc = self.emit("nmp.vec", [acc, js], [tile], {"fn": "arith.addi"}).result
        return acc

    def materialize(self, form: Affine, ty: Ty) -> Value:
        acc = self.emit("nmp.splat", [self.sexpr(form.offset)], [Ty("i64", ty.shape)]).result
        acc = self.add_form_offsets(acc, form, ty.shape)
        if form.root is not None:
            base = self.emit("nmp.splat", [self.get(form.root)], [ty]).result
            return self.emit("nmp.vec", [base, acc], [ty], {"fn": "tt.addptr", "elem_bytes": 1}).result
        if ty.elem != "i64":
            return self.emit("nmp.vec", [acc], [ty], {"fn": "arith.trunci"}).result
        return acc

    def add_form_offsets(self, acc: Value | None, form: Affine, shape: tuple[int, ...]) -> Value | None:
        """`acc` (an i64 tile, or None for 0) plus the run-time index and strided parts of `form`."""
        i64_tile = Ty("i64", shape)

        def add(x: Value) -> Value:
            return x if acc is None else self.emit("nmp.vec", [acc, x], [i64_tile], {"fn": "arith.addi"}).result

        if form.index is not None:
            axis = form.index.axis
            rows = self.row_offsets(form.index, 0, shape[axis])
            if len(shape) > 1:
                one = tuple(n if d == axis else 1 for d, n in enumerate(shape))
                rows = self.emit("nmp.view", [rows], [Ty("i64", one)], {"axis": 1 - axis if len(shape) == 2 else 0})
                rows = self.emit("nmp.broadcast", [rows.result], [i64_tile]).result
            acc = add(rows)
        for d, s in enumerate(form.strides):
            if s == 0:
                continue
            idx = self.emit("nmp.iota", [], [i64_tile], {"start": 0, "axis": d}).result
            sv = self.emit("nmp.splat", [self.sexpr(s)], [i64_tile]).result
            acc = add(self.emit("nmp.vec", [idx, sv], [i64_tile], {"fn": "arith.muli"}).result)
        return acc

    def root_of(self, v: Value) -> Value | None:
        """The pointer argument a pointer (tensor) derives from."""
        seen = 0
        while seen < 1000:
            seen += 1
            if any(v is a for a in self.func.args):
                return v
            if id(v) in self.block_arg_init:
                v = self.block_arg_init[id(v)]
                continue
            op = v.owner if isinstance(v.owner, Op) else None
            if op is None:
                return None
            if op.name in ("tt.splat", "tt.broadcast", "tt.expand_dims", "tt.reshape", "tt.trans", "tt.addptr"):
                v = op.operands[0]
                continue
            if op.name == "arith.select":
                a, b = self.root_of(op.operands[1]), self.root_of(op.operands[2])
                return a if a is b else None
            if op.name in ("scf.for", "scf.if", "scf.while"):
                idx = op.results.index(v)
                if op.name == "scf.for":
                    v = op.operands[3 + idx]
                elif op.name == "scf.while":
                    v = op.operands[idx]
                else:
                    v = op.regions[0].block.ops[-1].operands[idx]
                continue
            return None
        return None

    def _sunk_constant(self, v: Value) -> Value:
        """A tile constant used only in nested regions, built in the block that uses it (once per block),
        so it joins the elementwise run there instead of holding scratchpad across the whole region."""
        key = (id(v), id(self.builder.block))
        hit = self.sunk.get(key)
        if hit is None:
            const = self.emit("nmp.const", [], [v.type], {"value": v.owner.attrs["value"]}, names=[v.name]).result
            hit = self.sunk[key] = (self.builder.block, const)  # the block is kept alive: its id stays unique
        return hit[1]

    # -- driver --------------------------------------------------------------------------------------
    def run(self) -> Func:
        body = Block()
        args = []
        for a in self.func.args:
            na = Value(a.name, a.type, body)
            body.args.append(na)
            args.append(na)
            self.vmap[id(a)] = na
        self.builder.block = body
        self.lower_block(self.func.body)
        return Func(self.func.name, args, self.func.arg_locs, body, self.func.loc)

    def lower_block(self, block: Block) -> None:
        for op in block.ops:
            self.builder.loc = op.loc if op.loc.known else self.builder.loc
            self.lower_op(op)

    def bind(self, op: Op, new: Op) -> None:
        for r, nr in zip(op.results, new.results):
            self.vmap[id(r)] = nr

    def lower_op(self, op: Op) -> None:
        name = op.name
        handler = getattr(self, "op_" + name.replace(".", "_"), None)
        if handler is not None:
            handler(op)
            return
        if name in _SIMPLE:
            attrs = _simple_attrs(op)
            if name in ("tt.get_program_id", "tt.get_num_programs"):
                attrs["axis"] = {"x": 0, "y": 1, "z": 2}[op.attrs["_words"][0]]
            new = self.emit(_SIMPLE[name], [self.get(o) for o in op.operands], [r.type for r in op.results], attrs,
                            names=[r.name for r in op.results])
            self.bind(op, new)
            return
        if name in ELEMENTWISE_OPS:
            self._elementwise(op)
            return
        hint = "see the README's list of supported operations"
        if name == "tt.elementwise_inline_asm":
            raise self.error("inline assembly (tl.inline_asm_elementwise) is not supported on nmp",
                             "write the operation with tl.* functions instead")
        raise self.error(f"operation '{name}' is not supported on nmp", hint)

    # -- specific ops ----------------------------------------------------------------------------------
    def op_arith_constant(self, op: Op) -> None:
        r = op.results[0]
        if r.type.is_tensor:
            val = op.attrs["value"]
            if isinstance(val, list):
                raise self.error("non-splat dense tensor constants are not supported yet")
            if id(r) in self.deferred:
                return  # built where it is used (`_sunk_constant`)
            new = self.emit("nmp.const", [], [r.type], {"value": val}, names=[r.name])
        else:
            new = self.emit("arith.constant", [], [r.type], {"value": op.attrs["value"]}, names=[r.name])
        self.bind(op, new)

    def op_tt_make_range(self, op: Op) -> None:
        r = op.results[0]
        new = self.emit("nmp.iota", [], [r.type], {"start": int(op.attrs.get("start", 0)), "axis": 0},
                        names=[r.name])
        self.bind(op, new)

    def op_tt_return(self, op: Op) -> None:
        if self.returns:  # the end of an inlined callee: its results replace the call's
            self.returns[-1].append([self.get(o) for o in op.operands])
            return
        if op.operands:
            raise self.error("kernels cannot return values")
        self.emit("nmp.return", [], [])

    def _guard(self, box: MaskBox) -> Value | None:
        ok = None
        for g in box.guards:
            gv = self.sexpr(g)
            c = self.emit("arith.cmpi", [gv, self.const(0)], [I1], {"pred": "sgt"}).result
            ok = c if ok is None else self.emit("arith.andi", [ok, c], [I1]).result
        return ok

    def _descriptor(self, ptr: Value, mask: Value | None, shape: tuple[int, ...]) -> tuple[list[Value], dict] | None:
        """Operands and attributes of a structured DMA descriptor for `ptr` under `mask`, or None when
        pointer or mask analysis fails (the caller falls back to gather/scatter)."""
        if ptr.type.is_ptr and ptr.type.pointee and ptr.type.pointee.startswith("tensor<"):
            raise self.error("block pointers (tl.make_block_ptr) are not supported on nmp yet",
                             "use a tensor of pointers")
        form = self.aff(ptr)
        if form is None or form.root is None or (form.index is not None and not _row_gather(form.index, shape)):
            return None
        box = self.masks(mask) if mask is not None else MaskBox((None,) * len(shape))
        if box is None:
            return None
        return self._dma_operands(form, box, shape)

    def _split_descriptor(self, ptr: Value, mask: Value | None, shape: tuple[int, ...]):
        """A DMA descriptor over the tile cut into digits (`access_split`), when the pointer's index math
        divides the tile index by aligned constants: (operands, attrs, refined shape), or None."""
        form = self.aff(ptr)
        if form is not None and form.index is None:
            return None  # affine (or not analysable as one): `_descriptor` decided
        split = self.split(ptr)
        if split is None or split.root is None:
            return None
        box = self.masks(mask) if mask is not None else MaskBox((None,) * len(shape))
        bounds = split_mask(box, split) if box is not None else None
        if bounds is None:
            return None
        refined = Affine(split.root, split.offset, split.strides)
        operands, attrs = self._dma_operands(refined, MaskBox(bounds, box.guards), split.shape)
        return operands, attrs, split.shape

    def _dma_operands(self, form: Affine, box: MaskBox, shape: tuple[int, ...]) -> tuple[list[Value], dict]:
        offset = self.sexpr(form.offset)
        index = None
        form_strides = list(form.strides)
        if form.index is not None:  # a row gather: the indexed dimension's offsets come from a tile
            axis = form.index.axis
            index = self.row_offsets(form.index, form_strides[axis], shape[axis])
            form_strides[axis] = 0
        strides = [self.sexpr(s) for s in form_strides]
        bounds = [self.sexpr(b) if b is not None else self.const(n) for b, n in zip(box.bounds, shape)]
        guard = self._guard(box)
        attrs = {"rank": len(shape), "arg": form.root.name}
        if guard is not None:
            attrs["guarded"] = True
        if index is not None:
            attrs["indexed"] = True
            attrs["index_axis"] = form.index.axis
        operands = make_operands("nmp.dma_load", attrs, base=self.get(form.root), offset=offset, strides=strides,
                                 bounds=bounds, guard=guard, index=index)
        return operands, attrs

    def _view(self, tile: Value, shape: tuple[int, ...]) -> Value:
        """`tile` (row major) with another shape of the same elements; scalars pass through."""
        if not tile.type.is_tensor or tile.type.shape == shape:
            return tile
        return self.emit("nmp.view", [tile], [dataclasses.replace(tile.type, shape=shape)]).result

    def _element_addresses(self, ptr: Value, root: Value, attrs: dict) -> dict[str, Value]:
        """The address operands of an element gather, scatter or atomic through the pointer tile `ptr`. A
        tile built from the argument by `addptr`s of integer tensors and shape ops becomes the offsets form (sets
        `scale`): a scalar byte offset plus an offsets tile in elements: the program's own index tensor
        when there is one (no new tile), else their sum, in i32 when `magnitude_bound` proves that every
        partial sum fits, else in i64. A pointer carried by a loop goes through its affine form
        (`_affine_addresses`); other pointer tiles (a `tl.where` between pointer tiles, pointers loaded
        from memory) stay a pointer tile."""
        form = self._offset_form(ptr)
        if form is None or form[0] is not root or not form[2]:
            return self._affine_addresses(ptr, root, attrs)
        _root, offset, terms = form
        ity = None
        if len(terms) > 1:
            ity = "i32" if sum(magnitude_bound(t) for t in terms) < 1 << 31 else "i64"
        attrs["scale"] = ptr.type.pointee_bytes
        return {"base": self.get(root), "offset": self._scalar_before_tiles(offset),
                "addrs": self._offsets_tile(ptr, ity)}

    def _affine_addresses(self, ptr: Value, root: Value, attrs: dict) -> dict[str, Value]:
        """Addresses of a pointer tile whose affine form has a run-time index (a pointer carried by a
        loop as a scalar offset, `_offset_form` sees no `addptr` chain): the index vector itself as
        the offsets when it is the only term, in elements; else the byte offsets (`scale` 1) in i64.
        Any other pointer tile is passed as it is."""
        form = self.aff(ptr)
        if form is None or form.root is not root or form.index is None:
            return {"base": self.get(root), "addrs": self.get(ptr)}
        size = ptr.type.pointee_bytes
        (vec, k), *more = form.index.terms
        if len(ptr.type.shape) == 1 and not more and k == size and all(st == 0 for st in form.strides):
            attrs["scale"] = size
            return {"base": self.get(root), "offset": self._scalar_before_tiles(form.offset), "addrs": self.get(vec)}
        attrs["scale"] = 1
        offset = self._scalar_before_tiles(form.offset)
        return {"base": self.get(root), "offset": offset, "addrs": self.add_form_offsets(None, form, ptr.type.shape)}

    def _scalar_before_tiles(self, e) -> Value:
        """`sexpr(e)`, its scalar ops placed before the elementwise tile ops that end the block so far:
        between them and the gather they would split the fused run that computes its operands."""
        ops = self.builder.block.ops
        n = len(ops)
        v = self.sexpr(e)
        new = ops[n:]
        del ops[n:]
        while n > 0 and ops[n - 1].name in FUSABLE_OPS and not ops[n - 1].regions:
            n -= 1
        ops[n:n] = new
        return v

    def _uniform_int(self, v: Value):
        """The scalar (an `SExpr`) every element of the integer tensor `v` holds, or None."""
        a = self.aff(v)
        return a.offset if a is not None and a.root is None and a.is_uniform else None

    def _offset_form(self, p: Value) -> tuple[Value, object, list[Value]] | None:
        """(argument, byte offset, integer tensors added in elements) of the pointer tile `p`, or None."""
        op = p.owner if isinstance(p.owner, Op) else None
        if op is None:
            return None
        if op.name == "tt.splat":
            a = self.aff(op.operands[0])
            return None if a is None or a.root is None else (a.root, a.offset, [])
        if op.name in _SHAPE_OPS:
            return self._offset_form(op.operands[0])
        if op.name != "tt.addptr":
            return None
        inner = self._offset_form(op.operands[0])
        if inner is None:
            return None
        root, offset, terms = inner
        o = op.operands[1]
        k = self._uniform_int(o)
        if k is not None:
            return root, s_add(offset, s_mul(k, p.type.pointee_bytes)), terms
        return root, offset, terms + [o]

    def _offsets_tile(self, p: Value, ity: str | None) -> Value | None:
        """The offsets tile of `_offset_form(p)`'s tensors, shaped like `p`: the one tensor as it is
        (`ity` None), else their sum in `ity`."""
        op = p.owner
        if op.name == "tt.splat":
            return None
        if op.name in _SHAPE_OPS:
            t = self._offsets_tile(op.operands[0], ity)
            if t is None:
                return None
            return self.emit(_SIMPLE[op.name], [t], [Ty(t.type.elem, p.type.shape)], _simple_attrs(op)).result
        t = self._offsets_tile(op.operands[0], ity)
        o = op.operands[1]
        if self._uniform_int(o) is not None:
            return t
        ot = self.get(o)
        ty = Ty(ity or ot.type.elem, p.type.shape)
        if ity is not None and ot.type.elem != ity:
            wider = ot.type.elem_bytes < ty.elem_bytes
            ot = self.emit("nmp.vec", [ot], [ty], {"fn": "arith.extsi" if wider else "arith.trunci"}).result
        return ot if t is None else self.emit("nmp.vec", [t, ot], [ty], {"fn": "arith.addi"}).result

    def _root_checked(self, ptr: Value, what: str) -> Value:
        root = self.root_of(ptr)
        if root is None:
            raise self.error(f"cannot tell which kernel argument this {what}",
                             "pointers must derive from a pointer argument of the kernel")
        return root

    def other_value(self, other: Value) -> Value:
        """`other` of a masked load: a splat constant becomes a scalar (no scratchpad tile for padding)."""
        op = other.owner if isinstance(other.owner, Op) else None
        if op is not None and op.name == "arith.constant" and not isinstance(op.attrs.get("value"), list):
            return self.hoisted_const(op.attrs["value"], other.type.scalar)
        if op is not None and op.name == "tt.splat":
            return self.get(op.operands[0])
        if op is not None and op.name == "arith.select" and not op.operands[0].type.is_tensor:
            # zero-or-NaN padding of a tensor descriptor (a runtime flag): a scalar choice, no tiles
            a, b = (self.other_value(o) for o in op.operands[1:])
            if not a.type.is_tensor and not b.type.is_tensor:
                return self.emit("arith.select", [self.get(op.operands[0]), a, b], [a.type]).result
        return self.get(other)

    def op_tt_load(self, op: Op) -> None:
        ptr = op.operands[0]
        mask = op.operands[1] if len(op.operands) > 1 else None
        other = op.operands[2] if len(op.operands) > 2 else None
        r = op.results[0]
        split = self._split_descriptor(ptr, mask, r.type.shape)
        if split is not None:  # a DMA into the tile cut into digits, viewed back as the tile
            operands, attrs, refined = split
            if other is not None:
                operands.append(self._view(self.other_value(other), refined))
                attrs["has_other"] = True
            tile = self.emit("nmp.dma_load", operands, [dataclasses.replace(r.type, shape=refined)], attrs).result
            self.bind(op, self.emit("nmp.view", [tile], [r.type], names=[r.name]))
            return
        desc = self._descriptor(ptr, mask, r.type.shape)
        if desc is not None:  # the address part of a DMA descriptor: base offset strides bounds guard?
            name, (operands, attrs) = "nmp.dma_load", desc
        else:
            root = self._root_checked(ptr, "load reads from")
            name, attrs = "nmp.gather", {"arg": root.name}
            if mask is not None:
                attrs["has_mask"] = True
            operands = make_operands(name, attrs, **self._element_addresses(ptr, root, attrs),
                                     mask=self.get(mask) if mask is not None else None)
        if other is not None:  # last in both layouts
            operands.append(self.other_value(other))
            attrs["has_other"] = True
        self.bind(op, self.emit(name, operands, [r.type], attrs, names=[r.name]))

    def op_tt_store(self, op: Op) -> None:
        ptr, value = op.operands[0], op.operands[1]
        mask = op.operands[2] if len(op.operands) > 2 else None
        split = self._split_descriptor(ptr, mask, value.type.shape)
        if split is not None:
            operands, attrs, refined = split
            self.emit("nmp.dma_store", operands + [self._view(self.get(value), refined)], [], attrs)
            return
        desc = self._descriptor(ptr, mask, value.type.shape)
        if desc is not None:
            operands, attrs = desc
            self.emit("nmp.dma_store", operands + [self.get(value)], [], attrs)  # value follows the address part
            return
        root = self._root_checked(ptr, "store writes to")
        attrs = {"arg": root.name}
        if mask is not None:
            attrs["has_mask"] = True
        operands = make_operands("nmp.scatter", attrs, **self._element_addresses(ptr, root, attrs),
                                 value=self.get(value), mask=self.get(mask) if mask is not None else None)
        self.emit("nmp.scatter", operands, [], attrs)

    def _lower_region_into(self, region: Region, block: Block) -> None:
        saved = self.builder.block
        self.builder.block = block
        self.lower_block(region.block)
        self.builder.block = saved

    def op_scf_yield(self, op: Op) -> None:
        self.emit("scf.yield", [self.get(o) for o in op.operands], [])

    def op_scf_condition(self, op: Op) -> None:
        self.emit("scf.condition", [self.get(o) for o in op.operands], [])

    def op_tt_reduce_return(self, op: Op) -> None:
        self.emit("nmp.yield", [self.get(o) for o in op.operands], [])

    op_tt_scan_return = op_tt_reduce_return

    def op_scf_if(self, op: Op) -> None:
        cond = self.get(op.operands[0])
        regions = []
        for region in op.regions:
            b = Block()
            self._lower_region_into(region, b)
            if not b.ops or b.ops[-1].name != "scf.yield":
                Builder(b, self.builder.loc).op("scf.yield")
            regions.append(Region([b]))
        new = self.emit("scf.if", [cond], [r.type for r in op.results], {}, regions,
                        names=[r.name for r in op.results])
        self.bind(op, new)

    def op_scf_while(self, op: Op) -> None:
        inits = [self.get(o) for o in op.operands]
        before, after = op.regions
        # provenance for gathers/scatters through the loop: a carried pointer derives from its init,
        # an after-region argument from what the condition forwards
        for a, init in zip(before.block.args, op.operands):
            self.block_arg_init[id(a)] = init
        for a, fwd in zip(after.block.args, before.block.ops[-1].operands[1:]):
            self.block_arg_init[id(a)] = fwd
        bb = Block()
        for a, iv in zip(before.block.args, inits):
            na = bb.add_arg(a.name, iv.type)
            self.vmap[id(a)] = na
        self._lower_region_into(before, bb)
        ab = Block()
        for a in after.block.args:
            self.vmap[id(a)] = ab.add_arg(a.name, a.type)
        self._lower_region_into(after, ab)
        new = self.emit("scf.while", inits, [r.type for r in op.results], {},
                        [Region([bb]), Region([ab])], names=[r.name for r in op.results])
        self.bind(op, new)

    def _reduce_like(self, op: Op, new_name: str) -> None:
        inputs = [self.get(o) for o in op.operands]
        region = op.regions[0]
        b = Block()
        for a in region.block.args:
            self.vmap[id(a)] = b.add_arg(a.name, a.type)
        self._lower_region_into(region, b)
        attrs = {"axis": int(op.attrs.get("axis", 0))}
        if "reverse" in op.attrs:
            attrs["reverse"] = bool(op.attrs["reverse"])
        new = self.emit(new_name, inputs, [r.type for r in op.results], attrs, [Region([b])],
                        names=[r.name for r in op.results])
        self.bind(op, new)

    def op_tt_reduce(self, op: Op) -> None:
        self._reduce_like(op, "nmp.reduce")

    def op_scf_for(self, op: Op) -> None:
        lb, ub, step = (self.get(o) for o in op.operands[:3])
        inits = op.operands[3:]
        body = op.regions[0].block
        iv, bargs = body.args[0], body.args[1:]
        yield_op = body.ops[-1]
        modes: list[tuple[str, Affine | None]] = []
        for i, (init, barg) in enumerate(zip(inits, bargs)):
            self.block_arg_init[id(barg)] = init
            mode: tuple[str, Affine | None] = ("value", None)
            t = barg.type
            if t.is_tensor and (t.is_ptr or t.is_int) and t.elem != "i1":
                a0 = self.aff(init)
                if a0 is not None:
                    key_in = ("for_in", id(op), i)
                    before = set(self.aff.memo)
                    self.aff.assume(barg, Affine(a0.root, ("sym", key_in), a0.strides, a0.index))
                    ay = self.aff(yield_op.operands[i])
                    if ay is not None and ay.root is a0.root and ay.strides == a0.strides and ay.index == a0.index:
                        mode = ("affine", a0)
                    else:
                        for k in set(self.aff.memo) - before:
                            del self.aff.memo[k]
                        self.aff.forget(barg)
                        self.masks.memo.clear()
            modes.append(mode)
        new_inits = []
        carried_rows: list[tuple] = []
        for (mode, a0), init in zip(modes, inits):
            new_inits.append(self.sexpr(a0.offset) if mode == "affine" else self.get(init))
            if mode == "affine" and a0.index is not None and _row_gather(a0.index, init.type.shape):
                # a row-gathered pointer carried by the loop: its row offsets are invariant, built here once
                stride = a0.strides[a0.index.axis]
                key = (a0.index, stride)
                if key not in self.row_offset_tiles:
                    self.row_offset_tiles[key] = self.row_offsets(a0.index, stride, init.type.shape[a0.index.axis])
                    carried_rows.append(key)
        nb = Block()
        self.vmap[id(iv)] = nb.add_arg(iv.name, lb.type)
        for i, ((mode, _a0), barg) in enumerate(zip(modes, bargs)):
            if mode == "affine":
                self.syms[("for_in", id(op), i)] = nb.add_arg(barg.name + "_off", I64)
            else:
                self.vmap[id(barg)] = nb.add_arg(barg.name, new_inits[i].type)
        saved = self.builder.block
        self.builder.block = nb
        for inner in body.ops[:-1]:
            self.builder.loc = inner.loc if inner.loc.known else self.builder.loc
            self.lower_op(inner)
        yields = []
        for i, (mode, _a0) in enumerate(modes):
            yv = yield_op.operands[i]
            yields.append(self.sexpr(self.aff(yv).offset) if mode == "affine" else self.get(yv))
        self.emit("scf.yield", yields, [])
        self.builder.block = saved
        for key in carried_rows:
            del self.row_offset_tiles[key]
        self.builder.loc = op.loc if op.loc.known else self.builder.loc
        new = self.emit("scf.for", [lb, ub, step, *new_inits], [v.type for v in new_inits], {}, [Region([nb])],
                        names=[r.name for r in op.results])
        for i, ((mode, a0), r) in enumerate(zip(modes, op.results)):
            if mode == "affine":
                key_out = ("for_out", id(op), i)
                self.syms[key_out] = new.results[i]
                self.aff.assume(r, Affine(a0.root, ("sym", key_out), a0.strides, a0.index))
                self.block_arg_init[id(r)] = inits[i]
            else:
                self.vmap[id(r)] = new.results[i]


def _row_gather(index: RowIndex, shape: tuple[int, ...]) -> bool:
    """Whether an access with a run-time index becomes a row gather (one DMA per run of rows): the tile
    has rows of more than one element. A 1-D index (each element its own row) stays an element gather."""
    rest = 1
    for d, n in enumerate(shape):
        if d != index.axis:
            rest *= n
    return len(shape) >= 2 and rest > 1


def _nested_only_constants(func: Func) -> set[int]:
    """Splat tile constants whose every use sits in a nested region, never in the defining block.
    MLIR hoists constants to the function entry; e.g. the tf32-rounding branch of a host tensor
    descriptor load uses five block-sized constants that would otherwise be live for the whole kernel."""
    defined: dict[int, Block] = {}
    used_in: dict[int, set[int]] = {}

    def visit(block: Block) -> None:
        for op in block.ops:
            if op.name == "arith.constant" and op.results[0].type.is_tensor:
                defined[id(op.results[0])] = block
            for o in op.operands:
                used_in.setdefault(id(o), set()).add(id(block))
            for region in op.regions:
                for b in region.blocks:
                    visit(b)

    visit(func.body)
    return {k for k, b in defined.items() if used_in.get(k) and id(b) not in used_in[k]}


def lower_to_nmpir(mod: Module) -> Module:
    """TTIR module -> nmpir module (the `ttir-to-nmpir` pass of `pipeline`; not yet verified or cleaned)."""
    callees = {f.name: f for f in mod.funcs if f is not mod.kernel}
    return Module([Lowering(mod.kernel, callees).run()])

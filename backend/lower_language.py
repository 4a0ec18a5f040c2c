"""TTIR -> nmpir lowering of the wider Triton language (atomics, scans, tensor descriptors, ...).

A mixin of `lower_nmpir.Lowering`: each `op_<dialect>_<name>` method lowers one TTIR op. Kept apart
from the core conversion so the core (access analysis, loops, DMA) stays small.
"""

from __future__ import annotations

from .ir import Block, Builder, Op, Region, Value
from .ops import make_operands


class LanguageLowering:
    """Lowering rules for ops beyond the core set; methods are looked up by op name."""

    # -- helpers ------------------------------------------------------------------------------------
    def _elementwise(self, op: Op, fn: str | None = None, extra: dict | None = None):
        """Lower `op` as an elementwise op (`nmp.vec` on tiles, the scalar op itself on scalars)."""
        name = fn or op.name
        res_ty = op.results[0].type
        attrs = {"fn": name}
        words = op.attrs.get("_words") or []
        if words:
            attrs["pred"] = words[0]
        for k in ("rounding", "propagateNan", "symbol"):
            if k in op.attrs:
                attrs[k] = op.attrs[k]
        if name == "tt.addptr":
            attrs["elem_bytes"] = res_ty.pointee_bytes
        attrs.update(extra or {})
        if res_ty.is_tensor:
            operands = [self.vec_operand(o) for o in op.operands]
            new = self.emit("nmp.vec", operands, [res_ty], attrs, names=[op.results[0].name])
        else:
            attrs.pop("fn")
            scalar_name = "nmp.addptr" if name == "tt.addptr" else name
            new = self.emit(scalar_name, [self.get(o) for o in op.operands], [res_ty], attrs,
                            names=[op.results[0].name])
        self.bind(op, new)
        return new

    # -- casts ----------------------------------------------------------------------------------------
    def op_tt_bitcast(self, op: Op) -> None:
        """Pointer bitcasts (Triton stores `bool` through `*i8`) keep the access analysable: the
        result has the source's byte-addressed affine form and derives from the same argument."""
        src, res = op.operands[0], op.results[0]
        self._elementwise(op)
        if src.type.is_ptr and res.type.is_ptr:
            form = self.aff(src)
            if form is not None:
                self.aff.assume(res, form)
            self.block_arg_init[id(res)] = src

    # -- shape ops -----------------------------------------------------------------------------------
    def _tile_op(self, op: Op, name: str, attrs: dict | None = None):
        new = self.emit(name, [self.get(o) for o in op.operands], [r.type for r in op.results], attrs or {},
                        names=[r.name for r in op.results])
        self.bind(op, new)
        return new

    def op_tt_join(self, op: Op) -> None:
        self._tile_op(op, "nmp.join")

    def op_tt_split(self, op: Op) -> None:
        self._tile_op(op, "nmp.split")

    def op_tt_cat(self, op: Op) -> None:
        self._tile_op(op, "nmp.cat")

    def op_tt_gather(self, op: Op) -> None:
        self._tile_op(op, "nmp.tile_gather", {"axis": int(op.attrs.get("axis", 0))})

    def op_tt_histogram(self, op: Op) -> None:
        self._tile_op(op, "nmp.histogram", {"has_mask": len(op.operands) > 1})

    # -- scans -----------------------------------------------------------------------------------------
    def op_tt_scan(self, op: Op) -> None:
        self._reduce_like(op, "nmp.scan")

    # -- dot -------------------------------------------------------------------------------------------
    def op_tt_dot(self, op: Op) -> None:
        """2-D dots of f32/f16/bf16/int8 go to the core's `nmp.matmul`; batched (3-D) and f64 dots to
        `nmp.bmatmul`. `input_precision` (tf32, tf32x3, bf16x3, ...) is accepted and computed in full
        precision, like the interpreter."""
        res = op.results[0]
        attrs = {k: v for k, v in op.attrs.items() if k in ("inputPrecision", "maxNumImpreciseAcc")}
        simple = len(res.type.shape) == 2 and "f64" not in (res.type.elem, op.operands[0].type.elem)
        self._tile_op(op, "nmp.matmul" if simple else "nmp.bmatmul", attrs)

    # -- atomics ---------------------------------------------------------------------------------------
    def _atomic_root(self, op: Op, what: str):
        root = self.root_of(op.operands[0])
        if root is None:
            raise self.error(f"cannot tell which kernel argument this {what} updates",
                             "pointers must derive from a pointer argument of the kernel")
        return root

    def op_tt_atomic_rmw(self, op: Op) -> None:
        """`tl.atomic_*`: every program runs to completion in turn on the simulator, so an atomic is a
        checked read-modify-write per element, in element order; the result is the old values. Its
        addresses are those of an element scatter (`_element_addresses`: the argument plus an offsets
        tile when the pointer tile is built from it by `addptr`s); `sem` and `scope` change nothing here."""
        kind = (op.attrs.get("_words") or ["?"])[0]
        self._emit_atomic(op, kind, op.operands[0], None, op.operands[1],
                          op.operands[2] if len(op.operands) > 2 else None)

    def op_tt_atomic_cas(self, op: Op) -> None:
        ptr, cmp, val = op.operands
        self._emit_atomic(op, "cas", ptr, cmp, val, None)

    def _emit_atomic(self, op: Op, kind: str, ptr: Value, cmp: Value | None, val: Value, mask: Value | None) -> None:
        root = self._atomic_root(op, "atomic_cas" if kind == "cas" else f"atomic {kind}")
        attrs = {"kind": kind, "arg": root.name}
        if mask is not None:
            attrs["has_mask"] = True
        operands = make_operands("nmp.atomic", attrs, **self._element_addresses(ptr, root, attrs),
                                 cmp=self.get(cmp) if cmp is not None else None, value=self.get(val),
                                 mask=self.get(mask) if mask is not None else None)
        res = op.results[0]
        new = self.emit("nmp.atomic", operands, [res.type], attrs, names=[res.name])
        self.bind(op, new)

    # -- unstructured control flow (early returns) -------------------------------------------------------
    def _cfg_target(self, label: str):
        blocks = getattr(self.cfg_owner, "cfg_blocks", {}) or {}
        if label not in blocks:
            raise self.error(f"branch to unknown block {label}")
        return blocks[label]

    def _enter_block(self, label: str, args: list) -> object:
        """Bind a successor block's arguments to the branch operands; returns the TTIR block."""
        target = self._cfg_target(label)
        for a, v in zip(target.args, args):
            self.vmap[id(a)] = self.get(v)
            self.block_arg_init[id(a)] = v
            self.aff.forget(a)
        self.masks.memo.clear()
        return target

    def _successor_args(self, op: Op, first: int):
        out, pos = [], first
        for label, n in op.attrs["successors"]:
            out.append((label, op.operands[pos:pos + n]))
            pos += n
        return out

    def op_cf_br(self, op: Op) -> None:
        """Triton emits a CFG only for early returns, so the blocks are acyclic: a branch lowers its
        target inline (a block reached from several paths is lowered once per path)."""
        ((label, args),) = self._successor_args(op, 0)
        self.lower_block(self._enter_block(label, args))

    def op_cf_cond_br(self, op: Op) -> None:
        """`cf.cond_br` -> `scf.if` whose branches hold the (inlined) successor blocks. Inside an inlined
        callee each branch ends in one of its returns, so the `scf.if` yields the callee's results."""
        cond = self.get(op.operands[0])
        regions = []
        result_types = list(self.cfg_owner.result_types) if self.returns else []
        for label, args in self._successor_args(op, 1):
            target = self._enter_block(label, args)
            blk = Block()
            saved = self.builder.block
            self.builder.block = blk
            self.lower_block(target)
            self.builder.block = saved
            values = self.returns[-1].pop() if self.returns and self.returns[-1] else []
            if len(values) != len(result_types):
                raise self.error(f"a branch of '{self.cfg_owner.name}' does not end in a return")
            Builder(blk, self.builder.loc).op("scf.yield", values)
            regions.append(Region([blk]))
        new = self.emit("scf.if", [cond], result_types, {}, regions)
        if self.returns:
            self.returns[-1].append(list(new.results))

    def op_tt_call(self, op: Op) -> None:
        """A call Triton's inliner could not inline (a callee with early returns, called inside a
        branch or loop): its body is lowered in place, its CFG structured like a kernel's."""
        callee = self.callees.get(op.attrs.get("callee", ""))
        if callee is None:
            raise self.error(f"call to an unknown function '{op.attrs.get('callee', '?')}'")
        if len(self.returns) >= 64:
            raise self.error(f"'{callee.name}' calls itself: recursion is not supported on nmp")
        for a, v in zip(callee.args, op.operands):
            self.vmap[id(a)] = self.get(v)
            self.block_arg_init[id(a)] = v  # pointer provenance through the call
            self.aff.forget(a)
        self.masks.memo.clear()
        saved_owner, self.cfg_owner = self.cfg_owner, callee
        self.returns.append([])
        try:
            self.lower_block(callee.body)
            slot = self.returns[-1]
        finally:
            self.returns.pop()
            self.cfg_owner = saved_owner
        values = slot[-1] if slot else []
        if len(values) != len(op.results):
            raise self.error(f"'{callee.name}' returns {len(values)} values, the call expects {len(op.results)}")
        for r, v in zip(op.results, values):
            self.vmap[id(r)] = v

    # -- debugging ops -------------------------------------------------------------------------------------
    def op_tt_print(self, op: Op) -> None:
        """`tl.device_print` -> `nmp.print` (printf through the C library, in Triton's GPU format)."""
        words = op.attrs.get("_words") or []
        prefix = words[0][1:-1] if words and words[0].startswith('"') else ""
        signed = op.attrs.get("isSigned") or ()
        if not isinstance(signed, tuple):
            signed = (signed,)
        attrs = {"prefix": prefix, "hex": bool(op.attrs.get("hex", False)),
                 "signed": tuple(int(x) for x in signed)}
        self.emit("nmp.print", [self.get(o) for o in op.operands], [], attrs)

    def op_llvm_intr_assume(self, op: Op) -> None:
        """`tl.assume(cond)` -> `nmp.assume`: an `llvm.assume` the optimiser may use (a false assumption is
        undefined behaviour, as on GPUs)."""
        self.emit("nmp.assume", [self.get(op.operands[0])], [], {})

    def op_tt_unsplat(self, op: Op) -> None:
        """`tl.split` down to scalars ends in `tt.unsplat`: the single element of a one-element tile."""
        new = self.emit("nmp.unsplat", [self.get(op.operands[0])], [op.results[0].type], {},
                        names=[op.results[0].name])
        self.bind(op, new)

    def op_ttg_barrier(self, op: Op) -> None:
        """`tl.debug_barrier()`: a program is one sequential instruction stream on its PU, so every
        earlier access of the program is complete already; nothing to emit."""

    def op_tt_assert(self, op: Op) -> None:
        """`tl.device_assert` (compiled with debug=True) -> `nmp.assert`: the kernel stops with status
        STATUS_ASSERT and the runtime raises NMPDeviceAssertError quoting the message and the line."""
        words = op.attrs.get("_words") or []
        msg = words[0][1:-1] if words and words[0].startswith('"') else ""
        self.emit("nmp.assert", [self.get(op.operands[0])], [], {"msg": msg})

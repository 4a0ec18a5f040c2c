"""LLVM codegen for the nmpir ops of the wider Triton language (atomics, scans, asserts, ...).

A mixin of `codegen.KernelCodegen` (on `codegen_base.CodegenBase`): each `op_nmp_<name>` method emits
one nmpir op.
"""

from __future__ import annotations

import math

from llvmlite import ir

from triton_nmp.abi import (
    KIND_GATHER,
    KIND_MATMUL,
    KIND_SCATTER,
    KIND_VEC,
    STATUS_ASSERT,
    dtype_code,
)
from triton_nmp.opclass import OP_ALU, region_class

from .codegen_base import CodegenBase, _const, _i64, _prod
from .codegen_scalar import I1, I32, I64, storage_type
from .ir import Op, Value, row_major
from .ops import Operands


class LanguageCodegen(CodegenBase):
    """Codegen rules for ops beyond the core set; methods are looked up by op name."""

    # -- helpers -------------------------------------------------------------------------------------
    def _raw_copy(self, dst: Value, di: ir.Value, src: Value, si: ir.Value) -> None:
        """Copy one element between tile buffers in storage form (same element type)."""
        b = self.b
        b.store(b.load(b.gep(self.buffer(src), [si])), b.gep(self.buffer(dst), [di]))

    def _assert_site(self, op: Op, msg: str) -> int:
        idx = self.site(op)
        self.sites[idx].msg = msg
        return idx

    def _charge(self, n: int, elem: str, reduce_like: bool = False, cls: int = OP_ALU, accesses: int = 2) -> None:
        """Account n elements of vector-unit work (counter and trace record), like the core's tile ops:
        by default one ALU op and a load and a store per element (data movement: join, split, cat)."""
        self.count("vec_elems", _i64(n))
        self.trace(KIND_VEC, [n, 1 if reduce_like else 0, dtype_code(elem), cls, accesses])

    def _dummy_scalars(self, op: Op) -> None:
        for r in op.results:
            if not r.type.is_tensor:
                self.vals[id(r)] = _const(r.type, 0)

    # -- shape ops -----------------------------------------------------------------------------------
    def _interleave(self, pairs: Value, halves: tuple[Value, Value], to_pairs: bool) -> None:
        """pairs[2i + k] <-> halves[k][i] for every i: join (halves -> pairs) and split (pairs -> halves)."""
        b = self.b

        def body(i):
            for k, half in enumerate(halves):
                at = b.mul(i, _i64(2)) if k == 0 else b.add(b.mul(i, _i64(2)), _i64(1))
                if to_pairs:
                    self._raw_copy(pairs, at, half, i)
                else:
                    self._raw_copy(half, i, pairs, at)

        self.loop(halves[0].type.numel, body)

    def op_nmp_join(self, op: Op) -> None:
        a, c = op.operands
        r = op.result
        self._charge(r.type.numel, r.type.elem)
        if self.timing_only:
            return
        if a.type.is_tensor:
            self._interleave(r, (a, c), to_pairs=True)
        else:
            self.store_elem(r, _i64(0), self.scalar(a))
            self.store_elem(r, _i64(1), self.scalar(c))

    def op_nmp_split(self, op: Op) -> None:
        (x,) = op.operands
        r0, r1 = op.results
        self._charge(x.type.numel, x.type.elem)
        if self.timing_only:
            self._dummy_scalars(op)
            return
        if not r0.type.is_tensor:
            self.vals[id(r0)] = self.load_elem(x, _i64(0))
            self.vals[id(r1)] = self.load_elem(x, _i64(1))
            return
        self._interleave(x, (r0, r1), to_pairs=False)

    def op_nmp_cat(self, op: Op) -> None:
        a, c = op.operands
        r = op.result
        b = self.b
        self._charge(r.type.numel, r.type.elem)
        if self.timing_only:
            return
        na = a.type.numel
        self.loop(na, lambda i: self._raw_copy(r, i, a, i))
        self.loop(c.type.numel, lambda i: self._raw_copy(r, b.add(i, _i64(na)), c, i))

    def op_nmp_tile_gather(self, op: Op) -> None:
        src, idx = op.operands
        r = op.result
        axis = op.attrs["axis"]
        b = self.b
        sshape = src.type.shape
        s_strides = row_major(sshape)
        r_strides = row_major(r.type.shape)
        n_axis = sshape[axis]
        site = self._assert_site(op, f"tl.gather index out of range [0, {n_axis}) along axis {axis}")
        self._charge(r.type.numel, r.type.elem)
        if self.timing_only:
            return

        def body(ix):
            flat = self._flat(ix, r_strides)
            k = self.load_elem(idx, flat)
            k64 = b.sext(k, I64) if k.type.width < 64 else k
            bad = b.icmp_unsigned(">=", k64, _i64(n_axis))
            self.fail_if(bad, STATUS_ASSERT, site, 0, k64, _i64(n_axis))
            sidx = list(ix)
            sidx[axis] = k64
            self._raw_copy(r, flat, src, self._flat(sidx, s_strides))

        self.loop_nest(r.type.shape, body)

    def op_nmp_histogram(self, op: Op) -> None:
        x, mask = Operands(op).input, Operands(op).mask
        r = op.result
        nbins = r.type.numel
        b = self.b
        self._charge(x.type.numel, "i32", reduce_like=True)
        if self.timing_only:
            return
        st = storage_type(r.type)
        zero = ir.Constant(st, 0)
        self.loop(nbins, lambda i: b.store(zero, b.gep(self.buffer(r), [i])))

        def body(i):
            v = self.load_elem(x, i)
            v64 = b.sext(v, I64) if v.type.width < 64 else v
            ok = b.icmp_unsigned("<", v64, _i64(nbins))
            if mask is not None:
                ok = b.and_(ok, self._elem(mask, i))
            with b.if_then(ok):
                p = b.gep(self.buffer(r), [v64])
                b.store(b.add(b.load(p), ir.Constant(st, 1)), p)

        self.loop(x.type.numel, body)


    # -- batched / f64 dot ---------------------------------------------------------------------------------
    def op_nmp_bmatmul(self, op: Op) -> None:
        """C[b] = A[b] @ B[b] + acc[b] for 2-D or 3-D tiles, accumulating in registers in the result's
        compute type (f32 for f16/bf16/f32, f64, or the integer type for int8/int32 dots)."""
        a, bm, acc = op.operands
        r = op.result
        shape = r.type.shape
        batch = shape[0] if len(shape) == 3 else 1
        m, n = shape[-2:]
        k = a.type.shape[-1]
        b = self.b
        from .codegen_scalar import compute_type

        ct = compute_type(r.type)
        is_int = isinstance(ct, ir.IntType)
        self.count("macs", _i64(batch * m * n * k))
        for _ in range(1):
            self.trace(KIND_MATMUL, [m * batch, n, k, dtype_code(a.type.elem)])
        if self.timing_only:
            return

        def widen(v):
            if is_int:
                return b.sext(v, ct) if v.type.width < ct.width else v
            return b.fpext(v, ct) if v.type != ct else v

        def cell(bi, i, j):
            oi = b.add(b.add(b.mul(bi, _i64(m * n)), b.mul(i, _i64(n))), j)
            start = widen(self.load_elem(acc, oi)) if acc.type.is_tensor else widen(self.scalar(acc))

            def step(kk, sums):
                av = widen(self.load_elem(a, b.add(b.add(b.mul(bi, _i64(m * k)), b.mul(i, _i64(k))), kk)))
                bv = widen(self.load_elem(bm, b.add(b.add(b.mul(bi, _i64(k * n)), b.mul(kk, _i64(n))), j)))
                if is_int:
                    return [b.add(sums[0], b.mul(av, bv))]
                from .codegen_scalar import _intrinsic

                return [_intrinsic(b, "fma", [av, bv, sums[0]])]

            (s,) = self._carried_loop("dot_k", 0, k, [start], step)
            self.store_elem(r, oi, s)

        self.loop_nest((batch, m, n), lambda ix: cell(*ix))

    # -- atomics -------------------------------------------------------------------------------------------
    _ATOMIC_LABEL = {"add": "tl.atomic_add", "fadd": "tl.atomic_add", "max": "tl.atomic_max", "umax": "tl.atomic_max",
                     "min": "tl.atomic_min", "umin": "tl.atomic_min", "and": "tl.atomic_and", "or": "tl.atomic_or",
                     "xor": "tl.atomic_xor", "exch": "tl.atomic_xchg", "xchg": "tl.atomic_xchg", "cas": "tl.atomic_cas"}

    def _atomic_update(self, kind: str, old: ir.Value, v: ir.Value, ty) -> ir.Value:
        b = self.b
        from .codegen_scalar import _intrinsic, round_to

        if kind == "fadd":
            return round_to(b, b.fadd(old, v), ty)
        if kind == "add":
            return b.add(old, v)
        if kind in ("and", "or", "xor"):
            return getattr(b, {"and": "and_", "or": "or_", "xor": "xor"}[kind])(old, v)
        if kind in ("exch", "xchg"):
            return v
        if kind in ("max", "min", "umax", "umin"):
            if isinstance(old.type, ir.IntType):
                name = {"max": "smax", "min": "smin", "umax": "umax", "umin": "umin"}[kind]
                return _intrinsic(b, name, [old, v])
            return _intrinsic(b, "maxnum" if kind == "max" else "minnum", [old, v])
        raise NotImplementedError(f"atomic operation '{kind}'")

    def _atomic_parts(self, op: Op):
        """(elements, per-element read-modify-write, epilogue), so a fused run can end in an atomic."""
        kind = op.attrs["kind"]
        at = Operands(op)
        root, cmp, val, mask = at.base, at.cmp, at.value, at.mask
        address = self._element_address(op)
        r = op.result
        b = self.b
        st = storage_type(r.type)
        esize = r.type.elem_bytes
        index, _, span = self.arg_info[id(root)]
        site = self.site(op, root.name)
        self.sites[site].op = self._ATOMIC_LABEL.get(kind, "tl.atomic_" + kind)
        n = r.type.numel if r.type.is_tensor else 1
        scalar = not r.type.is_tensor
        tile = Value(r.name + "_old", r.type.with_shape((1,))) if scalar else r
        keep_old = scalar or self._users().get(id(r), 0) > 0  # unread old values get no buffer
        from .codegen_scalar import to_compute, to_storage

        def body(i):
            m = self._elem(mask, i) if mask is not None else ir.Constant(I1, 1)
            with b.if_else(m) as (then, otherwise):
                with then:
                    addr = address(i)
                    self._elem_check(op, root, addr, esize, site)
                    p = b.inttoptr(addr, st.as_pointer())
                    old = to_compute(b, b.load(p), r.type)
                    v = self._elem(val, i)
                    if kind == "cas":
                        c = self._elem(cmp, i)
                        if isinstance(old.type, ir.IntType):
                            eq = b.icmp_signed("==", old, c)
                        else:  # compare the stored bits, like the hardware
                            ity = ir.IntType(esize * 8)
                            eq = b.icmp_signed("==", b.bitcast(b.load(p), ity),
                                               b.bitcast(to_storage(b, c, r.type), ity))
                        new = b.select(eq, v, old)
                    else:
                        new = self._atomic_update(kind, old, v, r.type)
                    b.store(to_storage(b, new, r.type), p)
                    if keep_old:
                        self.store_elem(tile, i, old)
                with otherwise:
                    if keep_old:
                        b.store(ir.Constant(st, 0), b.gep(self.buffer(tile), [i]))

        def finish():
            self.count("gather_elems", _i64(n))
            self.count("scatter_elems", _i64(n))
            self.trace(KIND_GATHER, [index, 0, n, esize, span])
            self.trace(KIND_SCATTER, [index, 0, n, esize, span])
            if scalar:
                self.vals[id(r)] = _const(r.type, 0) if self.timing_only else self.load_elem(tile, _i64(0))

        return n, body, finish

    # -- debugging ops -------------------------------------------------------------------------------------
    def _cstring(self, text: str) -> ir.Value:
        """A pointer to a NUL-terminated constant string in the module."""
        data = bytearray(text.encode("utf-8")) + b"\0"
        cache = self.__dict__.setdefault("_cstrings", {})
        g = cache.get(text)
        if g is None:
            ty = ir.ArrayType(ir.IntType(8), len(data))
            g = ir.GlobalVariable(self.module, ty, name=f"nmp_str_{len(cache)}")
            g.global_constant = True
            g.linkage = "internal"
            g.initializer = ir.Constant(ty, data)
            cache[text] = g
        return self.b.bitcast(g, ir.IntType(8).as_pointer())

    def _libc(self, name: str, ret: ir.Type, args: list[ir.Type], var_arg: bool = False) -> ir.Function:
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, args, var_arg=var_arg), name)
        return fn

    def op_nmp_print(self, op: Op) -> None:
        """Triton's device_print format, one line per element and operand:
        `pid (x, y, z) idx (i, j)<prefix>[(operand k) ]<value>`."""
        b = self.b
        i8p = ir.IntType(8).as_pointer()
        printf = self._libc("printf", I32, [i8p], var_arg=True)
        fflush = self._libc("fflush", I32, [i8p])
        prefix = op.attrs.get("prefix", "")
        hex_ = op.attrs.get("hex", False)
        signed = list(op.attrs.get("signed", ()))
        pids = [b.trunc(p, I32) for p in self.pids]
        if self.timing_only:
            return
        if not op.operands:
            b.call(printf, [self._cstring("pid (%u, %u, %u)" + prefix + "\n"), *pids])
            b.call(fflush, [ir.Constant(i8p, None)])
            return
        for k, v in enumerate(op.operands):
            is_signed = bool(signed[k]) if k < len(signed) else True
            self._print_operand(v, k, len(op.operands), prefix, hex_, is_signed, printf, pids)
        b.call(fflush, [ir.Constant(i8p, None)])

    def _print_operand(self, v: Value, k: int, nops: int, prefix: str, hex_: bool, is_signed: bool,
                       printf: ir.Function, pids: list[ir.Value]) -> None:
        from .codegen_scalar import F64, to_storage

        b = self.b
        i8p = ir.IntType(8).as_pointer()
        t = v.type
        shape = t.shape
        widths = [max(0, math.ceil(math.log10(d))) if d > 0 else 0 for d in shape]
        fmt = "pid (%u, %u, %u) idx (" + ", ".join(f"%{w}u" for w in widths) + ")" + prefix
        if nops > 1:
            fmt += f"(operand {k}) "
        bits = 64 if t.is_ptr else t.bits
        if t.is_ptr:
            fmt += "%p"
        elif hex_:
            fmt += f"0x%0{max(bits // 4, 1)}{'ll' if bits > 32 else ''}x"
        elif t.is_float:
            fmt += "%f"
        elif bits == 64:
            fmt += "%lli" if is_signed else "%llu"
        else:
            fmt += "%i" if is_signed and t.elem != "i1" else "%u"
        cfmt = self._cstring(fmt + "\n")

        def value_arg(x):
            if t.is_ptr:
                return b.inttoptr(x, i8p)
            if hex_:
                if t.is_float:
                    x = to_storage(b, x, t)
                    x = b.bitcast(x, ir.IntType(bits)) if not isinstance(x.type, ir.IntType) else x
                return b.zext(x, I32) if bits < 32 else x
            if t.is_float:
                return b.fpext(x, F64) if x.type != F64 else x
            if bits < 32:
                return b.sext(x, I32) if is_signed and t.elem != "i1" else b.zext(x, I32)
            return x

        def emit_elem(flat, idx):
            x = self._elem(v, flat)
            b.call(printf, [cfmt, *pids, *[b.trunc(i, I32) for i in idx], value_arg(x)])

        if t.is_tensor:
            strides = row_major(shape)
            self.loop_nest(shape, lambda ix: emit_elem(self._flat(ix, strides), ix))
        else:
            emit_elem(_i64(0), [])

    def op_nmp_unsplat(self, op: Op) -> None:
        self.vals[id(op.result)] = self.load_elem(op.operands[0], _i64(0))

    def op_nmp_assume(self, op: Op) -> None:
        """`llvm.assume` on a scalar condition; tensor conditions and the timing-only variant (whose
        values may not be computed) assume nothing."""
        (cond,) = op.operands
        if self.timing_only or cond.type.is_tensor:
            return
        fn = self.module.globals.get("llvm.assume") or ir.Function(
            self.module, ir.FunctionType(ir.VoidType(), [I1]), "llvm.assume")
        self.b.call(fn, [self.scalar(cond)])

    def op_nmp_assert(self, op: Op) -> None:
        (cond,) = op.operands
        site = self._assert_site(op, op.attrs.get("msg", ""))
        b = self.b
        if self.timing_only:
            return
        if not cond.type.is_tensor:
            c = self.scalar(cond)
            self.fail_if(b.not_(c), STATUS_ASSERT, site, 0, _i64(0), _i64(0))
            return

        def body(i):
            c = self.load_elem(cond, i)
            self.fail_if(b.not_(c), STATUS_ASSERT, site, 0, i, i)

        self.loop(cond.type.numel, body)

    # -- scans -----------------------------------------------------------------------------------------
    def op_nmp_scan(self, op: Op) -> None:
        """Inclusive scan along `axis` with the op's combine region (several operands scan together);
        `reverse` scans from the end: out[n-1] = x[n-1], out[k] = combine(out[k+1], x[k])."""
        inputs = op.operands
        shape = inputs[0].type.shape
        axis = op.attrs["axis"]
        reverse = bool(op.attrs.get("reverse", False))
        outer, n = _prod(shape[:axis]), shape[axis]
        inner = _prod(shape[axis + 1:])
        region = op.regions[0].block
        combine = self._combiner(region, [x.type.elem for x in inputs])
        b = self.b
        self._charge(_prod(shape), inputs[0].type.elem, reduce_like=True, cls=region_class(region),
                     accesses=2 * len(inputs))
        if self.timing_only:
            return

        def at(o, k, i):
            return b.add(b.add(b.mul(o, _i64(n * inner)), b.mul(k, _i64(inner))), i)

        def position(o, i):
            first = _i64(n - 1 if reverse else 0)
            accs = []
            for x, r in zip(inputs, op.results):
                v = self.load_elem(x, at(o, first, i))
                self.store_elem(r, at(o, first, i), v)
                accs.append(v)

            def step(kk, phis):
                k = b.sub(_i64(n - 1), kk) if reverse else kk
                new = combine(phis, [self.load_elem(x, at(o, k, i)) for x in inputs])
                for r, v in zip(op.results, new):
                    self.store_elem(r, at(o, k, i), v)
                return new

            self._carried_loop("scan", 1, n, accs, step)

        self.loop(outer, lambda o: self.loop(inner, lambda i: position(o, i)))






__all__ = ["LanguageCodegen", "I1", "I32"]

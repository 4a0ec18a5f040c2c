"""LLVM codegen of nmpir control flow (`scf.for`, `scf.if`, `scf.while`): scalar loop-carried values
live in phis, tiles in their scratchpad buffers (yields copy into the carried buffer when it differs).
"""

from __future__ import annotations

from .codegen_base import CodegenBase, carried_range, open_loop
from .codegen_scalar import compute_type
from .ir import Op, Value
from .ops import Operands


class ControlFlowCodegen(CodegenBase):
    """`scf.for`, `scf.if`, `scf.while` (see the module docstring)."""

    def op_scf_for(self, op: Op) -> None:
        at = Operands(op)
        lb, ub, step = (self.scalar(o) for o in (at.lb, at.ub, at.step))
        body = op.regions[0].block
        iv, bargs = body.args[0], body.args[1:]
        for barg, init in zip(bargs, at.inits):
            if barg.type.is_tensor:
                self.copy_tile(barg, init)
        scalars = [(barg, self.scalar(init)) for barg, init in zip(bargs, at.inits) if not barg.type.is_tensor]
        with carried_range(self.b, self.fn, "for", lb, ub, [v for _, v in scalars], step) as loop:
            for (barg, _), phi in zip(scalars, loop.values):
                self.vals[id(barg)] = phi
            self.vals[id(iv)] = loop.index
            self.loops.append((loop.index, lb))
            self.emit_block(body.ops[:-1])
            self.loops.pop()
            yields = body.ops[-1].operands
            self._copy_yields(bargs, yields)
            self.watchdog_tick(op)
            loop.carry([self.scalar(y) for barg, y in zip(bargs, yields) if not barg.type.is_tensor])
        after = iter(loop.values)
        for r, barg in zip(op.results, bargs):
            if r.type.is_tensor:
                self.bufs[id(r)] = self.buffer(barg)
            else:
                self.vals[id(r)] = next(after)

    def _copy_yields(self, dsts: list[Value], srcs: list[Value]) -> None:
        """Copy yielded tiles into loop-carried buffers, through temporaries when they overlap."""
        pairs = [(d, s) for d, s in zip(dsts, srcs) if d.type.is_tensor and self.buffer(d) is not self.buffer(s)]
        dst_bufs = {id(self.buffer(d)) for d, _ in pairs}
        staged = []
        for d, s in pairs:
            if id(self.buffer(s)) in dst_bufs:
                tmp = Value(s.name + "_stage", s.type)
                self.copy_tile(tmp, s)
                staged.append((d, tmp))
            else:
                staged.append((d, s))
        for d, s in staged:
            self.copy_tile(d, s)

    def op_scf_if(self, op: Op) -> None:
        b = self.b
        cond = self.scalar(op.operands[0])
        then_b = self.fn.append_basic_block("then")
        else_b = self.fn.append_basic_block("else")
        merge = self.fn.append_basic_block("endif")
        b.cbranch(cond, then_b, else_b)
        incoming = []
        for region, blk in zip(op.regions, (then_b, else_b)):
            b.position_at_end(blk)
            ops = region.block.ops
            self.emit_block(ops[:-1])
            y = ops[-1]
            if b.block.is_terminated:
                continue
            for r, s in zip(op.results, y.operands):
                if r.type.is_tensor:
                    self.copy_tile(r, s)
            incoming.append((b.block, [self.scalar(s) if not r.type.is_tensor else None
                                       for r, s in zip(op.results, y.operands)]))
            b.branch(merge)
        b.position_at_end(merge)
        if not incoming:
            b.unreachable()
            return
        for k, r in enumerate(op.results):
            if r.type.is_tensor:
                continue
            p = b.phi(compute_type(r.type))
            for blk, vals in incoming:
                p.add_incoming(vals[k], blk)
            self.vals[id(r)] = p

    def op_scf_while(self, op: Op) -> None:
        before, after = op.regions[0].block, op.regions[1].block
        inits = Operands(op).inits
        for a, init in zip(before.args, inits):
            if a.type.is_tensor:
                self.copy_tile(a, init)
        scalars = [(a, self.scalar(init)) for a, init in zip(before.args, inits) if not a.type.is_tensor]
        loop = open_loop(self.b, self.fn, ("while", "while_body", "while_end"), [v for _, v in scalars])
        for (a, _), phi in zip(scalars, loop.values):
            self.vals[id(a)] = phi
        self.emit_block(before.ops[:-1])
        cond_op = before.ops[-1]
        cond = self.scalar(Operands(cond_op).cond)
        fwd = Operands(cond_op).values
        for a, v in zip(after.args, fwd):
            if a.type.is_tensor:
                self.bufs[id(a)] = self.buffer(v)
            else:
                self.vals[id(a)] = self.scalar(v)
        for r, v in zip(op.results, fwd):
            if r.type.is_tensor:
                self.bufs[id(r)] = self.buffer(v)
            else:
                self.vals[id(r)] = self.scalar(v)
        loop.test(cond)
        self.emit_block(after.ops[:-1])
        y = after.ops[-1]
        self._copy_yields(before.args, y.operands)
        self.watchdog_tick(op)
        loop.carry([self.scalar(v) for a, v in zip(before.args, y.operands) if not a.type.is_tensor])

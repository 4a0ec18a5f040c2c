"""Legalization by strip-mining: make an oversized elementwise kernel fit the scratchpad.

A kernel whose tiles are all 1-D of one length N and whose tile ops are element-by-element (DMA
loads and stores, gathers and scatters, `nmp.vec`, splats, constants, iotas) computes each element
independently. When its scratchpad plan exceeds the budget, the tile part is rewritten as a loop over
chunks of C elements: iotas start at the chunk's first index, DMA descriptors move their offset by
C * stride and shrink their valid extent, every tile becomes C long. The scalar part runs once,
before the loop. The rewrite is only attempted when it is exactly equivalent: no reductions, no
matmul, no shape changes, no control flow, and no scalar that depends on a tile.
"""

from __future__ import annotations

from .ir import Block, Func, Op, Region, Ty, Value

_ELEMENTWISE_TILE_OPS = {"nmp.dma_load", "nmp.dma_store", "nmp.gather", "nmp.scatter", "nmp.vec", "nmp.splat",
                         "nmp.const", "nmp.iota"}
I64 = Ty("i64")


def _tile_len(func: Func) -> int | None:
    """N if every tile in the kernel is 1-D of length N and the body is strip-mineable, else None."""
    n = None
    for op in func.body.ops:
        if op.regions or op.name.startswith("scf."):
            return None
        vals = list(op.results) + list(op.operands)
        tiles = [v for v in vals if v.type.is_tensor]
        if not tiles:
            if op.name in ("nmp.dma_load", "nmp.dma_store", "nmp.gather", "nmp.scatter"):
                return None  # scalar memory access: keep program order simple, do not reorder
            continue
        if op.name not in _ELEMENTWISE_TILE_OPS:
            return None
        for t in tiles:
            if len(t.type.shape) != 1 or (n is not None and t.type.shape[0] != n):
                return None
            n = t.type.shape[0]
        if any(not r.type.is_tensor for r in op.results):
            return None  # a scalar computed from tiles
    return n


def strip_mine(func: Func, chunk: int) -> bool:
    """Rewrite `func` in place to process its tiles in chunks of `chunk` elements; False if not legal."""
    n = _tile_len(func)
    if n is None or chunk >= n or n % chunk:
        return False
    scalar_ops, tile_ops, tail = [], [], []
    for op in func.body.ops:
        if op.name == "nmp.return":
            tail.append(op)
        elif any(v.type.is_tensor for v in list(op.results) + list(op.operands)):
            tile_ops.append(op)
        else:
            scalar_ops.append(op)
    loc = tile_ops[0].loc if tile_ops else func.loc
    new_ops: list[Op] = list(scalar_ops)

    def const(value, ty=I64) -> Value:
        op = Op("arith.constant", [], [Value(f"c{value}", ty)], {"value": value}, [], loc)
        op.results[0].owner = op
        new_ops.append(op)
        return op.result

    zero, count, one = const(0), const(n // chunk), const(1)
    body = Block()
    k = body.add_arg("chunk", I64)
    remap: dict[int, Value] = {}
    emitted: list[Op] = []

    def emit(name, operands, result_types, attrs):
        op = Op(name, operands, [Value(f"s{len(emitted)}", t) for t in result_types], attrs, [], loc)
        for r in op.results:
            r.owner = op
        emitted.append(op)
        return op

    first = emit("arith.muli", [k, None], [I64], {})  # placeholder operand filled below
    c_chunk = Op("arith.constant", [], [Value(f"c{chunk}", I64)], {"value": chunk}, [], loc)
    c_chunk.results[0].owner = c_chunk
    emitted.insert(0, c_chunk)
    first.operands[1] = c_chunk.result
    base = first.result  # first element index of this chunk

    def ty(t: Ty) -> Ty:
        return t.with_shape((chunk,))

    for op in tile_ops:
        operands = [remap.get(id(o), o) for o in op.operands]
        attrs = dict(op.attrs)
        if op.name == "nmp.iota":
            idx = emit("nmp.iota", [], [ty(op.result.type)], attrs)
            start = base
            if op.result.type.elem != "i64":
                start = emit("arith.trunci", [base], [Ty(op.result.type.elem)], {}).result
            sp = emit("nmp.splat", [start], [ty(op.result.type)], {})
            new = emit("nmp.vec", [idx.result, sp.result], [ty(op.result.type)], {"fn": "arith.addi"})
        elif op.name in ("nmp.dma_load", "nmp.dma_store"):
            # operands: root, offset, stride, bound, [guard], [other|value]
            stride, bound = operands[2], operands[3]
            shift = emit("arith.muli", [base, stride], [I64], {})
            off = emit("arith.addi", [operands[1], shift.result], [I64], {})
            left = emit("arith.subi", [bound, base], [I64], {})
            operands = [operands[0], off.result, stride, left.result] + operands[4:]
            new = emit(op.name, operands, [ty(r.type) for r in op.results], attrs)
        else:
            new = emit(op.name, operands, [ty(r.type) for r in op.results], attrs)
        new.loc = op.loc
        for r, nr in zip(op.results, new.results):
            remap[id(r)] = nr
    emitted.append(Op("scf.yield", [], [], {}, [], loc))
    body.ops = emitted
    loop = Op("scf.for", [zero, count, one], [], {"strip_mined": chunk}, [Region([body])], loc)
    new_ops.append(loop)
    new_ops.extend(tail)
    func.body.ops = new_ops
    return True

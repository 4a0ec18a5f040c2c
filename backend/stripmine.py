"""Legalization by strip-mining: make an oversized elementwise or reducing kernel fit the scratchpad.

A kernel whose tiles are all 1-D of one length N and whose tile ops are element-by-element (DMA
loads and stores, gathers and scatters, `nmp.vec`, splats, constants, iotas) computes each element
independently; reductions of such tiles to scalars (`nmp.reduce` along axis 0) combine partial
results associatively. When the scratchpad plan exceeds the budget, the tile part is rewritten to
process chunks of C elements: iotas start at the chunk's first index, DMA descriptors move their
offset by C * stride and shrink their valid extent, every tile becomes C long, and each reduction
keeps a loop-carried partial result combined with its own combine region. The first chunk is peeled
out of the loop to initialise the partials (no identity element is needed). Scalars computed before
the tiles run once, before; scalars computed from the reductions run after. The rewrite is only
attempted when it is exactly equivalent (up to the association order of floating-point reductions):
no matmul, no shape changes, no control flow, and no tile that depends on a reduction's result.
"""

from __future__ import annotations

import itertools

from .ir import Block, Builder, Func, Op, Region, Ty, Value, clone_region
from .ops import OPS, Operands

_ELEMENTWISE_TILE_OPS = {n for n, d in OPS.items() if d.elementwise}  # DMA, gather/scatter, vec, splat, const, iota
_MEMORY_OPS = ("nmp.dma_load", "nmp.dma_store", "nmp.gather", "nmp.scatter")
I64 = Ty("i64")


def _partition(func: Func) -> tuple[int, list[Op], list[Op], list[Op], list[Op]] | None:
    """(N, scalars before, tile ops, scalars after, terminator) or None when not strip-mineable."""
    n = None
    before, tiles, after, tail = [], [], [], []
    from_reduce: set[int] = set()
    for op in func.body.ops:
        if op.name == "nmp.return":
            tail.append(op)
            continue
        if op.regions and op.name != "nmp.reduce" or op.name.startswith("scf."):
            return None
        vals = list(op.results) + list(op.operands)
        shaped = [v for v in vals if v.type.is_tensor]
        depends = any(id(o) in from_reduce for o in op.operands)
        if not shaped:
            if depends or tiles and any(id(o) in from_reduce for o in op.operands):
                from_reduce.update(id(r) for r in op.results)
                after.append(op)
            elif op.name in _MEMORY_OPS:
                if tiles:
                    after.append(op)  # a scalar access after the tiles: keep it after them
                    from_reduce.update(id(r) for r in op.results)
                else:
                    return None  # a scalar access before the tiles would be reordered: do not
            else:
                before.append(op)
            continue
        if depends:
            return None  # a tile computed from a reduction's result (softmax): needs two passes
        if op.name == "nmp.reduce":
            t = op.operands[0].type
            if len(t.shape) != 1 or op.attrs.get("axis", 0) != 0 or any(r.type.is_tensor for r in op.results):
                return None
            if any(inner.regions for inner in op.regions[0].block.ops):
                return None
            from_reduce.update(id(r) for r in op.results)
        elif op.name not in _ELEMENTWISE_TILE_OPS or any(not r.type.is_tensor for r in op.results):
            return None
        for t in shaped:
            if len(t.type.shape) != 1 or (n is not None and t.type.shape[0] != n):
                return None
            n = t.type.shape[0]
        if after:
            return None  # tiles after scalars that depend on reductions: keep program order simple
        tiles.append(op)
    if n is None or not tiles:
        return None
    return n, before, tiles, after, tail


def _emit_chunk(em: Builder, tiles: list[Op], base: Value, chunk: int, remap: dict[int, Value]) -> None:
    """Clone the tile ops for the chunk starting at element `base` (i64)."""
    for op in tiles:
        operands = [remap.get(id(o), o) for o in op.operands]
        attrs = dict(op.attrs)
        if op.name == "nmp.iota":
            rt = op.result.type.with_shape((chunk,))
            idx = em.op("nmp.iota", [], [rt], attrs)
            start = base if rt.elem == "i64" else em.op("arith.trunci", [base], [Ty(rt.elem)], {}).result
            sp = em.op("nmp.splat", [start], [rt], {})
            new = em.op("nmp.vec", [idx.result, sp.result], [rt], {"fn": "arith.addi"})
        elif op.name in ("nmp.dma_load", "nmp.dma_store"):
            dma = Operands(op, operands)
            (stride,), (bound,) = dma.strides, dma.bounds
            off = em.op("arith.addi", [dma.offset, em.op("arith.muli", [base, stride], [I64], {}).result], [I64], {})
            left = em.op("arith.subi", [bound, base], [I64], {})
            new = em.op(op.name, dma.replaced(offset=off.result, bounds=[left.result]),
                        [r.type.with_shape((chunk,)) for r in op.results], attrs)
        elif op.name == "nmp.reduce":
            regions = [clone_region(r) for r in op.regions]  # the peeled chunk's and the loop's reduce
            new = em.op("nmp.reduce", operands, [r.type for r in op.results], attrs, regions)
        else:
            new = em.op(op.name, operands, [r.type.with_shape((chunk,)) if r.type.is_tensor else r.type
                                            for r in op.results], attrs)
        new.loc = op.loc
        for r, nr in zip(op.results, new.results):
            remap[id(r)] = nr


def _combine(em: Builder, reduce_op: Op, accs: list[Value], vals: list[Value]) -> list[Value]:
    """Inline the reduction's combine region on (partial, chunk result) scalars."""
    block = reduce_op.regions[0].block
    local = {id(a): v for a, v in zip(block.args, accs + vals)}
    out: list[Value] = []
    for inner in block.ops:
        if inner.name == "nmp.yield":
            out = [local.get(id(o), o) for o in inner.operands]
            break
        new = em.op(inner.name, [local.get(id(o), o) for o in inner.operands], [r.type for r in inner.results],
                    dict(inner.attrs))
        new.loc = inner.loc
        for r, nr in zip(inner.results, new.results):
            local[id(r)] = nr
    return out


def strip_mine(func: Func, chunk: int) -> bool:
    """Rewrite `func` in place to process its tiles in chunks of `chunk` elements; False if not legal."""
    parts = _partition(func)
    if parts is None:
        return False
    n, before, tiles, after, tail = parts
    if chunk >= n or n % chunk:
        return False
    reduces = [op for op in tiles if op.name == "nmp.reduce"]
    loc = tiles[0].loc
    em = Builder(Block(), loc, "s", itertools.count(1))
    em.block.ops.extend(before)
    # chunk 0, peeled: its reductions initialise the partial results
    first: dict[int, Value] = {}
    _emit_chunk(em, tiles, em.const(0), chunk, first)
    inits = [first[id(r)] for op in reduces for r in op.results]
    lb, ub, step = em.const(1), em.const(n // chunk), em.const(1)
    body = Block()
    k = body.add_arg("chunk", I64)
    carried = [body.add_arg(f"partial{i}", v.type) for i, v in enumerate(inits)]
    inner = Builder(body, loc, "s", em.counter)
    base = inner.op("arith.muli", [k, inner.const(chunk)], [I64], {}).result
    remap: dict[int, Value] = {}
    _emit_chunk(inner, tiles, base, chunk, remap)
    yields: list[Value] = []
    pos = 0
    for op in reduces:
        m = len(op.results)
        accs = carried[pos:pos + m]
        yields += _combine(inner, op, accs, [remap[id(r)] for r in op.results])
        pos += m
    inner.op("scf.yield", yields, [], {})
    loop = em.op("scf.for", [lb, ub, step, *inits], [v.type for v in inits], {"strip_mined": chunk}, [Region([body])])
    final: dict[int, Value] = {}
    pos = 0
    for op in reduces:
        for r in op.results:
            final[id(r)] = loop.results[pos]
            pos += 1
    for op in after:
        op.operands = [final.get(id(o), o) for o in op.operands]
        em.block.ops.append(op)
    em.block.ops.extend(tail)
    func.body.ops = em.block.ops
    return True

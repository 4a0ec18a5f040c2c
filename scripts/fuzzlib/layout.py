"""Where every load and write of a program lives in memory: extents, strides, views, indices.

The renderer prints the same index arithmetic as Triton code that `indices` computes with torch for
the reference, so the two cannot drift apart: both come from `Access`.

An input is a view of a larger storage (`Buffer`): contiguous, transposed (column-major), every second
element of its last dimension, or starting at an element offset. Outputs are contiguous; a write
whose value does not span the grid dimension gets a leading program axis, except atomics that are
meant to collide (add/max/min without returned values), which every program applies to the same
elements.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .program import Atomic, Load, Loop, Program, Store, walk_stmts

LAYOUTS = ("contig", "transposed", "step2", "offset")


@dataclass(frozen=True)
class Access:
    """One load's or write's index space: per axis the dimension, its tile size, and what moves it."""
    dims: tuple[str, ...]
    sizes: tuple[int, ...]
    gridded: tuple[bool, ...]  # + pid * size
    along: tuple[bool, ...]  # + i * size (the loop counter)
    extent: tuple[int, ...]  # of the whole tensor along each axis
    prefix: int = 0  # a leading program axis of this many programs (writes only)


@dataclass(frozen=True)
class Buffer:
    numel: int
    offset: int
    strides: tuple[int, ...]
    size: tuple[int, ...]


def load_sites(p: Program) -> list[tuple[Load, Loop | None]]:
    from .program import stmt_exprs, walk_exprs
    sites: dict[int, tuple[Load, Loop | None]] = {}

    def visit(body, loop):
        for s in body:
            if isinstance(s, Loop):
                for _, e in s.carried:
                    for x in walk_exprs(e):
                        if isinstance(x, Load):
                            sites[x.arg] = (x, None)
                visit(s.body, s)
                continue
            for e in stmt_exprs(s):
                for x in walk_exprs(e):
                    if isinstance(x, Load):
                        sites[x.arg] = (x, loop)
    visit(p.body, None)
    return [sites[k] for k in sorted(sites)]


def load_access(p: Program, ld: Load, loop: Loop | None) -> Access:
    sizes = tuple(p.size(d) for d in ld.dims)
    gridded = tuple(d == p.grid_dim and p.grid > 1 for d in ld.dims)
    along = tuple(d == ld.along for d in ld.dims)
    trips = loop.trips if loop is not None else 1
    extent = tuple(s * (p.grid if g else 1) * (trips if a else 1) for s, g, a in zip(sizes, gridded, along))
    return Access(ld.dims, sizes, gridded, along, extent)


def collides(w: Store | Atomic) -> bool:
    return isinstance(w, Atomic) and w.op in ("add", "max", "min") and w.old_out is None


def write_access(p: Program, w: Store | Atomic, dims: tuple[str, ...]) -> Access:
    sizes = tuple(p.size(d) for d in dims)
    gridded = tuple(d == p.grid_dim and p.grid > 1 for d in dims)
    prefix = p.grid if p.grid > 1 and not any(gridded) and not collides(w) else 0
    extent = tuple(s * (p.grid if g else 1) for s, g in zip(sizes, gridded))
    return Access(dims, sizes, gridded, (False,) * len(dims), extent, prefix)


def output_shape(a: Access) -> tuple[int, ...]:
    return ((a.prefix,) if a.prefix else ()) + a.extent


def buffer(layout: str, extent: tuple[int, ...]) -> Buffer:
    """The storage of an input of `extent` under `layout` (strides in elements)."""
    n = 1
    for e in extent:
        n *= e
    row_major = tuple(_prod(extent[k + 1:]) for k in range(len(extent)))
    if layout == "transposed" and len(extent) == 2:
        return Buffer(n, 0, (1, extent[0]), extent)
    if layout == "step2" and extent:
        strides = tuple(s * 2 for s in row_major)
        return Buffer(n * 2, 0, strides, extent)
    if layout == "offset":
        return Buffer(n + 3, 3, row_major, extent)
    return Buffer(n, 0, row_major, extent)


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def axis_index(a: Access, k: int, pid: int, i: int) -> torch.Tensor:
    """Indices along axis k for program `pid` at loop iteration `i`, shaped to broadcast."""
    idx = torch.arange(a.sizes[k], dtype=torch.int64)
    if a.gridded[k]:
        idx = idx + pid * a.sizes[k]
    if a.along[k]:
        idx = idx + i * a.sizes[k]
    shape = [1] * len(a.sizes)
    shape[k] = a.sizes[k]
    return idx.view(shape) if shape else idx


def indices(a: Access, strides: tuple[int, ...], offset: int, pid: int, i: int,
            bounds: dict[str, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(flat element indices into the storage, in-bounds mask) of one access by one program."""
    if not a.sizes:
        flat = torch.tensor(offset + (pid if a.prefix else 0), dtype=torch.int64)
        return flat, torch.tensor(True)
    flat = torch.zeros([1] * len(a.sizes), dtype=torch.int64) + offset
    mask = torch.ones([1] * len(a.sizes), dtype=torch.bool)
    for k, d in enumerate(a.dims):
        idx = axis_index(a, k, pid, i)
        flat = flat + idx * strides[k]
        mask = mask & (idx < bounds[d])
    if a.prefix:
        flat = flat + pid * _prod(a.extent)
    shape = torch.Size(a.sizes)
    return flat.expand(shape), mask.expand(shape)


def input_buffers(p: Program) -> list[tuple[Load, Access, Buffer]]:
    out = []
    for ld, loop in load_sites(p):
        acc = load_access(p, ld, loop)
        layout = p.layouts[ld.arg] if ld.arg < len(p.layouts) else "contig"
        out.append((ld, acc, buffer(layout, acc.extent)))
    return out


def writes_in_order(p: Program) -> list[Store | Atomic]:
    return [s for s in walk_stmts(p.body) if isinstance(s, (Store, Atomic))]

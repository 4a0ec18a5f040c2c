"""The data and the argument list of one run: deterministic from the program's `data_seed`.

Input values are chosen so every reference is defined on them: small integers (|x| <= 8, or the
type's range for `wide` data), floats on a 1/8 grid in [-8, 8] (exact in bf16 and fp16). Outputs
start as zeros, atomic targets as small data. `launch_args` lists them in the kernel's parameter
order (see render.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .dtypes import dt
from .layout import Buffer, input_buffers, output_shape
from .program import Atomic, Loop, Program
from .render import write_accesses


@dataclass
class RunData:
    storages: dict[int, torch.Tensor]  # per input: the whole storage
    buffers: dict[int, Buffer]
    views: dict[int, torch.Tensor]  # what the kernel receives
    outputs: dict[int, torch.Tensor]
    out_dtypes: dict[int, str]
    scalars: list[int]  # n_<dim>, loop trip counts, strides, in parameter order
    constexprs: dict[str, int]


def _values(g: torch.Generator, n: int, dtype: str, kind: str) -> torch.Tensor:
    d = dt(dtype)
    if kind == "ones":
        return torch.ones(n, dtype=torch.int64 if d.is_int else torch.float64)
    if d.kind == "bool":
        return torch.randint(0, 2, (n,), generator=g).bool()
    if d.is_int:
        lo, hi = (-8, 9) if d.signed else (0, 17)
        if kind == "wide":
            lo, hi = d.int_range
            lo, hi = max(lo, -(2 ** 62)), min(hi, 2 ** 62)
            hi += 1
        return torch.randint(lo, hi, (n,), generator=g, dtype=torch.int64)
    return torch.randint(-64, 65, (n,), generator=g).double() / 8


def make(p: Program) -> RunData:
    g = torch.Generator().manual_seed(p.data_seed)
    storages, buffers, views = {}, {}, {}
    for ld, _, buf in input_buffers(p):
        vals = _values(g, buf.numel, ld.dtype, p.data_kind)
        d = dt(ld.dtype)
        storage = _to_dtype(vals, d)
        storages[ld.arg], buffers[ld.arg] = storage, buf
        views[ld.arg] = torch.as_strided(storage, buf.size, buf.strides, buf.offset)
    outputs, out_dtypes = {}, {}
    for w, acc, k, vt in write_accesses(p):
        shape = output_shape(acc)
        n = 1
        for s in shape:
            n *= s
        d = dt(vt.dtype)
        if isinstance(w, Atomic) and k == w.out:
            base = _to_dtype(_values(g, n, vt.dtype, p.data_kind), d).view(shape) if n else torch.zeros(shape)
        else:
            base = _to_dtype(torch.zeros(n, dtype=torch.int64), d).view(shape)
        outputs[k], out_dtypes[k] = base, vt.dtype
    scalars = [p.bound(d) for d, _ in p.dims]
    scalars += [lp.trips for lp in p.body if isinstance(lp, Loop) and lp.dynamic]
    if not p.const_strides:
        for arg in sorted(buffers):
            scalars += list(buffers[arg].strides)
    return RunData(storages, buffers, views, outputs, out_dtypes, scalars, dict(p.dims))


def _to_dtype(vals: torch.Tensor, d) -> torch.Tensor:
    if d.kind == "uint" and d.bits > 8:
        return vals.to(torch.int64).to(d.torch)
    return vals.to(d.torch)


def launch_args(data: RunData) -> tuple[list, dict]:
    args = [data.views[k] for k in sorted(data.views)]
    args += [data.outputs[k] for k in sorted(data.outputs)]
    args += list(data.scalars)
    return args, dict(data.constexprs)


def output_indices(data: RunData) -> list[int]:
    """Positions of the outputs in the argument list."""
    first = len(data.views)
    return [first + j for j in range(len(data.outputs))]

"""Timing of data movement outside kernels: host data written into banks, tensors re-laid out.

Moving data is never free (issue 12): a tensor's bytes reach the banks over the host link, and a
tensor whose layout changes between kernels crosses the mesh. Both are charged on the simulated
clock as transfers, in order with kernel launches, and recorded by profiles.

Host write (`host_write`): the host streams the bytes over its link (`host_write_gb_per_s`); every
bank absorbs its share at its store bandwidth (`dma_store_bytes_per_cycle`), all banks at once:

    cycles = dma_setup_cycles + max(total bytes / host bytes per cycle, max bank bytes / store bandwidth)

A "replicated" tensor is written once per bank (P copies cross the link).

Re-layout (`relayout`): a copy launch on the mesh, timed by the kernel timing model itself
(`simulate_timing`): PU b loads, from wherever the old layout keeps them, the bytes the new layout
puts in bank b and stores them to its own bank. NoC links, the remote-read cap, bank contention and
the launch overhead are charged exactly as for a kernel that did the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from triton_nmp.abi import KIND_DMA_LOAD, KIND_DMA_STORE, TRACE_WORDS
from triton_nmp.placement_registry import Placement
from triton_nmp.target import TargetSpec

from .timing import ArgBuffer, simulate_timing

__all__ = ["TransferTiming", "host_write", "relayout", "bank_runs"]


@dataclass(eq=False)
class TransferTiming:
    """One transfer's simulated cost; `kind` is "host_write" or "relayout"."""

    kind: str
    tensor: str  # what moved, for reports ("x: 64.0 MiB fp32[16777216]")
    nbytes: int
    src: str  # "host" or the old layout's description
    dst: str
    cycles: float
    seconds: float
    bank_bytes: np.ndarray  # bytes written per bank
    noc_bytes: float = 0.0  # bytes that crossed the mesh (re-layout)
    limit: str = ""  # what set the time: "host link", "bank", or the copy launch's limits
    extra: dict[str, Any] = field(default_factory=dict)

    # the LaunchTiming fields profilers and the device clock read
    @property
    def bytes_local(self) -> float:
        return float(self.nbytes) - self.noc_bytes

    @property
    def bytes_remote(self) -> float:
        return self.noc_bytes


def _replicated(pl: Placement) -> bool:
    return pl.policy == "replicated"


def host_write(dst: Placement, nbytes: int, spec: TargetSpec, tensor: str = "") -> TransferTiming:
    """Host -> banks: write `nbytes` of host data into the layout `dst` (module docstring)."""
    P = spec.num_pus
    if _replicated(dst):
        per_bank = np.full(P, float(nbytes))
    else:
        per_bank = dst.bank_bytes([0], [nbytes], 0, P)
    total = float(per_bank.sum())
    host_bpc = spec.host_write_gb_per_s / spec.clock_ghz  # GB/s over Gcycles/s = B/cycle
    link = total / host_bpc
    bank = float(per_bank.max(initial=0.0)) / spec.dma_store_bytes_per_cycle
    cycles = spec.dma_setup_cycles + max(link, bank) if nbytes else 0.0
    return TransferTiming("host_write", tensor, int(nbytes), "host", dst.describe(), cycles,
                          spec.cycles_to_seconds(cycles), per_bank, 0.0, "host link" if link >= bank else "bank")


def bank_runs(pl: Placement, nbytes: int, P: int) -> list[tuple[int, int, int, int, int]]:
    """The byte runs `pl` puts in each bank, as DMA records (bank, first byte, rows, row bytes, row stride);
    "replicated" puts the whole range in every bank."""
    out: list[tuple[int, int, int, int, int]] = []
    if nbytes <= 0:
        return out
    if pl.policy == "replicated":
        return [(b, 0, 1, nbytes, nbytes) for b in range(P)]
    if pl.policy == "bank":
        return [(int(pl.bank or 0), 0, 1, nbytes, nbytes)]
    if pl.policy == "blocked":
        c = pl.chunk_bytes(P)
        for b in range(P):
            lo, hi = b * c, nbytes if b == P - 1 else min(nbytes, (b + 1) * c)
            if hi > lo:
                out.append((b, lo, 1, hi - lo, hi - lo))
        return out
    g = int(pl.granularity or 1024)
    period = g * P
    full = nbytes // period  # whole periods: one strided record per bank
    for b in range(P):
        if full:
            out.append((b, b * g, full, g, period))
        lo = full * period + b * g
        if lo < nbytes:
            out.append((b, lo, 1, min(g, nbytes - lo), g))
    return out


def relayout(src: Placement, src_base: int, dst: Placement, nbytes: int, spec: TargetSpec,
             tensor: str = "") -> TransferTiming:
    """Banks -> banks: move a tensor from layout `src` (its first byte at position `src_base` of that
    placed range) to layout `dst`, as a copy launch timed by the kernel model (module docstring)."""
    P = spec.num_pus
    runs = bank_runs(dst, nbytes, P)
    rep = _replicated(dst)
    tr = np.zeros((2 * len(runs), TRACE_WORDS), dtype=np.int64)
    for i, (b, lo, rows, L, S) in enumerate(runs):
        tr[2 * i] = (KIND_DMA_LOAD, b, 0, lo, rows, L, S, 0)
        tr[2 * i + 1] = (KIND_DMA_STORE, b, 1 + b if rep else 1, lo, rows, L, S, 0)
    # the copy's source: the old placement (a replicated source is read locally wherever it is); its
    # destination: the new one, or for a replicated tensor one copy per bank (a store per bank)
    args = [ArgBuffer("src", int(src.origin) + int(src_base), int(nbytes), src)]
    if rep:
        args += [ArgBuffer(f"copy{b}", 0, int(nbytes), Placement("bank", b, None, int(nbytes))) for b in range(P)]
    else:
        args.append(ArgBuffer("dst", int(dst.origin), int(nbytes), dst))
    t = simulate_timing(tr, P, args, spec, mapping="blocked", kernel=f"re-layout of {tensor or 'a tensor'}")
    limits = t.limits()
    limit = max(limits, key=lambda k: limits[k]) if limits else ""
    per_bank = np.zeros(P)
    for b, _, rows, L, _ in runs:
        per_bank[b] += rows * L
    return TransferTiming("relayout", tensor, int(nbytes), src.describe(), dst.describe(), t.cycles, t.seconds,
                          per_bank, t.bytes_remote, limit, {"launch": t})

"""The "auto" layout: a new tensor's bank layout follows the footprint of the kernel that first uses it.

Input: a launch's static footprint (`triton_nmp.footprint`: the predicted DMA records of every
program), the layouts of the arguments already placed, and the arguments still to place. Output: a
layout per argument to place, chosen so that the bytes each program moves sit in the bank of the PU
that runs it, with every PU running its share of the programs:

1. Read-only arguments that every PU reads anyway (each byte read by at least P programs on
   average, e.g. a layer norm's weight in a prefill) are replicated: a copy per bank costs no more
   bank traffic than the reads it turns local. They must fit in 1/8 of a bank. So are tiny read-only
   arguments (at most `REPLICATE_TINY_BYTES`), whoever reads them: a decode step's layer norm is one
   program, on a PU the mapping picks per kernel, reading its weight and bias; replicated, every such
   reader reads them at the local rate (4x the remote cap) for 64 copies of a few KiB, written once.
2. Every other argument gets the best of a few candidate layouts: interleaved with a chunk equal to
   one program's footprint span or to the distance between consecutive programs' footprints
   (rounded up to the DMA granule; e.g. one row of a row-wise kernel), the default 1 KiB chunks,
   and "blocked". A candidate is scored under a reference mapping by the DMA cycles it adds to the
   busiest PU (local bytes at bank bandwidth, remote ones at the remote cap) and to the busiest
   bank, the two loads the timing model's waves are limited by (a layout that puts all of a
   head's K/V in one bank is local for one PU and a hot spot for all the others). Arguments are
   chosen largest footprint first, each given the loads of those before. The references are the
   two balanced mappings a footprint-aligned layout pairs with: round robin (program p on PU
   p mod P, for chunk-per-program layouts) and blocked (ceil(n/P) consecutive programs per PU, for
   "blocked"); the reference with the smaller makespan wins. The actual mapping is then chosen by
   the timing model's auto mapping from the placed layouts (owner computes, balanced, never slower
   than round robin), and `choose_checked` keeps the layouts only if the timing model finds the
   launch no slower than with the default interleaving.
3. A small tensor the launch writes (at most `SPREAD_BYTES_PER_BANK` per bank if spread over all of them: a
   decode step's activation vector) is spread over every bank ("blocked"), whatever suits its writer: the
   kernels after it read it from every PU (each program of a GEMV reads the whole vector), and a vector
   held by one or two banks makes them the hot spot of every such reader, while its writer pays a few
   remote stores. `choose_checked` does not revert it (its check compares the other choices).

A launch that moves less than `SETTLE_FRACTION` of a tensor's bytes (an embedding lookup of a few rows
of a table, the write of one position of a KV cache), like one whose footprint is not static, lays the
tensor out provisionally: the next launch with a static footprint that moves most of its bytes (the LM
head streaming the whole table) chooses its layout again, a re-layout charged once like any other.

Which dimension a layout splits follows from the footprint: a chunk of one row's bytes splits a
row-major tensor by rows; a chunk of a column block's bytes (a 1-D footprint of a column-major
access) splits it by columns. Footprints that are strided within a chunk (a tile of a row-major
matrix) are scored like the rest, and the best of the candidates wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from triton_nmp.abi import KIND_DMA_LOAD, KIND_DMA_STORE, KIND_GATHER, KIND_SCATTER
from triton_nmp.errors import NMPError
from triton_nmp.placement import DEFAULT_GRANULARITY, Placement
from triton_nmp.target import TargetSpec

__all__ = ["LayoutChoice", "choose_layouts", "choose_checked", "layouts_per_reference", "candidate_layouts",
           "moves_most_of", "REFERENCE_MAPPINGS", "REPLICATE_MAX_BANK_FRACTION", "REPLICATE_TINY_BYTES",
           "SETTLE_FRACTION",
           "SPREAD_BYTES_PER_BANK", "spread_written"]

REFERENCE_MAPPINGS = ("round_robin", "blocked")
REPLICATE_MAX_BANK_FRACTION = 1 / 8
REPLICATE_TINY_BYTES = 4096
SETTLE_FRACTION = 1 / 2
SPREAD_BYTES_PER_BANK = 256


def spread_written(nbytes: int, spec: TargetSpec) -> bool:
    """Whether a tensor of `nbytes` that a launch writes is spread over every bank (rule 3)."""
    return nbytes <= SPREAD_BYTES_PER_BANK * spec.num_pus


@dataclass(frozen=True)
class LayoutChoice:
    placement: Placement
    reason: str
    loaded: bool  # the kernel reads the tensor (so its host data must be written into the banks)
    spread: bool = False  # rule 3: a small written tensor spread over every bank, whatever suits this launch


def _reference(mapping: str, n: int, P: int) -> np.ndarray:
    ids = np.arange(n, dtype=np.int64)
    return ids % P if mapping == "round_robin" else ids // max(1, -(-n // P))


def _round_up(x: float, g: int) -> int:
    return int(-(-int(x) // g) * g)


def _extents(recs: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per program: first byte, end byte of what it touches of the argument, and whether it touches it."""
    gather = recs[:, 0] >= KIND_GATHER
    lo = np.where(gather, recs[:, 3], recs[:, 3] + np.minimum((recs[:, 4] - 1) * recs[:, 6], 0))
    hi = np.where(gather, recs[:, 6], recs[:, 3] + np.maximum((recs[:, 4] - 1) * recs[:, 6], 0) + recs[:, 5])
    plo = np.full(n, np.iinfo(np.int64).max)
    phi = np.full(n, -1, dtype=np.int64)
    np.minimum.at(plo, recs[:, 1], lo)
    np.maximum.at(phi, recs[:, 1], hi)
    return plo, phi, phi >= 0


def _useful(recs: np.ndarray) -> float:
    gather = recs[:, 0] >= KIND_GATHER
    return float(np.where(gather, recs[:, 4] * recs[:, 5], recs[:, 4] * recs[:, 5]).sum())


def moves_most_of(trace: np.ndarray, arg: int, nbytes: int) -> bool:
    """Whether a launch with footprint `trace` moves at least `SETTLE_FRACTION` of argument `arg`'s bytes
    (repeated reads counted: a tensor every program reads whole is settled by that launch)."""
    tr = np.asarray(trace, dtype=np.int64)
    recs = tr[(tr[:, 0] <= KIND_SCATTER) & (tr[:, 2] == arg)]
    return _useful(recs) >= SETTLE_FRACTION * nbytes


def candidate_layouts(recs: np.ndarray, n: int, nbytes: int, ptr: int, spec: TargetSpec) -> list[Placement]:
    G = spec.dma_granule_bytes
    plo, phi, touched = _extents(recs, n)
    grans: list[int] = []
    if touched.any():
        lo = plo[touched]
        span = float(np.median(phi[touched] - lo))
        steps = np.diff(lo)
        step = float(np.median(steps[steps > 0])) if (steps > 0).any() else 0.0
        for v in (step, span):
            if v > 0:
                grans.append(_round_up(v, G))
    grans.append(DEFAULT_GRANULARITY)
    out: list[Placement] = []
    for g in dict.fromkeys(grans):
        if 0 < g < nbytes:
            out.append(Placement("interleaved", None, g, nbytes, ptr))
    if -(-nbytes // spec.num_pus) <= spec.bank_bytes:
        out.append(Placement("blocked", None, None, nbytes, ptr))
    if not out:  # smaller than one chunk: the whole tensor in one bank's chunk
        out.append(Placement("interleaved", None, DEFAULT_GRANULARITY, nbytes, ptr))
    return out


class _Loads:
    """Cycles of DMA work per PU and per bank under one reference mapping, summed over arguments: the
    launch's makespan is at least the largest of them (the timing model's PU and bank limits)."""

    def __init__(self, ref: np.ndarray, spec: TargetSpec):
        self.ref, self.P = ref, spec.num_pus
        self.local_bw, self.bank_bw = spec.bank_bytes_per_cycle, spec.bank_bytes_per_cycle
        self.remote_bw = min(spec.remote_read_bytes_per_cycle, spec.noc_link_bytes_per_cycle)
        self.pu = np.zeros(self.P)
        self.bank = np.zeros(self.P)

    def delta(self, fb: np.ndarray, replicated_bytes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(PU cycles, bank cycles) added by an argument whose programs move `fb` (programs x banks), or,
        replicated, `replicated_bytes` per program from their own PU's bank."""
        if replicated_bytes is not None:
            per_pu = np.bincount(self.ref, weights=replicated_bytes, minlength=self.P)
            return per_pu / self.local_bw, per_pu / self.bank_bw
        local = fb[np.arange(fb.shape[0]), self.ref]
        remote = fb.sum(axis=1) - local
        pu = np.bincount(self.ref, weights=local / self.local_bw + remote / self.remote_bw, minlength=self.P)
        return pu, fb.sum(axis=0) / self.bank_bw

    def cost(self, d: tuple[np.ndarray, np.ndarray] | None = None) -> float:
        pu, bank = (self.pu, self.bank) if d is None else (self.pu + d[0], self.bank + d[1])
        return float(max(pu.max(initial=0.0), bank.max(initial=0.0)))

    def add(self, d: tuple[np.ndarray, np.ndarray]) -> None:
        self.pu += d[0]
        self.bank += d[1]


def choose_layouts(trace: np.ndarray, n: int, args: list[Any], todo: dict[int, tuple[int, int]],
                   spec: TargetSpec) -> dict[int, LayoutChoice]:
    """Layouts for the arguments in `todo` (argument index -> (data_ptr, nbytes)); `args` holds an
    `ArgBuffer` per already placed pointer argument (None otherwise). Arguments the footprint never
    touches get no layout (they stay host data)."""
    per_ref, costs = layouts_per_reference(trace, n, args, todo, spec)
    return per_ref[min(REFERENCE_MAPPINGS, key=lambda m: costs[m])]  # ties: round robin


def layouts_per_reference(trace: np.ndarray, n: int, args: list[Any], todo: dict[int, tuple[int, int]],
                          spec: TargetSpec) -> tuple[dict[str, dict[int, LayoutChoice]], dict[str, float]]:
    """`choose_layouts` for each reference mapping: (layouts per reference, estimated makespan per
    reference). The model-level pass takes each as a strategy of the kernel."""
    from triton_nmp.simulator.timing import ArgBuffer, footprint_bank_bytes

    P = spec.num_pus
    tr = np.asarray(trace, dtype=np.int64)
    dma = tr[tr[:, 0] <= KIND_SCATTER]
    loads = {m: _Loads(_reference(m, n, P), spec) for m in REFERENCE_MAPPINGS}
    fixed = [a if i not in todo else None for i, a in enumerate(args)]
    fixed_recs = dma[np.isin(dma[:, 2], [i for i, a in enumerate(fixed) if a is not None])]
    if fixed_recs.size:
        fb = footprint_bank_bytes(fixed_recs, n, fixed, spec)
        for ld in loads.values():
            ld.add(ld.delta(fb))
    per_ref: dict[str, dict[int, LayoutChoice]] = {m: {} for m in REFERENCE_MAPPINGS}
    # largest footprints first: they decide the makespan, the small ones fit around them
    order = sorted(todo, key=lambda a: -_useful(dma[dma[:, 2] == a]))
    for a in order:
        ptr, nbytes = todo[a]
        recs = dma[dma[:, 2] == a]
        if not recs.size:
            continue
        stored = bool(np.isin(recs[:, 0], (KIND_DMA_STORE, KIND_SCATTER)).any())
        loaded = bool(np.isin(recs[:, 0], (KIND_DMA_LOAD, KIND_GATHER)).any())
        useful = _useful(recs)
        readers = useful / max(nbytes, 1)
        tiny = nbytes <= REPLICATE_TINY_BYTES
        if not stored and (readers >= P or tiny) and nbytes <= spec.bank_bytes * REPLICATE_MAX_BANK_FRACTION:
            why = (f"read-only, each byte read by {readers:.0f} programs on average (>= {P} PUs): a copy per bank "
                   f"costs no more bank traffic than the reads it makes local" if readers >= P else
                   f"read-only and tiny ({nbytes} B <= {REPLICATE_TINY_BYTES}): a copy per bank makes every later "
                   f"reader's reads local, on whichever PU it runs")
            per_prog = np.bincount(recs[:, 1], weights=recs[:, 4] * recs[:, 5], minlength=n).astype(np.float64)
            for m, ld in loads.items():
                per_ref[m][a] = LayoutChoice(Placement("replicated", None, None, nbytes, ptr), why, loaded)
                ld.add(ld.delta(np.zeros((n, P)), per_prog))
            continue
        spread = stored and spread_written(nbytes, spec)
        layouts = ([Placement("blocked", None, None, nbytes, ptr)] if spread
                   else candidate_layouts(recs, n, nbytes, ptr, spec))
        fbs = [(c, footprint_bank_bytes(recs, n, [None] * a + [ArgBuffer("", ptr, nbytes, c)], spec)) for c in layouts]
        moved = max(float(fbs[0][1].sum()), 1.0)
        for m, ld in loads.items():
            scored = [(ld.cost(ld.delta(fb)), k) for k, (_, fb) in enumerate(fbs)]
            _, k = min(scored)  # first of equals: the smaller chunk
            best, fb = fbs[k]
            d = ld.delta(fb)
            ld.add(d)
            local = float(fb[np.arange(n), ld.ref].sum())
            if spread:
                why = (f"spread over every bank: a small tensor this launch writes ({nbytes} B), which later kernels "
                       f"read from every PU; in one or two banks it would be the hot spot of each of them")
            else:
                why = (f"footprint-aligned: {100 * local / moved:.0f}% of the bytes its programs move are in the "
                       f"bank of their PU under a {m}-like mapping (best of {len(fbs)} candidate layouts by PU and "
                       f"bank load)")
            per_ref[m][a] = LayoutChoice(best, why, loaded, spread)
    return per_ref, {m: ld.cost() for m, ld in loads.items()}


def choose_checked(trace: np.ndarray, grid: tuple[int, int, int], args: list[Any], todo: dict[int, tuple[int, int]],
                   spec: TargetSpec) -> dict[int, LayoutChoice]:
    """`choose_layouts`, kept only if the timing model, run on the predicted trace with the auto
    mapping, finds the launch no slower than with every argument in `todo` interleaved by default
    (the load estimate ignores waves and links; this check does not). Otherwise the default layout,
    with the reason."""
    from triton_nmp.simulator.timing import ArgBuffer, simulate_timing

    n = grid[0] * grid[1] * grid[2]
    try:
        chosen = choose_layouts(trace, n, args, todo, spec)
    except NMPError:  # e.g. a store to a replicated argument: the launch's own timing reports it, named
        return {}
    if not chosen:
        return chosen
    kept = {a: c for a, c in chosen.items() if c.spread}
    default = {a: kept.get(a) or LayoutChoice(Placement("interleaved", None, DEFAULT_GRANULARITY, todo[a][1],
                                                        todo[a][0]), "", c.loaded) for a, c in chosen.items()}

    def cycles(choice: dict[int, LayoutChoice]) -> float:
        full = list(args) + [None] * max(0, max(choice) + 1 - len(args))
        for a, c in choice.items():
            full[a] = ArgBuffer("", todo[a][0], todo[a][1], c.placement)
        return simulate_timing(trace, grid, full, spec, mapping="auto").cycles

    try:
        mine, theirs = cycles(chosen), cycles(default)
    except NMPError:  # e.g. a store to a replicated argument: the launch's own timing reports it, named
        return chosen
    if mine <= theirs:
        return chosen
    why = (f"default interleaving: the footprint-aligned layouts would take {mine:.0f} cycles against "
           f"{theirs:.0f} (timing model on the predicted trace)")
    return {a: kept.get(a) or LayoutChoice(c.placement, why, c.loaded) for a, c in default.items()}

"""Re-layout when it pays: a tensor the auto policy laid out for one kernel moves to the layout another
kernel reads it faster in, once the time that kernel has lost to the old layout covers the move.

The auto policy lays a tensor out for the first launch that moves most of its bytes
(`triton_nmp.auto_layout`). For a model that is the prefill: after a 512-token prompt, GPT-2's weights
sit in the layout its matmul tiles read best (1 KiB interleaving), and every decode GEMV afterwards reads
them almost wholly from remote banks, for as long as the model generates. Which kernel deserves the
layout is not known when it is chosen (the decode steps have not run yet), so the choice is revisited
online, by the rule of ski rental: renting costs the gain lost per launch, buying costs one move.

* **Candidates.** At a launch with a static footprint, the pointer arguments that the auto policy laid
  out (`Placement.chosen`: never a layout the user asked for with `place()` or the placement pass
  applied), that are settled (not provisional), placed whole (the argument is the whole placed range),
  mostly moved by this launch (`auto_layout.moves_most_of`), not mostly written by it and never written
  whole by any launch (a weight, or a KV cache a decode step reads whole and writes one position of).
* **Offers.** The layouts `auto_layout.choose_layouts` picks for the candidates with every other argument
  where it is; per candidate whose layout would change, the timing model's cycles of this launch (its
  predicted trace, its mapping) now and with that one tensor moved, and the cycles of its move
  (`simulator.transfer.relayout`: what the move will be charged). Each tensor is priced alone, so a
  tensor rewritten every step (an activation) never rides on the gain of a weight it is read with.
  Offers gaining less than `MIN_GAIN_FRACTION` of the launch are not made (layouts do not flap over
  noise-sized gains).
* **Accrual.** Each launch accrues each offer's gain, per launch site and tensor: the kernel, its grid
  and the very tensor (the same kernel reading layer 3's weight is another site than for layer 4), for
  the lifetime of the tensor in its layout (a new tensor at a freed one's address starts from zero).
  When an accrued gain reaches the move's cost, the tensor moves (charged on the simulated clock like
  every re-layout, logged in `placement.decisions()` and shown in the profile), and every site of that
  tensor starts again from zero. So the moves never cost more than the time they save plus the time already
  lost waiting for them: at most twice the better of never moving and moving at once, whatever the
  launches to come (the ski-rental bound), and a tensor two kernels want differently moves back and
  forth only as often as each kernel's accrued loss pays for it.
* **Never moved: activations.** A tensor some launch wrote whole (`Outputs`) is read by the kernels after
  its writer, each of which may prefer another layout: moving it for one reader can cost the others more
  (seen: Llama's 32-token prefill 5.25 -> 7.9 ms when activations moved), and each step writes a new one.
* **Free: storages overwritten.** A launch with a static footprint that stores every byte of a tensor and
  loads none of it (`overwritten`) finds its old contents dead. If the launcher's auto policy replicated it
  (`laid_out`; not the tuner, the placement pass or the user) or laid it out provisionally, the launch lays
  it out afresh, as if it were new, and nothing is charged. Inductor hands a freed buffer's storage to a
  later tensor of the same size: a decode step's layer-norm output written into a buffer replicated for a
  GEMV's input paid a store per bank, 64x the bytes (29.4 -> 5.3 us); a provisional layout was settled by a
  charged re-layout of dead bytes. Other layouts stay: re-deciding every overwritten storage for its writer
  lost more for its readers (Llama's 32-token prefill 4.6 -> 9.8 ms: the attention output and the LM head).
  A launch that stores into part of a replicated tensor (or loads it too) finds its bytes live: the launcher
  lays it out again for that launch, the move charged, since a copy per bank takes every store once per bank.
* **Provisional layouts learn.** A launch whose footprint depends on data lays its new tensors out
  provisionally (default interleaving), and the next launch with a static footprint that moves most of one
  settles its layout, by a charged re-layout when the bytes are live. A decode step makes a new output
  buffer every step, so without memory the same settling move was paid every step (Llama: one score vector
  per layer, ~47 us per token). `provisional_sites` remembers, per site of the data-dependent launch (kernel,
  grid, argument, bytes), the layout its last tensor was settled in; the next tensor made there starts in
  that layout (still provisional), and a settling launch that chooses the same layout moves nothing. A
  replicated layout is not learned (the data-dependent launch writes the tensor: a store per bank), so the
  launcher settles such an output in the layout of a small written tensor (spread over every bank) instead of
  the copy per bank its reader would choose: replicated, GPT-2's embedding row was re-laid out every step.
* **Not counted:** launches inside a benchmark loop (`driver.benchmarker.do_bench`, used by every tuner):
  a tuner's repetitions are not the workload, and a move inside a timed call would be charged to one
  candidate. Layouts the auto policy gives tensors there are forgotten after the loop, so a cold process
  (which tunes) and a warm one (which reads the tuning cache) lay every tensor out alike.
  `TRITON_NMP_RELAYOUT=0` turns the rule off (layouts then stay where first chosen).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from triton_nmp.abi import KIND_DMA_LOAD, KIND_DMA_STORE, KIND_GATHER, KIND_SCATTER
from triton_nmp.placement import Placement

__all__ = ["Offer", "candidates", "make_offers", "Ledger", "ledger", "Tokens", "outputs", "laid_out", "stored_bytes",
           "written_whole", "overwritten", "ProvisionalSites", "provisional_sites", "suspended", "enabled",
           "MIN_GAIN_FRACTION"]

MIN_GAIN_FRACTION = 0.05
OUTPUT_FRACTION = 1 / 2  # a launch storing at least this much of a tensor writes it (no candidate)
WHOLE_FRACTION = 0.99  # a launch storing this much of a tensor wrote it whole (an activation: never moved)
MAX_SITES = 4096  # accruals kept (sites of freed tensors linger until pushed out)


def _put(table: dict[Any, Any], key: Any, value: Any, limit: int) -> None:
    """table[key] = value, dropping the oldest entry first when a new key would pass `limit` (the tables here
    are keyed by launch sites and registry tokens of tensors that come and go)."""
    if key not in table and len(table) >= limit:
        del table[next(iter(table))]
    table[key] = value


def enabled() -> bool:
    """Whether the rule runs (`TRITON_NMP_RELAYOUT=0` turns it off)."""
    return os.environ.get("TRITON_NMP_RELAYOUT", "1").strip().lower() not in ("0", "false", "off", "no")


_local = threading.local()


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """A benchmark loop: launches of the calling thread inside this block accrue nothing, and the placements
    they record are forgotten at its end (`placement_registry.scratch`): what a tuner runs decides no layout."""
    from triton_nmp.placement_registry import scratch

    depth = getattr(_local, "depth", 0)
    _local.depth = depth + 1
    try:
        with scratch():
            yield
    finally:
        _local.depth = depth


def _suspended() -> bool:
    return getattr(_local, "depth", 0) > 0


@dataclass(frozen=True)
class Offer:
    """What moving one argument of a launch to another layout would give each such launch."""

    arg: int  # argument index
    layout: Placement  # its new layout (origin: the argument's data_ptr)
    reason: str
    cycles_now: float
    cycles_then: float  # with this argument moved, the others where they are
    move_cycles: float

    @property
    def gain(self) -> float:
        return self.cycles_now - self.cycles_then


def candidates(trace: np.ndarray, args: list[Any], moves_most: Any,
               activations: frozenset[int] = frozenset()) -> dict[int, tuple[int, int]]:
    """The arguments (index -> (data_ptr, nbytes)) the rule may move for a launch with footprint `trace`;
    `args` holds an `ArgBuffer` per pointer argument (None otherwise), `moves_most(i, nbytes)` whether the
    launch moves most of argument i's bytes, `activations` the arguments some launch wrote whole."""
    out: dict[int, tuple[int, int]] = {}
    tr = np.asarray(trace, dtype=np.int64)
    stored = stored_bytes(tr, len(args))
    for i, a in enumerate(args):
        if a is None or i in activations:
            continue
        pl = a.placement
        if (pl is None or not pl.chosen or pl.provisional or pl.policy == "auto" or pl.origin != a.data_ptr
                or pl.extent != a.nbytes):
            continue
        mine = tr[(tr[:, 2] == i) & (tr[:, 0] <= KIND_SCATTER)]
        if not mine.size:
            continue
        if stored[i] >= OUTPUT_FRACTION * a.nbytes:
            continue  # an output this launch (re)writes: its writer lays it out, not a move
        if moves_most(i, a.nbytes):
            out[i] = (a.data_ptr, a.nbytes)
    return out


def make_offers(trace: np.ndarray, grid: tuple[int, int, int], args: list[Any], movable: dict[int, tuple[int, int]],
                mapping: str, spec: Any) -> list[Offer]:
    """An offer per argument in `movable` whose move alone gains enough (see the module docstring). Each
    is priced alone: a tensor rewritten every step (an activation) is never carried by the gain of a
    weight it is read with, and a weight's accrual survives its companions' lifetimes."""
    from triton_nmp.auto_layout import choose_layouts
    from triton_nmp.errors import NMPError
    from triton_nmp.simulator import transfer
    from triton_nmp.simulator.timing import ArgBuffer, simulate_timing

    n = grid[0] * grid[1] * grid[2]
    fixed = [None if i in movable else a for i, a in enumerate(args)]
    try:
        chosen = choose_layouts(trace, n, fixed, movable, spec)
        moves = {i: c for i, c in chosen.items()
                 if c.placement.layout_signature() != args[i].placement.layout_signature()}
        if not moves:
            return []
        now_c = float(simulate_timing(trace, grid, args, spec, mapping=mapping).cycles)
    except NMPError:
        return []
    offers = []
    for i in sorted(moves):
        c = moves[i]
        then = list(args)
        then[i] = ArgBuffer(args[i].name, args[i].data_ptr, args[i].nbytes, c.placement)
        try:
            then_c = float(simulate_timing(trace, grid, then, spec, mapping=mapping).cycles)
        except NMPError:
            continue
        if now_c - then_c < MIN_GAIN_FRACTION * now_c:
            continue
        old = args[i].placement
        move_c = transfer.relayout(old, args[i].data_ptr - old.origin, c.placement, args[i].nbytes, spec).cycles
        offers.append(Offer(i, c.placement, c.reason, now_c, then_c, float(move_c)))
    return offers


class Ledger:
    """Accrued gains per launch site (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._accrued: dict[tuple[Any, ...], tuple[float, int]] = {}

    def accrue(self, site: tuple[Any, ...], tensor: Any, offer: Offer) -> tuple[float, int] | None:
        """Add one launch's gain at `site` for moving `tensor` (a placement registry token: one tensor in
        one layout, so a freed tensor's accrual never passes to the next one at its address); when the
        accrued gain covers the move, clear every site of that tensor and return (accrued cycles, launches)."""
        if _suspended():
            return None
        key = (site, tensor)
        with self._lock:
            acc, launches = self._accrued.get(key, (0.0, 0))
            acc, launches = acc + offer.gain, launches + 1
            if acc < offer.move_cycles:
                _put(self._accrued, key, (acc, launches), MAX_SITES)  # the oldest site's tensor is likely gone
                return None
            for k in [k for k in self._accrued if k[1] == tensor]:
                del self._accrued[k]
            return acc, launches

    def clear(self) -> None:
        with self._lock:
            self._accrued.clear()

    def pending(self) -> dict[tuple[Any, ...], tuple[float, int]]:
        with self._lock:
            return dict(self._accrued)


ledger = Ledger()


class Tokens:
    """A bounded, thread-safe set of registry tokens (`placement_registry.lookup_token`: one placed tensor
    in one layout)."""

    MAX = 1 << 16

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens: dict[Any, None] = {}

    def add(self, token: Any) -> None:
        with self._lock:
            _put(self._tokens, token, None, self.MAX)

    def __contains__(self, token: Any) -> bool:
        with self._lock:
            return token in self._tokens

    def clear(self) -> None:
        with self._lock:
            self._tokens.clear()


outputs = Tokens()
"""Tensors some launch wrote whole (activations: written by one kernel, read by the next ones), which the
rule never moves: a layout one reader prefers can cost the others, and the next step writes a new one
anyway. Weights and KV caches (never written whole once placed) stay candidates."""
laid_out = Tokens()
"""Tensors the launcher's auto policy laid out (not the tuner, the placement pass or the user): only these
are laid out afresh when a launch overwrites them (`overwritten`)."""


def stored_bytes(trace: np.ndarray, nargs: int) -> np.ndarray:
    """Bytes a launch with footprint `trace` stores per argument (0..nargs-1; spill traffic, argument -1,
    excluded)."""
    tr = np.asarray(trace, dtype=np.int64)
    st = tr[np.isin(tr[:, 0], (KIND_DMA_STORE, KIND_SCATTER)) & (tr[:, 2] >= 0) & (tr[:, 2] < nargs)]
    return np.bincount(st[:, 2], weights=(st[:, 4] * st[:, 5]).astype(np.float64), minlength=nargs)


def written_whole(trace: np.ndarray, nbytes: dict[int, int]) -> frozenset[int]:
    """The arguments (index -> bytes) a launch with footprint `trace` stores at least `WHOLE_FRACTION` of."""
    stored = stored_bytes(trace, max(nbytes, default=-1) + 1)
    return frozenset(i for i, n in nbytes.items() if stored[i] >= WHOLE_FRACTION * n)


MAX_COVER_ROWS = 1 << 20  # store rows examined per argument by `overwritten` (more: not proven, not claimed)


def overwritten(trace: np.ndarray, nbytes: dict[int, int]) -> frozenset[int]:
    """The arguments (index -> bytes) a launch with footprint `trace` stores every byte of, by DMA, and
    never loads: their contents before the launch are dead. Exact: the union of the stored rows must cover
    [0, nbytes); a scatter, a load or a gather of the argument rules it out."""
    tr = np.asarray(trace, dtype=np.int64)
    kind, arg = tr[:, 0], tr[:, 2]
    out = []
    for i, n in nbytes.items():
        mine = arg == i
        if not n or not mine.any() or np.isin(kind[mine], (KIND_DMA_LOAD, KIND_GATHER, KIND_SCATTER)).any():
            continue
        st = tr[mine & (kind == KIND_DMA_STORE)]
        rows = st[:, 4]
        if not st.size or rows.sum() > MAX_COVER_ROWS or (st[:, 5] * rows).sum() < n:
            continue
        row = np.repeat(np.arange(len(st)), rows)
        within = np.arange(len(row)) - np.repeat(np.cumsum(rows) - rows, rows)
        start = st[row, 3] + within * st[row, 6]
        end = start + st[row, 5]
        order = np.argsort(start, kind="stable")
        start, end = start[order], np.maximum.accumulate(end[order])
        # covered iff the first row starts at 0, no row starts after the end of all rows before it, and
        # the rows reach n
        if start[0] <= 0 and (len(start) == 1 or (start[1:] <= end[:-1]).all()) and end[-1] >= n:
            out.append(i)
    return frozenset(out)


class ProvisionalSites:
    """Layouts learned for the provisional tensors of data-dependent launches (module docstring): which site
    made each provisional tensor (by registry token), and per site the layout its last tensor was settled in.
    Launches inside a benchmark loop teach nothing (a cold process, which tunes, and a warm one must lay
    tensors out alike). Thread-safe, bounded."""

    MAX = 1 << 14

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._made: dict[Any, Any] = {}
        self._learned: dict[Any, tuple[str, int | None, int | None]] = {}

    def made(self, token: Any, site: Any) -> None:
        """The provisional tensor `token` was laid out by a launch at `site`."""
        if token is None or _suspended():
            return
        with self._lock:
            _put(self._made, token, site, self.MAX)

    def settled(self, token: Any, layout: Placement) -> None:
        """The provisional tensor `token` was settled in `layout` (a replicated layout is not learned: the
        data-dependent launch writes the tensor, one copy per bank)."""
        if token is None or _suspended():
            return
        with self._lock:
            site = self._made.pop(token, None)
            if site is None:
                return
            if layout.policy == "replicated":
                self._learned.pop(site, None)
                return
            _put(self._learned, site, (layout.policy, layout.bank, layout.granularity), self.MAX)

    def made_here(self, token: Any) -> bool:
        """Whether the provisional tensor `token` was made by a data-dependent launch (and is not settled yet)."""
        with self._lock:
            return token is not None and token in self._made

    def learned(self, site: Any) -> tuple[str, int | None, int | None] | None:
        """(policy, bank, granularity) the last tensor made at `site` was settled in, or None."""
        with self._lock:
            return self._learned.get(site)

    def clear(self) -> None:
        with self._lock:
            self._made.clear()
            self._learned.clear()


provisional_sites = ProvisionalSites()

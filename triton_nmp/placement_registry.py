"""Where placed bytes live: `Placement` (how a placed byte range maps to banks) and the registry of
placed byte ranges, with the lookups the launcher, the timing model and the simulator make.

This is the low-level half of placement, importable by the simulator: it charges nothing and
chooses nothing. Policies, `place()`, the first-launch assignment, the decision log and the
transfers a placement implies are `triton_nmp.placement` (which re-exports the names below).

Address -> bank mapping: positions are taken relative to the start of the placed byte range, not as
absolute host addresses (see `triton_nmp.placement`). Unplaced buffers are interleaved relative to
their own first byte (`placement_of`).

The registry is keyed by byte range and does not keep tensors alive: an entry is dropped by a
`weakref.finalize` on the tensor's storage, i.e. when the memory is freed. The finalizer only queues
the entry's token (`_freed`); the registry applies the queue under its lock before each use, because
the garbage collector may run a finalizer on a thread that already holds that lock. A view of a
placed tensor inherits the placement (with its offset inside the placed range); the most recent
placement containing an argument's bytes wins.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_GRANULARITY",
    "Placement",
    "extent_bytes",
    "record",
    "lookup",
    "placement_of",
    "placement_generation",
    "bump_generation",
    "forget_all",
    "trial",
]

DEFAULT_GRANULARITY = 1024


def extent_bytes(t: Any) -> int:
    """Bytes from data_ptr to the last element (same rule as the launcher's pointer span)."""
    if t.numel() == 0:
        return 0
    extent = 1
    for size, stride in zip(t.shape, t.stride()):
        extent += (size - 1) * stride
    return extent * t.element_size()


@dataclass(frozen=True)
class Placement:
    """How one placed byte range maps to banks.

    `extent` (bytes of the placed range) sizes the chunks of "blocked". `origin` is the host address
    of the range's first byte; it is excluded from equality and hashing so that placements of
    different tensors with the same policy compare equal (tuning keys), and it only serves to turn
    an argument's data_ptr into a position inside the range.
    """

    policy: str = "interleaved"
    bank: int | None = None
    granularity: int | None = DEFAULT_GRANULARITY
    extent: int = 0
    origin: int = field(default=0, compare=False, repr=False)
    chosen: bool = field(default=False, compare=False)  # laid out by the "auto" policy, not by the user
    # the "auto" policy's fallback (a first launch whose footprint is not static): the next launch with a
    # static footprint chooses the tensor's layout (a charged re-layout), as it would have for host data
    provisional: bool = field(default=False, compare=False)

    # -------------------------------------------------------------------------------- mapping

    def cumulative_terms(self, x: np.ndarray, num_banks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Decompose F_b(x) = bytes of [0, x) that live in bank b, for every position in `x`, as

            F_b(x) = uniform + below * (b < k) + rest * (b == k)

        and return (uniform, k, below, rest) arrays (int64). Byte counts of a run [x0, x1) per bank
        are F_b(x1) - F_b(x0); the decomposition lets callers sum runs per bank with a few
        bincounts instead of splitting every run at chunk boundaries. "replicated" maps like a
        single bank 0 here: its reads are local to whichever PU reads, which the caller handles.
        """
        x = np.asarray(x, dtype=np.int64)
        zeros = np.zeros_like(x)
        if self.policy == "interleaved":
            g = int(self.granularity or DEFAULT_GRANULARITY)
            period = g * num_banks
            q, m = np.divmod(x, period)
            k, rest = np.divmod(m, g)
            return q * g, k, np.full_like(x, g), rest
        if self.policy == "blocked":
            chunk = self.chunk_bytes(num_banks)
            k = np.minimum(x // chunk, num_banks - 1)
            return zeros, k, np.full_like(x, chunk), x - k * chunk
        bank = 0 if self.policy == "replicated" else int(self.bank or 0)
        return zeros, np.full_like(x, bank), zeros, x

    def chunk_size(self, num_banks: int) -> int:
        """Bytes of one contiguous same-bank chunk (0 when the whole range is in one bank)."""
        if self.policy == "interleaved":
            return int(self.granularity or DEFAULT_GRANULARITY)
        if self.policy == "blocked":
            return self.chunk_bytes(num_banks)
        return 0

    def bank_of(self, x: np.ndarray, num_banks: int) -> np.ndarray:
        """Bank of each byte position in `x` ("replicated" -> 0, see `cumulative_terms`)."""
        x = np.asarray(x, dtype=np.int64)
        if self.policy == "interleaved":
            return (x // int(self.granularity or DEFAULT_GRANULARITY)) % num_banks
        if self.policy == "blocked":
            return np.minimum(x // self.chunk_bytes(num_banks), num_banks - 1)
        return np.full_like(x, 0 if self.policy == "replicated" else int(self.bank or 0))

    def chunk_bytes(self, num_banks: int) -> int:
        """Size of one bank's chunk under "blocked" (ceil(extent / banks), at least 1 byte)."""
        return max(1, -(-int(self.extent) // num_banks))

    def bank_bytes(self, offsets: Any, lengths: Any, base_addr: int, num_banks: int) -> np.ndarray:
        """Bytes per bank (float64 array of `num_banks`) of the runs [base+off, base+off+len).

        `base_addr` is the position of the argument's first byte inside the placed range
        (data_ptr - origin); exact for runs that cross chunk boundaries. For "replicated" every
        byte is reported in bank 0 (the copy local to the reader is the caller's business).
        """
        off = np.asarray(offsets, dtype=np.int64).ravel() + int(base_addr)
        ln = np.asarray(lengths, dtype=np.int64).ravel()
        if off.shape != ln.shape:
            raise ValueError(f"offsets ({off.size}) and lengths ({ln.size}) must have the same length")
        if np.any(ln < 0) or np.any(off < 0):
            raise ValueError("runs must have non-negative positions and lengths inside the placed range")
        if self.policy == "bank" and not 0 <= int(self.bank or 0) < num_banks:
            raise ValueError(f"bank {self.bank} does not exist among {num_banks} banks")
        x = np.concatenate([off + ln, off])
        sign = np.concatenate([np.ones_like(ln), -np.ones_like(ln)]).astype(np.float64)
        uniform, k, below, rest = self.cumulative_terms(x, num_banks)
        out = np.full(num_banks, float(np.dot(sign, uniform)))
        d = np.bincount(k, weights=sign * below, minlength=num_banks + 1)[: num_banks + 1]
        out += np.cumsum(d[::-1])[::-1][1:]  # banks b < k get `below`: suffix sum over k > b
        out += np.bincount(k, weights=sign * rest, minlength=num_banks)[:num_banks]
        return out

    def describe(self) -> str:
        if self.policy == "bank":
            return f"bank {self.bank}"
        if self.policy == "interleaved":
            return f"interleaved ({self.granularity} B)"
        return self.policy

    def signature(self) -> tuple[Any, ...]:
        """The layout as tuning keys see it: (policy, bank, granularity). A layout the auto policy (or
        the autotuner's layout search) chose reads as that layout, so a config tuned for one layout is
        never served for another; only a tensor whose layout is still open reads as "auto"."""
        return (self.policy, self.bank, self.granularity)

    def view_signature(self, position: int, nbytes: int, num_banks: int) -> tuple[Any, ...]:
        """`signature()` of a view whose first byte sits `position` bytes into the placed range and spans
        `nbytes`: where the view falls on the banks is part of its timing, so two views that fall
        differently must not share a tuning entry. Empty for the whole range (and for views whose banks
        repeat the whole range's: interleaved at a multiple of granularity x banks; one bank; replicated)."""
        if self.policy == "interleaved":
            at = position % (int(self.granularity or DEFAULT_GRANULARITY) * num_banks)
            return ("at", at) if at else ()
        if self.policy == "blocked" and (position, nbytes) != (0, int(self.extent)):
            return ("at", position, int(self.extent))
        return ()

    def layout_signature(self) -> tuple[Any, ...]:
        """The layout itself, chosen or requested."""
        return (self.policy, self.bank, self.granularity)


# ------------------------------------------------------------------------------------ registry


@dataclass(frozen=True)
class _Entry:
    start: int
    end: int
    placement: Placement
    storage: int  # first byte of the tensor's storage: live storages never overlap, so lookups go by it


_lock = threading.Lock()
_entries: dict[int, _Entry] = {}  # token -> entry; tokens increase, so the newest entry wins lookups
_by_storage: dict[int, list[int]] = {}  # storage start -> tokens of its entries
_storage_starts: list[int] = []  # sorted keys of _by_storage
_tokens = itertools.count(1)
_generation = 0


_freed: list[int] = []  # tokens of placed tensors freed since the registry last looked (see _drop)


def _drop(token: int) -> None:
    """Finalizer of a placed tensor's storage. The garbage collector runs it at any allocation, also
    inside `place()` on a thread that holds `_lock` (a lock taken here deadlocked there), so it
    only queues the token; the registry applies the queue under its lock before each use."""
    _freed.append(token)


def _apply_freed() -> None:
    """Forget the entries of freed tensors; the caller holds `_lock`."""
    while _freed:
        _forget(_freed.pop())


def _forget(token: int) -> None:
    """Drop one entry; the caller holds `_lock`."""
    global _generation
    e = _entries.pop(token, None)
    if e is None:
        return
    _generation += 1
    toks = _by_storage.get(e.storage)
    if toks is not None:
        if token in toks:
            toks.remove(token)
        if not toks:
            del _by_storage[e.storage]
            k = bisect.bisect_left(_storage_starts, e.storage)
            if k < len(_storage_starts) and _storage_starts[k] == e.storage:
                del _storage_starts[k]


def forget_all() -> None:
    """Forget every placed range (tensors already placed are host data again)."""
    global _generation
    with _lock:
        _freed.clear()
        _entries.clear()
        _by_storage.clear()
        _storage_starts.clear()
        _generation += 1


def placement_generation() -> int:
    """Changes whenever the registry does (a place(), a placed tensor freed, the default policy set):
    callers that cache `placement_of` results (the launcher) revalidate with it."""
    if _freed:
        with _lock:
            _apply_freed()
    return _generation


def bump_generation() -> None:
    """Invalidate cached lookups without changing an entry (the default policy of new tensors changed)."""
    global _generation
    with _lock:
        _generation += 1


_scratch = threading.local()  # per thread: tokens recorded inside `scratch()` blocks, forgotten at their end


def record(tensor: Any, placement: Placement) -> None:
    """Record `placement` for the tensor's bytes [data_ptr, data_ptr + extent), until its storage is freed
    (or, inside `scratch()`, until the block ends)."""
    token = _register(tensor, placement)
    weakref.finalize(tensor.untyped_storage(), _drop, token)
    tokens = getattr(_scratch, "tokens", None)
    if tokens is not None:
        tokens.append(token)


@contextlib.contextmanager
def scratch() -> Iterator[None]:
    """Placements the calling thread records inside the block are forgotten when it ends (the tensors are
    where they were before: host data, or their earlier layout). Benchmark loops run in one, so the layout a
    tensor gets does not depend on whether a tuner happened to launch a candidate on it first (a cold
    process tunes, a warm one reads the tuning cache: both must simulate the same)."""
    outer = getattr(_scratch, "tokens", None)
    _scratch.tokens = []
    try:
        yield
    finally:
        mine, _scratch.tokens = _scratch.tokens, outer
        if mine:
            global _generation
            with _lock:
                for token in mine:
                    _forget(token)
                _generation += 1


def _register(tensor: Any, placement: Placement) -> int:
    """Add an entry for the tensor's bytes; returns its token."""
    global _generation
    start, nbytes = tensor.data_ptr(), extent_bytes(tensor)
    storage = tensor.untyped_storage().data_ptr()
    token = next(_tokens)
    with _lock:
        _apply_freed()
        _entries[token] = _Entry(start, start + nbytes, placement, storage)
        toks = _by_storage.get(storage)
        if toks is None:
            _by_storage[storage] = [token]
            bisect.insort(_storage_starts, storage)
        else:
            toks.append(token)
        _generation += 1
    return token


@contextlib.contextmanager
def trial(layouts: dict[Any, Placement]) -> Iterator[None]:
    """Run the block as if each tensor (key) lived in its placement (value), moving nothing: no transfer
    is charged and no decision logged, and afterwards the tensors are where they were. For measuring
    candidate layouts (the autotuner's layout search) before one is chosen and applied, charged, by
    `placement.assign`."""
    tokens = [_register(t, pl) for t, pl in layouts.items()]
    try:
        yield
    finally:
        with _lock:
            for token in tokens:
                _forget(token)


def _newest(data_ptr: int, nbytes: int) -> tuple[int, _Entry] | None:
    """(token, entry) of the newest entry holding [data_ptr, data_ptr + nbytes), else None."""
    end = data_ptr + max(int(nbytes), 0)
    with _lock:
        _apply_freed()
        k = bisect.bisect_right(_storage_starts, data_ptr) - 1
        if k < 0:
            return None
        best = None
        for token in _by_storage[_storage_starts[k]]:
            e = _entries[token]
            if e.start <= data_ptr and end <= e.end and (best is None or token > best[0]):
                best = (token, e)
    return best


def lookup(data_ptr: int, nbytes: int) -> Placement | None:
    """The newest placement recorded for a range holding [data_ptr, data_ptr + nbytes), else None
    (host data, never placed)."""
    best = _newest(data_ptr, nbytes)
    return best[1].placement if best is not None else None


def lookup_token(data_ptr: int, nbytes: int) -> int | None:
    """The token of that newest placement: it names one placed tensor in one layout (a new layout, or a
    new tensor at the same address, gets another), for bookkeeping that must not outlive either."""
    best = _newest(data_ptr, nbytes)
    return best[0] if best is not None else None


def placement_of(data_ptr: int, nbytes: int) -> Placement:
    """The placement of the buffer [data_ptr, data_ptr + nbytes): the newest placed range holding it,
    else the default (interleaved relative to `data_ptr`)."""
    found = lookup(data_ptr, nbytes)
    if found is not None:
        return found
    return Placement("interleaved", None, DEFAULT_GRANULARITY, int(nbytes), int(data_ptr))

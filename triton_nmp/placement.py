"""Where tensors live: the bank placement of kernel buffers on the nmp mesh.

Every PU owns one DRAM bank (bank i belongs to PU i). Whether a DMA is fast (own bank) or slow
(another PU's bank, over the NoC) depends on which bank holds the bytes it moves, so the timing
model asks this module, per kernel argument, how bytes map to banks.

Policies (`place(tensor, policy, ...)`):

- ``"interleaved"`` (the default of every tensor): consecutive `granularity`-byte chunks go to banks
  0, 1, ..., P-1, 0, 1, ... (P = number of PUs). `DEFAULT_GRANULARITY` = 1024 B: a multiple of the
  32 B DMA granule (an aligned granule never straddles two banks), small enough that a 16 KiB block
  is spread over 16 banks (no hot bank when all PUs stream), large enough that a 64-128 B tile row
  stays within one bank.
- ``"blocked"``: the tensor's bytes are split into P contiguous chunks of ceil(nbytes / P) bytes,
  chunk i in bank i (the tail, if any, belongs to the last bank). Pair it with
  ``pu_mapping="locality"`` for streaming kernels whose program blocks line up with the chunks.
- ``"replicated"``: a read-only copy in every bank, so every read is local; a kernel that stores to
  it is reported as an error by the timing model.
- ``bank=<int>`` (policy ``"bank"``): the whole tensor in one bank.

Address -> bank mapping: positions are taken **relative to the start of the placed byte range**,
not as absolute host addresses. The torch CPU allocator hands out addresses with an arbitrary
offset modulo the interleave period (and a different one on every run); a device allocator would
align each allocation to its interleave granularity. Relative addressing models that allocator and
keeps simulated time deterministic: the same kernel on the same shapes gives the same cycles
whatever address the host allocator chose. Unplaced buffers are interleaved relative to their own
first byte.

The registry is keyed by byte range and does not keep tensors alive: an entry is dropped by a
`weakref.finalize` on the tensor's storage, i.e. when the memory is freed. A view of a placed
tensor inherits the placement (with its offset inside the placed range); placing a sub-range of an
already placed tensor overrides it for that sub-range (the most recent placement containing an
argument's bytes wins).
"""

from __future__ import annotations

import difflib
import itertools
import math
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from triton_nmp.errors import NMPError
from triton_nmp.target import active_target

__all__ = [
    "DEFAULT_GRANULARITY",
    "POLICIES",
    "NMPPlacementError",
    "Placement",
    "place",
    "placement_of",
    "placement_signature",
    "placement_generation",
    "clear_placements",
]

DEFAULT_GRANULARITY = 1024
POLICIES: tuple[str, ...] = ("interleaved", "blocked", "replicated", "bank")


class NMPPlacementError(NMPError, ValueError):
    """A `place()` request that cannot be honoured (unknown policy, bank out of range, too big...)."""


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
        return (self.policy, self.bank, self.granularity)


# ------------------------------------------------------------------------------------ registry


@dataclass(frozen=True)
class _Entry:
    start: int
    end: int
    placement: Placement


_lock = threading.Lock()
_entries: dict[int, _Entry] = {}  # token -> entry; tokens increase, so the newest entry wins lookups
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
    global _generation
    while _freed:
        if _entries.pop(_freed.pop(), None) is not None:
            _generation += 1


def clear_placements() -> None:
    """Forget every placement (tests; tensors already placed fall back to interleaved)."""
    global _generation
    with _lock:
        _freed.clear()
        _entries.clear()
        _generation += 1


def placement_generation() -> int:
    """Changes whenever the registry does (a place(), a placed tensor freed): callers that cache
    `placement_of` results (the launcher) revalidate with it."""
    if _freed:
        with _lock:
            _apply_freed()
    return _generation


def _extent_bytes(t: Any) -> int:
    """Bytes from data_ptr to the last element (same rule as the launcher's pointer span)."""
    if t.numel() == 0:
        return 0
    extent = 1
    for size, stride in zip(t.shape, t.stride()):
        extent += (size - 1) * stride
    return extent * t.element_size()


def _fail(what: str, todo: str) -> NMPPlacementError:
    return NMPPlacementError(f"place(): {what}; {todo}")


def place(tensor: Any, policy: str = "interleaved", *, bank: int | None = None, granularity: int | None = None) -> Any:
    """Place `tensor` in the banks of the active target and return it (so calls can be chained).

    `policy` is "interleaved" (optionally with `granularity` bytes per chunk), "blocked",
    "replicated" or "bank"; `bank=<int>` alone selects "bank". The placement lasts as long as the
    tensor's memory and is checked against the active target (bank range, bank capacity).
    """
    import torch

    if not isinstance(tensor, torch.Tensor):
        raise _fail(f"expected a torch.Tensor, got {type(tensor).__name__}", "pass the tensor the kernel will read")
    if tensor.device.type != "cpu":
        raise _fail(
            f"tensor is on device '{tensor.device}'",
            "nmp kernels run on CPU tensors: move it with .cpu() before placing it",
        )
    if not isinstance(policy, str) or policy not in POLICIES:
        close = difflib.get_close_matches(str(policy), POLICIES, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise _fail(f"unknown policy {policy!r}{hint}", f"choose one of {', '.join(POLICIES)} or pass bank=<int>")
    if any(s < 0 for s in tensor.stride()):
        raise _fail(f"tensor has a negative stride {tuple(tensor.stride())}", "make it contiguous first")
    spec = active_target()
    nbanks = spec.num_pus
    if bank is not None:
        if policy not in ("interleaved", "bank"):
            raise _fail(f"bank={bank} conflicts with policy '{policy}'", "pass either a policy or bank=<int>")
        if isinstance(bank, bool) or not isinstance(bank, int | np.integer):
            raise _fail(f"bank must be an integer, got {type(bank).__name__}", f"use 0..{nbanks - 1}")
        bank = int(bank)
        if not 0 <= bank < nbanks:
            raise _fail(
                f"bank {bank} does not exist on target {spec.name} ({nbanks} banks)", f"use a bank in 0..{nbanks - 1}"
            )
        policy = "bank"
    elif policy == "bank":
        raise _fail("policy 'bank' needs the bank number", f"call place(t, bank=<0..{nbanks - 1}>)")
    if granularity is not None:
        if policy != "interleaved":
            raise _fail(f"granularity applies to 'interleaved' only, not '{policy}'", "drop granularity=")
        g = spec.dma_granule_bytes
        if isinstance(granularity, bool) or not isinstance(granularity, int | np.integer) or granularity <= 0:
            raise _fail(f"granularity must be a positive integer, got {granularity!r}", f"use a multiple of {g} bytes")
        if granularity % g:
            raise _fail(
                f"granularity {granularity} is not a multiple of the DMA granule ({g} B on {spec.name})",
                f"use a multiple of {g}, e.g. {-(-granularity // g) * g}, so that no granule straddles two banks",
            )
        granularity = int(granularity)
    nbytes = _extent_bytes(tensor)
    per_bank = {
        "interleaved": math.ceil(nbytes / nbanks),
        "blocked": math.ceil(nbytes / nbanks),
        "replicated": nbytes,
        "bank": nbytes,
    }[policy]
    if per_bank > spec.bank_bytes:
        raise _fail(
            f"{policy} placement puts {per_bank} bytes in one bank but a bank of {spec.name} holds {spec.bank_bytes}",
            "use 'interleaved' or 'blocked' to spread the tensor over all banks",
        )
    if nbytes == 0:
        return tensor
    start = tensor.data_ptr()
    gran = (granularity or DEFAULT_GRANULARITY) if policy == "interleaved" else None
    placement = Placement(policy, bank if policy == "bank" else None, gran, nbytes, start)
    global _generation
    token = next(_tokens)
    entry = _Entry(start, start + nbytes, placement)
    with _lock:
        _apply_freed()
        _entries[token] = entry
        _generation += 1
    weakref.finalize(tensor.untyped_storage(), _drop, token)
    return tensor


def placement_of(data_ptr: int, nbytes: int) -> Placement:
    """The placement of the buffer [data_ptr, data_ptr + nbytes): the newest placed range holding it,
    else the default (interleaved relative to `data_ptr`)."""
    end = data_ptr + max(int(nbytes), 0)
    with _lock:
        _apply_freed()
        best = None
        for token, e in _entries.items():
            if e.start <= data_ptr and end <= e.end and (best is None or token > best[0]):
                best = (token, e)
    if best is not None:
        return best[1].placement
    return Placement("interleaved", None, DEFAULT_GRANULARITY, int(nbytes), int(data_ptr))


def placement_signature(*tensors: Any) -> tuple[Any, ...]:
    """Hashable summary of the tensors' placements for tuning keys; non-tensors give None."""
    import torch

    out: list[Any] = []
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.device.type == "cpu":
            out.append(placement_of(t.data_ptr(), _extent_bytes(t)).signature())
        else:
            out.append(None)
    return tuple(out)

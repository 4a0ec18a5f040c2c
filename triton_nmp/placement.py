"""Where tensors live: the bank placement of kernel buffers on the nmp mesh.

Every PU owns one DRAM bank (bank i belongs to PU i). Whether a DMA is fast (own bank) or slow
(another PU's bank, over the NoC) depends on which bank holds the bytes it moves, so the timing
model asks this module, per kernel argument, how bytes map to banks.

Policies (`place(tensor, policy, ...)`):

- ``"auto"`` (what every tensor gets unless told otherwise, `set_default_policy`): the layout is
  chosen at the tensor's first kernel launch from that launch's footprint (`triton_nmp.auto_layout`:
  one of the layouts below, matched to the programs that move the bytes), and kept. Such a
  placement is marked `chosen`; tuning keys read it as the layout chosen (a tensor still open reads
  as "auto", and the autotuner searches its layout: `triton_nmp.tuning.layouts`).
- ``"interleaved"`` (the layout of unplaced buffers in the timing model): consecutive
  `granularity`-byte chunks go to banks
  0, 1, ..., P-1, 0, 1, ... (P = number of PUs). `DEFAULT_GRANULARITY` = 1024 B: a multiple of the
  32 B DMA granule (an aligned granule never straddles two banks), small enough that a 16 KiB block
  is spread over 16 banks (no hot bank when all PUs stream), large enough that a 64-128 B tile row
  stays within one bank.
- ``"blocked"``: the tensor's bytes are split into P contiguous chunks of ceil(nbytes / P) bytes,
  chunk i in bank i (the tail, if any, belongs to the last bank). Pair it with
  ``pu_mapping="locality"`` for streaming kernels whose program blocks line up with the chunks.
- ``"replicated"``: a copy in every bank, so every read is local; a store writes every copy (a
  broadcast: one local, P - 1 over the mesh, all charged by the timing model).
- ``bank=<int>`` (policy ``"bank"``): the whole tensor in one bank.

Address -> bank mapping: positions are taken **relative to the start of the placed byte range**,
not as absolute host addresses. The torch CPU allocator hands out addresses with an arbitrary
offset modulo the interleave period (and a different one on every run); a device allocator would
align each allocation to its interleave granularity. Relative addressing models that allocator and
keeps simulated time deterministic: the same kernel on the same shapes gives the same cycles
whatever address the host allocator chose. Unplaced buffers are interleaved relative to their own
first byte.

Moving data is never free: a tensor that was never placed is host data, and the first placement of
it (a place() call, or the first launch that reads it) writes it into the banks over the host link;
placing a tensor that lives in the banks under another layout re-lays it out over the mesh. Both are
transfers on the simulated clock (`simulator.transfer`), shown by profiles. Every decision is logged
(`decisions()`, `triton-nmp placement show`).

`Placement` and the registry of placed byte ranges (`lookup`, `placement_of`,
`placement_generation`, re-exported here) live in `triton_nmp.placement_registry`, which the
simulator imports without this module's policies and transfers. The registry is keyed by byte range
and does not keep tensors alive: an entry is dropped when the tensor's storage is freed. A view of
a placed tensor inherits the placement (with its offset inside the placed range); placing a
sub-range of an already placed tensor overrides it for that sub-range (the most recent placement
containing an argument's bytes wins).
"""

from __future__ import annotations

import difflib
import math
import os
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from triton_nmp import placement_registry as registry
from triton_nmp.errors import NMPError
from triton_nmp.placement_registry import (
    DEFAULT_GRANULARITY,
    Placement,
    extent_bytes,
    lookup,
    placement_generation,
    placement_of,
    trial,
)
from triton_nmp.target import active_target

__all__ = [
    "DEFAULT_GRANULARITY",
    "POLICIES",
    "NEW_TENSOR_POLICIES",
    "Decision",
    "assign",
    "decisions",
    "default_policy",
    "set_default_policy",
    "lookup",
    "NMPPlacementError",
    "Placement",
    "place",
    "placement_of",
    "placement_signature",
    "placement_generation",
    "clear_placements",
    "trial",
]

POLICIES: tuple[str, ...] = ("interleaved", "blocked", "replicated", "bank", "auto")
NEW_TENSOR_POLICIES: tuple[str, ...] = ("auto", "interleaved", "blocked", "replicated")


class NMPPlacementError(NMPError, ValueError):
    """A `place()` request that cannot be honoured (unknown policy, bank out of range, too big...)."""


_default_policy = os.environ.get("TRITON_NMP_PLACEMENT", "auto") or "auto"


def clear_placements() -> None:
    """Forget every placement and decision (tests; tensors already placed are host data again)."""
    registry.forget_all()
    with _decisions_lock:
        _decisions.clear()


def default_policy() -> str:
    """The policy new tensors get at their first kernel launch ("auto" unless set otherwise)."""
    return _default_policy


def set_default_policy(policy: str) -> str:
    """Set the policy of tensors that were never placed, returning the previous one.

    "auto" (the default; also `TRITON_NMP_PLACEMENT`): at its first kernel launch a tensor gets the
    layout that launch's footprint asks for (`triton_nmp.auto_layout`). "interleaved", "blocked" or
    "replicated": that layout, whatever the kernel. Either way the first launch that reads a tensor
    pays for writing its host data into the banks (a transfer on the simulated clock)."""
    global _default_policy
    if policy not in NEW_TENSOR_POLICIES:
        raise _fail(f"unknown default policy {policy!r}", f"choose one of {', '.join(NEW_TENSOR_POLICIES)}")
    old, _default_policy = _default_policy, policy
    registry.bump_generation()
    return old


def describe_tensor(t: Any) -> str:
    """'fp32[4096, 1024] (16.0 MiB)' for reports."""
    dtype = str(t.dtype).replace("torch.", "").replace("float", "fp")
    size = extent_bytes(t)
    return f"{dtype}{list(t.shape)} ({size / 2**20:.1f} MiB)" if size >= 2**20 else f"{dtype}{list(t.shape)} ({size} B)"


def _fail(what: str, todo: str) -> NMPPlacementError:
    return NMPPlacementError(f"place(): {what}; {todo}")


def _check_capacity(policy: str, nbytes: int, spec: Any) -> None:
    nbanks = spec.num_pus
    per_bank = nbytes if policy in ("replicated", "bank") else math.ceil(nbytes / nbanks)
    if per_bank > spec.bank_bytes:
        raise _fail(
            f"{policy} placement puts {per_bank} bytes in one bank but a bank of {spec.name} holds {spec.bank_bytes}",
            "use 'interleaved' or 'blocked' to spread the tensor over all banks",
        )


def place(tensor: Any, policy: str = "interleaved", *, bank: int | None = None, granularity: int | None = None,
          copy: bool = True) -> Any:
    """Place `tensor` in the banks of the active target and return it (so calls can be chained).

    `policy` is "interleaved" (optionally with `granularity` bytes per chunk), "blocked",
    "replicated", "bank" (`bank=<int>` alone selects it) or "auto" (the layout is chosen from the
    footprint of the first kernel that uses the tensor). The placement lasts as long as the
    tensor's memory and is checked against the active target (bank range, bank capacity).

    Moving data is charged on the simulated clock: placing host data writes it into the banks over
    the host link, placing a tensor that already lives in the banks re-lays it out over the mesh
    (`simulator.transfer`; both show in profiles as transfers). `copy=False` declares the current
    contents dead (an output buffer): nothing is moved.
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
    nbytes = extent_bytes(tensor)
    if policy != "auto":
        _check_capacity(policy, nbytes, spec)
    if nbytes == 0:
        return tensor
    start = tensor.data_ptr()
    gran = (granularity or DEFAULT_GRANULARITY) if policy == "interleaved" else None
    placement = Placement(policy, bank if policy == "bank" else None, gran, nbytes, start)
    assign(tensor, placement, copy=copy, why="place()")
    return tensor


def assign(tensor: Any, placement: Placement, *, copy: bool = True, dead: bool = False, why: str = "",
           name: str = "") -> None:
    """Record `placement` for the tensor's bytes and charge the move it implies (see `place`): a host
    write when the bytes were host data and `copy`, a re-layout when they lived in other banks, nothing
    when they are `dead` (the launch about to run overwrites every byte before reading any).
    `why` and `name` go to the decision log (`decisions()`) and the profile."""
    start, nbytes = tensor.data_ptr(), extent_bytes(tensor)
    old = lookup(start, nbytes)
    desc = (f"{name}: " if name else "") + describe_tensor(tensor)
    transfer = None
    if placement.policy != "auto" and not dead:
        if old is not None and old.policy != "auto":
            same = old.layout_signature() == placement.layout_signature() and old.origin == placement.origin
            if not same:
                transfer = ("relayout", old, start - old.origin)
        elif copy:
            transfer = ("host_write", None, 0)
    registry.record(tensor, placement)
    _log(Decision(desc, placement.describe(), why, transfer[0] if transfer else ""))
    if transfer is not None:
        _charge(transfer[0], transfer[1], transfer[2], placement, nbytes, desc)


def _charge(kind: str, old: Placement | None, old_base: int, new: Placement, nbytes: int, desc: str) -> None:
    """Put the transfer on the simulated clock (in order with kernel launches)."""
    from triton_nmp.driver.device import clock
    from triton_nmp.simulator import transfer

    spec = active_target()
    if kind == "host_write":
        t = transfer.host_write(new, nbytes, spec, desc)
    else:
        t = transfer.relayout(old, old_base, new, nbytes, spec, desc)
    clock.submit_transfer(t, spec)


# ------------------------------------------------------------------------------------ decisions


@dataclass(frozen=True)
class Decision:
    """One placement decision, for `decisions()`, profiles and `triton-nmp placement show`."""

    tensor: str
    layout: str
    why: str
    transfer: str = ""  # "host_write", "relayout" or "" (nothing moved)


_decisions: list[Decision] = []
_decisions_lock = threading.Lock()
MAX_DECISIONS = 4096


def _log(d: Decision) -> None:
    with _decisions_lock:
        _decisions.append(d)
        if len(_decisions) > MAX_DECISIONS:
            del _decisions[: len(_decisions) - MAX_DECISIONS]


def decisions() -> list[Decision]:
    """The most recent placement decisions (at most MAX_DECISIONS), oldest first."""
    with _decisions_lock:
        return list(_decisions)


def placement_signature(*tensors: Any) -> tuple[Any, ...]:
    """Hashable summary of the tensors' placements for tuning keys; non-tensors give None. A view of a
    placed range carries where it falls on the banks (`Placement.view_signature`)."""
    import torch

    out: list[Any] = []
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.device.type == "cpu":
            found = lookup(t.data_ptr(), extent_bytes(t))
            if found is None:  # host data: laid out at first use by the default policy
                out.append((_default_policy, None, None) if _default_policy == "auto"
                           else placement_of(t.data_ptr(), extent_bytes(t)).signature())
            else:
                view = found.view_signature(t.data_ptr() - found.origin, extent_bytes(t), active_target().num_pus)
                out.append(found.signature() + view)
        else:
            out.append(None)
    return tuple(out)

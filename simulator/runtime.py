"""Run a compiled grid natively and turn its status/context words into results or Python errors.

The ABI between compiled kernels and this runtime (entry prototype, context words, status codes,
trace records) is `triton_nmp.abi`. The entry loops over all programs itself (a Python loop per
program would cost microseconds each). The runtime copies the trace into numpy and frees it after
every launch, successful or not.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from triton_nmp.abi import (
    COUNTERS_BASE,
    CTX_ARG,
    CTX_HI,
    CTX_LO,
    CTX_PID,
    CTX_SITE,
    CTX_STATUS,
    CTX_TRACE_LEN,
    CTX_TRACE_ON,
    CTX_TRACE_PTR,
    CTX_WORDS,
    MAX_COUNTERS,
    MAX_TRACE_RECORDS,
    SPILL_ARG,
    STATUS_ASSERT,
    STATUS_CYCLE_LIMIT,
    STATUS_INTERRUPTED,
    STATUS_NO_MEMORY,
    STATUS_OK,
    STATUS_OUT_OF_BOUNDS,
    STATUS_TIMEOUT,
    TRACE_WORDS,
    metadata_value,
)
from triton_nmp.errors import (
    NMPDeviceAssertError,
    NMPLaunchError,
    NMPOutOfBoundsError,
    NMPRuntimeError,
    NMPTimeoutError,
)

from . import watchdog

__all__ = [
    "CTX_WORDS",
    "COUNTERS_BASE",
    "MAX_COUNTERS",
    "STATUS_OK",
    "STATUS_OUT_OF_BOUNDS",
    "STATUS_ASSERT",
    "EntryFunction",
    "ArgInfo",
    "SiteInfo",
    "KernelABI",
    "LaunchResult",
    "entry_function",
    "make_slots",
    "run_grid",
    "raise_for_status",
    "add_launch_listener",
    "remove_launch_listener",
]

_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None
tracing_enabled = os.environ.get("TRITON_NMP_TRACE", "1") != "0"

_I64P = ctypes.POINTER(ctypes.c_int64)
# CFUNCTYPE (not PYFUNCTYPE) releases the GIL while the kernel runs.
EntryFunction = ctypes.CFUNCTYPE(ctypes.c_int64, _I64P, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, _I64P)
_Ctx = ctypes.c_int64 * CTX_WORDS


def entry_function(address: int) -> Any:
    """A ctypes callable for the entry at `address` (see the module docstring for the prototype)."""
    if not address:
        raise NMPRuntimeError("cannot call a kernel entry at address 0")
    return EntryFunction(address)


def make_slots(values: Sequence[int]) -> ctypes.Array:
    """An int64 slot array; never empty so the entry always gets a valid pointer."""
    return (ctypes.c_int64 * max(1, len(values)))(*values)


@dataclass(frozen=True)
class ArgInfo:
    """One non-constexpr, flattened kernel parameter (metadata["nmp_args"] entry)."""

    name: str
    kind: str  # "ptr" | "int" | "float"
    ty: str


@dataclass(frozen=True)
class SiteInfo:
    """A checked operation in the kernel (metadata["nmp_sites"] entry) errors point back to."""

    op: str
    loc: str
    arg: str = ""
    msg: str = ""  # optional: the text of a tl.device_assert


@dataclass(frozen=True)
class KernelABI:
    """What the runtime needs from a kernel's metadata, decoded once per kernel (not per launch)."""

    name: str
    entry: str
    args: tuple[ArgInfo, ...] = ()
    sites: tuple[SiteInfo, ...] = ()
    counters: tuple[str, ...] = ()

    @classmethod
    def from_metadata(cls, metadata: Any) -> KernelABI:
        """Accept Triton's KernelMetadata namedtuple, a dict (the JSON), or any object with attributes."""

        def get(key: str, default: Any) -> Any:
            return metadata_value(metadata, key, default)

        name = str(get("name", "") or "")
        counters = tuple(str(c) for c in (get("nmp_counters", None) or ()))
        if len(counters) > MAX_COUNTERS:
            raise NMPLaunchError(
                f"kernel '{name}' declares {len(counters)} counters, the context block holds {MAX_COUNTERS}"
            )
        args = tuple(ArgInfo(str(a["name"]), str(a["kind"]), str(a.get("ty", ""))) for a in get("nmp_args", ()) or ())
        sites = tuple(
            SiteInfo(str(s.get("op", "")), str(s.get("loc", "")), str(s.get("arg", "") or ""), str(s.get("msg", "")))
            for s in get("nmp_sites", ()) or ()
        )
        return cls(name, str(get("nmp_entry", "") or ""), args, sites, counters)


@dataclass
class LaunchResult:
    """Facts of one successful launch, handed to launch listeners (e.g. a profiler)."""

    grid: tuple[int, int, int]
    status: int = STATUS_OK
    counters: dict[str, int] = field(default_factory=dict)
    host_seconds: float = 0.0  # wall time of the native call on the host (not simulated time)
    trace: Any = None  # numpy int64 array (records, 8): the execution trace, None when tracing is off


LaunchListener = Callable[[Any, tuple[int, int, int], LaunchResult], None]
_listeners: list[LaunchListener] = []


def add_launch_listener(fn: LaunchListener) -> None:
    """Call `fn(metadata, grid, result)` after every successful launch (empty grids are not launches)."""
    if fn not in _listeners:
        _listeners.append(fn)


def remove_launch_listener(fn: LaunchListener) -> None:
    """Stop calling `fn`; removing a listener that is not registered is a no-op."""
    try:
        _listeners.remove(fn)
    except ValueError:
        pass


def _pid(ctx: Sequence[int]) -> tuple[int, int, int]:
    return (ctx[CTX_PID], ctx[CTX_PID + 1], ctx[CTX_PID + 2])


def raise_for_status(status: int, ctx: Sequence[int], abi: KernelABI, spans: Sequence[int] = ()) -> None:
    """Raise the Python error a non-zero status stands for. `spans[i]` is the byte span of argument i."""
    if status == STATUS_OK:
        return
    kernel = abi.name or abi.entry or "<kernel>"
    site_idx, arg_idx = ctx[CTX_SITE], ctx[CTX_ARG]
    site = abi.sites[site_idx] if 0 <= site_idx < len(abi.sites) else SiteInfo("<unknown op>", "<unknown location>")
    pid = _pid(ctx)
    if status == STATUS_OUT_OF_BOUNDS and arg_idx == SPILL_ARG:
        raise NMPOutOfBoundsError(
            f"kernel '{kernel}': {site.op} of a spilled tile touches bytes [{ctx[CTX_LO]}, {ctx[CTX_HI]}) outside "
            f"the program's spill area, at {site.loc}, program {pid}; nothing outside it was accessed. This is a "
            f"compiler bug in spilling: please report it with the kernel")
    if status == STATUS_OUT_OF_BOUNDS:
        if 0 <= arg_idx < len(abi.args):
            arg = abi.args[arg_idx].name
        else:
            arg = site.arg or f"#{arg_idx}"
        lo, hi = ctx[CTX_LO], ctx[CTX_HI]
        span = spans[arg_idx] if 0 <= arg_idx < len(spans) else None
        extent = f"the tensor spans [0, {span}) bytes" if span is not None else "the tensor's extent is unknown"
        err = NMPOutOfBoundsError(
            f"kernel '{kernel}': {site.op} of argument '{arg}' touches bytes [{lo}, {hi}) but {extent}, "
            f"at {site.loc}, program {pid}; no memory outside the tensor was accessed. "
            f"Check the mask of this access."
        )
        err.kernel, err.op, err.arg, err.loc, err.program_id = kernel, site.op, arg, site.loc, pid
        err.byte_range, err.span_bytes = (lo, hi), span
        raise err
    if status == STATUS_ASSERT:
        what = f" ({site.msg})" if site.msg else ""
        err = NMPDeviceAssertError(f"kernel '{kernel}': device assertion failed{what} at {site.loc}, program {pid}")
        err.kernel, err.loc, err.program_id = kernel, site.loc, pid
        raise err
    if status == STATUS_NO_MEMORY:
        raise NMPRuntimeError(f"kernel '{kernel}': the execution trace exceeded its limit "
                              f"({MAX_TRACE_RECORDS >> 20}M records) or host "
                              f"memory (program {pid}), so it cannot be timed. A loop that never ends stops "
                              f"here; if the kernel does end, run it on a smaller problem, or set "
                              f"TRITON_NMP_TRACE=0 to run it without timing (the watchdog's limits still apply)")
    if status in (STATUS_TIMEOUT, STATUS_CYCLE_LIMIT):
        limits = watchdog.watchdog_limits()
        what = limits.describe_seconds() if status == STATUS_TIMEOUT else limits.describe_cycles()
        knob = "max_seconds" if status == STATUS_TIMEOUT else "max_cycles"
        err = NMPTimeoutError(
            f"kernel '{kernel}': stopped by the watchdog after more than {what}, in program {pid} at "
            f"{site.loc}. A loop that never ends (say, spinning on memory nothing writes) stops here; if the "
            f"kernel does end, raise the limit (0 disables it) or use triton_nmp.set_watchdog({knob}=...)"
        )
        err.kernel, err.loc, err.program_id = kernel, site.loc, pid
        raise err
    if status == STATUS_INTERRUPTED:
        watchdog.take_exception(ctx)  # raises what the signal handler raised (KeyboardInterrupt for Ctrl-C)
        raise KeyboardInterrupt(f"kernel '{kernel}' was stopped in program {pid} at {site.loc}")
    raise NMPRuntimeError(
        f"kernel '{kernel}' returned unknown status {status} (site {site_idx}, program {pid}); "
        f"the compiler and the runtime disagree on the ABI"
    )


def _take_trace(ctx: ctypes.Array, keep: bool = True) -> Any:
    """Copy the kernel's trace records into numpy (unless `keep` is false: a failed launch's trace
    is never timed) and free the native buffer."""
    ptr, n = ctx[CTX_TRACE_PTR], ctx[CTX_TRACE_LEN]
    if not ptr:
        return None
    if not keep:
        _libc.free(ptr)
        ctx[CTX_TRACE_PTR] = 0
        return None
    try:
        import numpy as np

        buf = (ctypes.c_int64 * (n * TRACE_WORDS)).from_address(ptr)
        return np.frombuffer(buf, dtype=np.int64).reshape(n, TRACE_WORDS).copy()
    finally:
        _libc.free(ptr)
        ctx[CTX_TRACE_PTR] = 0


def run_grid(
    fn: Any,
    slots: ctypes.Array,
    grid: tuple[int, int, int],
    abi: KernelABI,
    spans: Sequence[int] = (),
    metadata: Any = None,
    spec: Any = None,
) -> LaunchResult:
    """Run every program of `grid` through entry `fn`, raise on a device error, notify listeners.

    `fn` comes from `entry_function`, `slots` from `make_slots`. An empty grid runs nothing and is not
    reported to listeners. `metadata` is passed through to listeners (defaults to `abi`). `spec` (the
    target) sizes the watchdog's simulated-cycle bound; without it only the host-time limit applies.
    """
    gx, gy, gz = grid
    if gx < 0 or gy < 0 or gz < 0:
        raise NMPLaunchError(f"kernel '{abi.name}': negative grid {grid}")
    if gx == 0 or gy == 0 or gz == 0:
        return LaunchResult((gx, gy, gz))
    ctx = _Ctx()
    ctx[CTX_TRACE_ON] = 1 if tracing_enabled else 0
    watchdog.arm(ctx, spec)
    t0 = time.perf_counter()
    ret = None
    try:
        ret = fn(slots, gx, gy, gz, ctx)
    finally:
        trace = _take_trace(ctx, keep=ret == 0 and ctx[CTX_STATUS] == 0)
    elapsed = time.perf_counter() - t0
    status = ret or ctx[CTX_STATUS]
    if status:
        raise_for_status(status, ctx, abi, spans)
    n = len(abi.counters)
    result = LaunchResult(
        (gx, gy, gz), STATUS_OK, dict(zip(abi.counters, ctx[COUNTERS_BASE : COUNTERS_BASE + n])), elapsed,
        trace,
    )
    if _listeners:
        meta = abi if metadata is None else metadata
        for listener in tuple(_listeners):
            listener(meta, result.grid, result)
    return result

"""The watchdog: stop a launch that runs too long, or that the user interrupts, with an error.

Contract with the compiled code (words of the context block, `triton_nmp.abi`): every loop back-edge
(`scf.for`, `scf.while`) and every program of the grid loop decrements `ctx[CTX_WD_TICKS]`; when it
reaches zero the kernel calls the runtime library's `watchdog` helper, which refills the ticks
(WATCHDOG_TICKS), adds them to `ctx[CTX_WD_ITERS]` and returns a non-zero status to stop the launch when

* `ctx[CTX_WD_STOP]` is set (another thread asked the launch to stop),
* the host's monotonic clock passed `ctx[CTX_WD_DEADLINE_NS]` (STATUS_TIMEOUT),
* a lower bound of the simulated cycles of the work done so far passed `ctx[CTX_WD_CYCLE_LIMIT]`
  (STATUS_CYCLE_LIMIT): max(bytes moved x CTX_WD_C_BYTE, MACs x CTX_WD_C_MAC, vector elements x
  CTX_WD_C_VEC, loop iterations x CTX_WD_C_ITER), coefficients being cycles per unit with every PU
  busy (doubles), so the launch would certainly take longer than the limit on the target,
* the launching thread is Python's main thread (`ctx[CTX_WD_SIGNALS]`) and, checked at most every
  SIGNAL_CHECK_NS, a signal handler raised (Ctrl-C): the helper takes the GIL, runs
  `PyErr_CheckSignals`, and parks the raised exception in `ctx[CTX_WD_EXC:+3]` (STATUS_INTERRUPTED);
  the runtime re-raises exactly that exception.

Both limits apply with the execution trace on and off. Knobs: `set_watchdog(max_seconds=...,
max_cycles=...)`, or the environment variables TRITON_NMP_MAX_SECONDS (host seconds per launch,
default 600) and TRITON_NMP_MAX_CYCLES (simulated cycles per launch, default 1e11: 100 s of a 1 GHz
target); 0 disables a limit.
"""

from __future__ import annotations

import ctypes
import math
import os
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any

from triton_nmp.abi import (
    CTX_WD_C_BYTE,
    CTX_WD_C_ITER,
    CTX_WD_C_MAC,
    CTX_WD_C_VEC,
    CTX_WD_CYCLE_LIMIT,
    CTX_WD_DEADLINE_NS,
    CTX_WD_EXC,
    CTX_WD_SIGNALS,
    CTX_WD_TICKS,
    WATCHDOG_TICKS,
)

__all__ = ["WatchdogLimits", "set_watchdog", "watchdog_limits", "arm", "take_exception"]

DEFAULT_MAX_SECONDS = 600.0
DEFAULT_MAX_CYCLES = 1e11
_pack_d = struct.Struct("<d").pack
_unpack_q = struct.Struct("<q").unpack


def _bits(x: float) -> int:
    return _unpack_q(_pack_d(float(x)))[0]


def _env_limit(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number (0 disables the limit)") from None
    if not value >= 0:
        raise ValueError(f"{name}={raw!r} must be >= 0 (0 disables the limit)")
    return value


@dataclass(frozen=True)
class WatchdogLimits:
    """Per-launch limits; 0 (or inf) means none."""

    max_seconds: float = DEFAULT_MAX_SECONDS  # host wall-clock seconds of the native run
    max_cycles: float = DEFAULT_MAX_CYCLES  # simulated cycles (a lower bound from the work done)

    def describe_seconds(self) -> str:
        return f"{self.max_seconds:g} s of host time (TRITON_NMP_MAX_SECONDS)"

    def describe_cycles(self) -> str:
        return f"{self.max_cycles:.3g} simulated cycles (TRITON_NMP_MAX_CYCLES)"


_limits: WatchdogLimits | None = None
_main_thread = threading.main_thread()


def watchdog_limits() -> WatchdogLimits:
    """The limits in force: `set_watchdog`'s, else the environment's (read once)."""
    global _limits
    if _limits is None:
        _limits = WatchdogLimits(_env_limit("TRITON_NMP_MAX_SECONDS", DEFAULT_MAX_SECONDS),
                                 _env_limit("TRITON_NMP_MAX_CYCLES", DEFAULT_MAX_CYCLES))
    return _limits


def set_watchdog(max_seconds: float | None = None, max_cycles: float | None = None) -> WatchdogLimits:
    """Set the per-launch limits (None keeps a limit as it is, 0 disables it); returns the previous ones."""
    global _limits
    old = watchdog_limits()
    for name, v in (("max_seconds", max_seconds), ("max_cycles", max_cycles)):
        if v is not None and not (isinstance(v, int | float) and v >= 0):
            raise ValueError(f"set_watchdog({name}={v!r}): expected a number >= 0 (0 disables the limit)")
    _limits = WatchdogLimits(old.max_seconds if max_seconds is None else float(max_seconds),
                             old.max_cycles if max_cycles is None else float(max_cycles))
    return old


@dataclass(frozen=True)
class _Costs:
    """Cycles per unit of work with every PU of a target busy (the coefficients of the lower bound)."""

    byte: int
    mac: int
    vec: int
    iteration: int


_costs_by_spec: dict[int, tuple[Any, _Costs]] = {}


def _costs(spec: Any) -> _Costs:
    hit = _costs_by_spec.get(id(spec))
    if hit is not None and hit[0] is spec:
        return hit[1]
    pus = max(1, int(getattr(spec, "num_pus", 1)))
    try:
        macs = max(spec.peak_macs_per_cycle(d) for d in ("fp16", "bf16", "fp32", "int8"))
    except (AttributeError, KeyError, ValueError, TypeError):
        macs = 1.0
    lanes = float(getattr(spec, "vector_fp32_lanes", 1) or 1)
    bank = float(getattr(spec, "bank_bytes_per_cycle", 1) or 1)
    costs = _Costs(_bits(1.0 / (pus * bank)), _bits(1.0 / (pus * max(macs, 1e-9))), _bits(1.0 / (pus * lanes)),
                   _bits(1.0 / pus))
    _costs_by_spec[id(spec)] = (spec, costs)
    return costs


def arm(ctx: Any, spec: Any) -> WatchdogLimits:
    """Fill the watchdog words of a fresh context block for one launch on target `spec`."""
    limits = watchdog_limits()
    ctx[CTX_WD_TICKS] = WATCHDOG_TICKS
    if limits.max_seconds > 0 and math.isfinite(limits.max_seconds):
        ctx[CTX_WD_DEADLINE_NS] = time.monotonic_ns() + int(limits.max_seconds * 1e9)
    if limits.max_cycles > 0 and math.isfinite(limits.max_cycles) and spec is not None:
        c = _costs(spec)
        ctx[CTX_WD_CYCLE_LIMIT] = _bits(limits.max_cycles)
        ctx[CTX_WD_C_BYTE], ctx[CTX_WD_C_MAC], ctx[CTX_WD_C_VEC], ctx[CTX_WD_C_ITER] = c.byte, c.mac, c.vec, c.iteration
    if threading.current_thread() is _main_thread:
        ctx[CTX_WD_SIGNALS] = 1
    return limits


_restore = ctypes.pythonapi.PyErr_Restore
_restore.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
_restore.restype = None


def take_exception(ctx: Any) -> None:
    """Re-raise the exception a signal handler raised inside the kernel (parked in the context block).

    The references are owned by the context block (PyErr_Fetch); PyErr_Restore steals them, and
    ctypes raises the restored exception as soon as the call returns. No-op when nothing is parked.
    """
    typ, val, tb = ctx[CTX_WD_EXC], ctx[CTX_WD_EXC + 1], ctx[CTX_WD_EXC + 2]
    if not typ:
        return
    ctx[CTX_WD_EXC] = ctx[CTX_WD_EXC + 1] = ctx[CTX_WD_EXC + 2] = 0
    _restore(typ, val or None, tb or None)


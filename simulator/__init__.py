"""The nmp simulator: loads compiled objects, runs grids natively, reports errors and counters.

`loader` (which imports llvmlite) is imported on first use so that importing Triton, which imports
the nmp driver during backend discovery, stays fast.
"""

from __future__ import annotations

from typing import Any

from .runtime import (
    KernelABI,
    LaunchResult,
    add_launch_listener,
    remove_launch_listener,
    run_grid,
)

__all__ = [
    "KernelABI",
    "LaunchResult",
    "add_launch_listener",
    "remove_launch_listener",
    "run_grid",
    "load_object",
    "LoadedObject",
    "NMPLoadError",
]

_LAZY = {"load_object", "LoadedObject", "NMPLoadError"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import loader

        return getattr(loader, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

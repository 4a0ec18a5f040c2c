"""triton-nmp: run stock Triton kernels on nmp, a simulated compute-near-memory accelerator.

    import triton_nmp
    triton_nmp.activate(target="nmp-64")   # automatic when no GPU driver is active
"""

from __future__ import annotations

# Triton first: importing it discovers our backend, which imports triton_nmp.errors while Triton is
# importing; were triton_nmp first, errors.py would start Triton's import from inside its own and the
# scratchpad-overflow error could not subclass Triton's OutOfResources (and `import triton` broke).
import triton  # noqa: F401  isort: skip

from .errors import (
    NMPCompilationError,
    NMPDeviceAssertError,
    NMPError,
    NMPLaunchError,
    NMPOutOfBoundsError,
    NMPRuntimeError,
    NMPTargetError,
    NMPTimeoutError,
)
from .placement import decisions as placement_decisions
from .placement import default_policy as default_placement
from .placement import place, placement_signature
from .placement import set_default_policy as set_default_placement
from .target import TargetSpec, active_target, set_active_target

__version__ = "0.1.0"

__all__ = [
    "activate",
    "place",
    "placement_signature",
    "set_default_placement",
    "default_placement",
    "placement_decisions",
    "profile",
    "prune_configs_by",
    "autotune",
    "config_space",
    "last_pruned",
    "export_table",
    "check_config",
    "TargetSpec",
    "active_target",
    "NMPError",
    "NMPCompilationError",
    "NMPRuntimeError",
    "NMPOutOfBoundsError",
    "NMPDeviceAssertError",
    "NMPLaunchError",
    "NMPTargetError",
    "NMPTimeoutError",
    "set_watchdog",
]


def activate(target: str | TargetSpec | None = None):
    """Make nmp Triton's active driver, optionally on another target (preset name, TOML path or spec).

    Returns the driver. Kernels compiled for a previous target are not reused: the target's hash is
    part of the compilation target Triton keys its caches on.
    """
    from .driver.driver import NMPDriver

    if target is not None:
        set_active_target(target if isinstance(target, TargetSpec) else TargetSpec.load(target))
    active = triton.runtime.driver.active if triton.runtime.driver._active is not None else None
    if isinstance(active, NMPDriver):
        return active
    drv = NMPDriver()
    triton.runtime.driver.set_active(drv)
    return drv


_LAZY = {
    "profile": ("triton_nmp.profiler", "profile"),
    "Profile": ("triton_nmp.profiler", "Profile"),
    "LaunchRecord": ("triton_nmp.profiler", "LaunchRecord"),
    "autotune": ("triton_nmp.tuning", "autotune"),
    "prune_configs_by": ("triton_nmp.tuning", "prune_configs_by"),
    "config_space": ("triton_nmp.tuning", "config_space"),
    "last_pruned": ("triton_nmp.tuning", "last_pruned"),
    "export_table": ("triton_nmp.tuning", "export_table"),
    "prune_illegal": ("triton_nmp.tuning", "prune_illegal"),
    "TuningCache": ("triton_nmp.tuning", "TuningCache"),
    "check_config": ("triton_nmp.legality", "check_config"),
    "set_watchdog": ("triton_nmp.simulator.watchdog", "set_watchdog"),
}


def __getattr__(name: str):
    """Heavier parts (they import triton) load on first use, so `import triton_nmp` stays light."""
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'triton_nmp' has no attribute '{name}'")

"""The nmp Triton driver: target/device queries, binary loading, argument marshalling, launching."""

import triton  # noqa: F401  (first: triton's backend discovery imports this package back)

from .device import NMPDeviceInterface, device_interface
from .driver import NMPDriver, NMPUtils, target_arch
from .launcher import NMPLauncher

__all__ = ["NMPDriver", "NMPUtils", "NMPLauncher", "NMPDeviceInterface", "device_interface", "target_arch"]

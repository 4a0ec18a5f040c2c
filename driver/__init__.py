"""The nmp Triton driver: target/device queries, binary loading, argument marshalling, launching."""

from .device import NMPDeviceInterface, device_interface
from .driver import NMPDriver, NMPUtils, target_arch
from .launcher import NMPLauncher

__all__ = ["NMPDriver", "NMPUtils", "NMPLauncher", "NMPDeviceInterface", "device_interface", "target_arch"]

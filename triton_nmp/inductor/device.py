"""torch's CPU device, as Inductor sees it when nmp is Triton's CPU backend.

Inductor takes a Triton kernel's device properties from the device interface registered for the tensor's
device (`torch._dynamo.device_interface`); for CPU tensors that is `CpuInterface`, which reports the host's
core count and an empty compute capability. `NMPCpuInterface` reports the nmp target instead:

* `multi_processor_count` = the target's PUs (Inductor sizes split reductions and grids by it),
  `max_shared_memory` = the scratchpad, `warp_size` = 1;
* the compute capability is the target's arch string (`"nmp-64:<hash>"`): it lands in every generated
  kernel's `triton_meta`, so Inductor's kernel caches key on the target, and compile workers compile for the
  parent's target (`triton_nmp.target_registry`);
* `device()` is a no-op context manager (torch's `CpuInterface.device` raises `NotImplementedError`, which
  max-autotune's benchmarking calls; see upstream_patches/pytorch).

Host-side torch (C++ codegen, eager CPU ops) never reads these properties, only Inductor's Triton paths do.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from torch._dynamo.device_interface import CpuInterface, get_interface_for_device, register_interface_for_device

from triton_nmp.target import active_target
from triton_nmp.target_registry import publish

__all__ = ["NMPCpuDeviceProperties", "NMPCpuInterface", "install", "uninstall"]


@dataclass(frozen=True)
class NMPCpuDeviceProperties:
    """What Inductor reads of a device's properties (`hints.DeviceProperties.create`)."""

    multi_processor_count: int
    max_shared_memory: int
    warp_size: int = 1
    name: str = "nmp"


def _properties() -> NMPCpuDeviceProperties:
    spec = active_target()
    return NMPCpuDeviceProperties(multi_processor_count=spec.num_pus, max_shared_memory=spec.spm_bytes,
                                  name=f"nmp ({spec.name})")


class NMPCpuInterface(CpuInterface):
    """`CpuInterface` with the nmp target's properties (see the module docstring)."""

    class Worker(CpuInterface.Worker):
        @staticmethod
        def get_device_properties(device: Any = None) -> NMPCpuDeviceProperties:
            return _properties()

    class device:  # noqa: N801  (torch's interface names it so)
        """A no-op device guard: nmp has one device per target."""

        def __init__(self, device: Any) -> None:
            self.device = device

        def __enter__(self) -> None:
            return None

        def __exit__(self, *exc: Any) -> None:
            return None

    @staticmethod
    def get_compute_capability(device: Any = None) -> str:
        return publish(active_target())

    @staticmethod
    def raise_if_triton_unavailable(device: Any = None) -> None:
        return None


_previous: type | None = None


def install() -> None:
    """Register `NMPCpuInterface` for "cpu" (idempotent) and forget device properties Inductor cached."""
    global _previous
    current = get_interface_for_device("cpu")  # also runs torch's lazy registration first
    if current is NMPCpuInterface:
        return
    _previous = current
    register_interface_for_device("cpu", NMPCpuInterface)
    _forget_cached_properties()


def uninstall() -> None:
    global _previous
    if _previous is not None:
        register_interface_for_device("cpu", _previous)
        _previous = None
        _forget_cached_properties()


def _forget_cached_properties() -> None:
    from torch._inductor.runtime.hints import DeviceProperties

    with contextlib.suppress(AttributeError):
        DeviceProperties.create.__func__.cache_clear()

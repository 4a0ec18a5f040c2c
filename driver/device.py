"""A torch.cuda-shaped device interface for the nmp device, so Triton's benchmarking code runs on CPU.

`triton.testing.do_bench` only needs `synchronize()` and `Event(enable_timing=True)` with `record()`
and `elapsed_time(other)` in milliseconds. Launches are synchronous (the simulator returns when the
grid is done), so synchronize is a no-op and events are host timestamps. The stream helpers exist so
code written against `torch.cuda` (stream contexts, default streams) does not trip over nmp.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["Event", "Stream", "NMPDeviceInterface", "device_interface"]


class Event:
    """A host-clock event; `elapsed_time` is in milliseconds like torch.cuda.Event."""

    __slots__ = ("enable_timing", "_t")

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self._t: float | None = None

    def record(self, stream: Any = None) -> None:
        self._t = time.perf_counter()

    def elapsed_time(self, end_event: Event) -> float:
        if self._t is None or end_event._t is None:
            raise RuntimeError("both events must be recorded before elapsed_time() is called")
        return (end_event._t - self._t) * 1e3

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def wait(self, stream: Any = None) -> None:
        pass


class Stream:
    """The single, synchronous nmp stream (handle 0)."""

    cuda_stream = 0
    stream_id = 0

    def __init__(self, device: Any = None, priority: int = 0, **_: Any):
        self.device = device

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def wait_stream(self, other: Any) -> None:
        pass

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event


class NMPDeviceInterface:
    """The subset of the torch.cuda module interface that Triton uses, for one synchronous device."""

    Event = Event
    Stream = Stream
    ExternalStream = Stream

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def set_device(device: Any) -> None:
        pass

    @staticmethod
    def synchronize(device: Any = None) -> None:
        pass  # launches return only when the whole grid has run

    @staticmethod
    def current_stream(device: Any = None) -> Stream:
        return Stream(device)

    @staticmethod
    def default_stream(device: Any = None) -> Stream:
        return Stream(device)

    @staticmethod
    @contextlib.contextmanager
    def stream(stream: Any = None) -> Iterator[Any]:
        yield stream

    @staticmethod
    @contextlib.contextmanager
    def device(device: Any = None) -> Iterator[Any]:
        yield device

    @staticmethod
    def get_device_properties(device: Any = None) -> dict[str, Any]:
        from .driver import NMPUtils

        return NMPUtils().get_device_properties(device)

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        from triton_nmp.target import active_target

        return f"nmp ({active_target().name})"


device_interface = NMPDeviceInterface()

"""The Triton driver of the nmp backend: target, device, binary loading and launching.

nmp is simulated on the host, so the "device" is the CPU as far as torch is concerned: kernels take
torch CPU tensors, there is one device (0) and one synchronous stream (0).

warp_size is 1: an nmp program is a single instruction stream driving tile units, not a group of
SIMT threads. `num_warps` is therefore accepted (so existing kernels and autotune configs keep
working) and ignored by the hardware model.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from triton.backends.compiler import GPUTarget
from triton.backends.driver import DriverBase

from triton_nmp.target import target_arch

from .device import NMPDeviceInterface, clock, device_interface, device_properties
from .launcher import NMPLauncher

__all__ = ["NMPDriver", "NMPUtils", "target_arch"]

MAX_THREADS = 1 << 20  # num_warps * warp_size never limits a launch on nmp
# Registers per program that load_binary reports. Not 0: portable host code (Triton's softmax tutorial) sizes
# persistent grids with max_num_regs // (n_regs * warpSize * num_warps), which would divide by zero. 1 makes
# that register term as loose as it can be, so the scratchpad (metadata.shared) is the limit that binds.
N_REGS = 1
BENCH_CACHE_BYTES = 256  # nmp has no caches to flush; do_bench "flushes" once per timed call, so keep it tiny

_CPP_TYPES = {
    "i1": "int8_t",
    "i8": "int8_t",
    "i16": "int16_t",
    "i32": "int32_t",
    "i64": "int64_t",
    "u1": "uint8_t",
    "u8": "uint8_t",
    "u16": "uint16_t",
    "u32": "uint32_t",
    "u64": "uint64_t",
    "fp16": "double",
    "bf16": "double",
    "fp32": "double",
    "f32": "double",
    "fp64": "double",
}


class NMPUtils:
    """Binary loading and device properties (the `driver.utils` object Triton calls)."""

    def load_binary(self, name: str, kernel: bytes, shared: int, device: int) -> tuple[Any, int, int, int, int]:
        """Load an nmpbin; returns (module, function, n_regs, n_spills, n_max_threads) like CUDA's
        (n_regs is the nominal N_REGS, there are no spills).

        `module` is a `simulator.loader.LoadedObject` (it owns the code), `function` an address the
        launcher maps back to the module to resolve metadata["nmp_entry"].
        """
        from triton_nmp.simulator.loader import NMPLoadError, load_object

        obj = load_object(kernel, name)
        if not obj.key_address:
            obj.close()
            raise NMPLoadError(f"the object of kernel '{name}' defines no global function to call")
        return obj, obj.key_address, N_REGS, 0, MAX_THREADS

    def unload_module(self, module: Any) -> None:
        close = getattr(module, "close", None)
        if close is not None:
            close()

    def get_device_properties(self, device: Any = None) -> dict[str, Any]:
        return device_properties(device)


_DEVICE_IDS: dict[str, int] = {}
_DEVICE_IDS_LOCK = threading.Lock()


class NMPDriver(DriverBase):
    """Triton's entry point to the nmp simulator."""

    def __init__(self) -> None:
        super().__init__()
        self.utils = NMPUtils()
        self.launcher_cls = NMPLauncher
        self._target_cache: tuple[Any, GPUTarget] | None = None

    @staticmethod
    def is_active() -> bool:
        """Active when asked for explicitly, or when torch sees no CUDA/ROCm GPU to run Triton on."""
        if os.environ.get("TRITON_DEFAULT_BACKEND") == "nmp":
            return True
        torch = sys.modules.get("torch")
        if torch is None:
            try:
                import torch
            except ImportError:
                return True  # without torch no GPU backend can run either
        try:
            return not torch.cuda.is_available()
        except Exception:  # a broken CUDA install means no usable GPU
            return True

    # -- target and device -------------------------------------------------------------------------

    def get_current_target(self) -> GPUTarget:
        """`GPUTarget("cpu", "<target>:<hash>", 1)`: Triton's name for the backend of CPU tensors, so code that
        turns the name into a torch device works (`"nmp"` when another backend owns "cpu": see
        `triton_nmp.triton_name`)."""
        from triton_nmp.target import active_target
        from triton_nmp.triton_name import triton_name

        spec = active_target()
        cached = self._target_cache
        if cached is None or cached[0] is not spec:
            cached = (spec, GPUTarget(triton_name(), target_arch(spec), 1))
            self._target_cache = cached
        return cached[1]

    def get_active_torch_device(self) -> Any:
        import torch

        return torch.device("cpu")

    def get_current_device(self) -> int:
        """One device index per target description seen in this process.

        Triton keeps its per-device compile state (target, backend, binder) keyed by this index, so
        switching targets with `triton_nmp.activate(target=...)` must change it, or kernels would keep
        compiling for the previous target.
        """
        arch = self.get_current_target().arch
        idx = _DEVICE_IDS.get(arch)
        if idx is None:
            with _DEVICE_IDS_LOCK:
                idx = _DEVICE_IDS.setdefault(arch, len(_DEVICE_IDS))
        return idx

    def set_current_device(self, device: Any) -> None:
        if device in (None, "cpu") or getattr(device, "type", None) == "cpu":
            return
        if not isinstance(device, int) or device != self.get_current_device():
            raise ValueError(f"nmp has one device per target; select a target with triton_nmp.activate(), "
                             f"not device {device!r}")

    def get_current_stream(self, device: Any = None) -> int:
        return 0

    def get_device_interface(self) -> NMPDeviceInterface:
        return device_interface

    def get_autotune_hooks(self) -> Any:
        """Backend autotuning hooks (used by Triton with upstream_patches/triton applied);
        TRITON_NMP_AUTOTUNE_HOOKS=0 turns them off."""
        if os.environ.get("TRITON_NMP_AUTOTUNE_HOOKS", "1") == "0":
            return None
        from .autotune_hooks import hooks

        return hooks

    def map_python_to_cpp_type(self, ty: str) -> str:
        if ty.startswith("*"):
            return "void*"
        try:
            return _CPP_TYPES[ty]
        except KeyError:
            raise ValueError(f"type '{ty}' has no C equivalent on nmp") from None

    # -- benchmarking ------------------------------------------------------------------------------

    def get_benchmarker(self) -> Any:
        """The simulated-time benchmarker (`driver.benchmarker.do_bench`), which the autotuner uses.

        Simulated time is deterministic, so it runs the function once or twice instead of for 100 ms.
        """
        from .benchmarker import do_bench

        return do_bench

    def get_empty_cache_for_benchmark(self) -> Any:
        import torch

        return torch.empty(BENCH_CACHE_BYTES // 4, dtype=torch.int32)

    def clear_cache(self, cache: Any) -> None:
        """Called by `triton.testing.do_bench` before each timed call: nmp has no cache to flush, but the
        call delimits benchmark iterations, inside which identical launches are replayed from the
        timing memo instead of re-executed (see `driver.device`)."""
        cache.zero_()
        clock.note_clear_cache()

    def allocate_default_profile_scratch(self, size: int, alignment: int, stream: Any) -> Any:
        raise NotImplementedError("nmp kernels do not use profile scratch memory (proton is not supported)")

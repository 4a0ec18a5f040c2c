"""Plugin-side workarounds for PyTorch 2.13 bugs on Inductor's CPU + Triton path (fixed upstream by the
patches in upstream_patches/pytorch/; each is installed only while the bug is present).

1. `CpuDeviceOpOverrides.import_get_raw_stream_as` returns a multi-line `def` that Inductor formats into an
   indented template (`TritonKernel.imports_for_benchmark_kernel`): the generated benchmark module of
   max-autotune's fusion benchmarking fails with `IndentationError`. Replaced by a one-line definition that
   honours the requested name.
2. `CpuInterface.device()` raises `NotImplementedError`: fixed by `device.NMPCpuInterface`.
3. `CPUDeviceBenchmarkMixin.do_bench` (template benchmarking on CPU) calls `benchmarker.benchmark_cpu`
   directly, bypassing the device benchmarker registry (`register_benchmarker`): routed through
   `benchmarker.benchmark(fn, device="cpu")`, so max-autotune's template choice reads the simulated clock.
"""

from __future__ import annotations

from typing import Any

__all__ = ["install", "raw_stream_fixed_upstream", "cpu_benchmark_routed_upstream"]


def raw_stream_fixed_upstream() -> bool:
    from torch._inductor.codegen.cpu_device_op_overrides import CpuDeviceOpOverrides

    return "\n" not in CpuDeviceOpOverrides().import_get_raw_stream_as("get_raw_stream").strip()


def cpu_benchmark_routed_upstream() -> bool:
    import inspect

    from torch._inductor.autotune_process import CPUDeviceBenchmarkMixin

    return "benchmarker.benchmark_cpu(" not in inspect.getsource(CPUDeviceBenchmarkMixin.do_bench)


def _install_raw_stream() -> None:
    from torch._inductor.codegen.common import get_device_op_overrides, register_device_op_overrides
    from torch._inductor.codegen.cpu_device_op_overrides import CpuDeviceOpOverrides

    current = get_device_op_overrides("cpu")  # initialises torch's table first
    if getattr(current, "_nmp_fixed", False) or raw_stream_fixed_upstream():
        return

    class OneLineRawStream(type(current) if isinstance(current, CpuDeviceOpOverrides) else CpuDeviceOpOverrides):
        _nmp_fixed = True

        def import_get_raw_stream_as(self, name: str) -> str:
            return f"def {name}(_): return 0"

    register_device_op_overrides("cpu", OneLineRawStream())


def _install_cpu_benchmark_routing() -> None:
    from torch._inductor.autotune_process import CPUDeviceBenchmarkMixin

    if getattr(CPUDeviceBenchmarkMixin.do_bench, "_nmp_fixed", False) or cpu_benchmark_routed_upstream():
        return

    def do_bench(self: Any, fn: Any, *input_tensors: Any, out: Any = None) -> float:
        from torch._inductor.runtime.benchmarking import benchmarker

        return benchmarker.benchmark(fn, device="cpu")

    do_bench._nmp_fixed = True  # type: ignore[attr-defined]
    CPUDeviceBenchmarkMixin.do_bench = do_bench  # type: ignore[method-assign]


def install() -> None:
    """Install the workarounds (idempotent); the device one comes with `device.install()`."""
    _install_raw_stream()
    _install_cpu_benchmark_routing()

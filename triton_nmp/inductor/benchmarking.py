"""Inductor's CPU benchmarking on the simulated nmp clock, and how many launches tuning simulated.

Inductor times every candidate it compares (runtime kernel autotuning, max-autotune template choice,
fusion benchmarking) through `torch._inductor.runtime.benchmarking.benchmarker.benchmark(..., device="cpu")`.
Stock, that is host wall-clock time of the simulator (`Benchmarker.benchmark_cpu`): the winner flips between
runs and each candidate is re-simulated for 100 ms. `simulated_benchmark`, registered as the "cpu"
benchmarker, measures the candidate's *simulated* time with the nmp driver's `do_bench` (deterministic; one
simulation per candidate, repeats are served by the clock's timing memo).

A callable that launches no nmp kernel (a host extern kernel) is timed by torch's own host benchmark, as the
simulated clock would call it free; a callable mixing host and nmp work is charged its nmp time only. The
exception: while Inductor benchmarks a generated kernel module (`TritonScheduling.benchmark_codegened_module`,
`benchmark_combo_kernel`: fusion benchmarking, runtime multi-kernel choice), it subtracts the time of cloning
the kernel's mutated arguments, a host-only callable; that reads 0 on the simulated clock (the kernel's time
never included it). Subtracting host wall time from simulated time made an in-place GELU "cost" -13 us, so
max-autotune never fused it into its matmul's epilogue (GPT-2 decode: 12 extra launches, +54 us per token).
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["TuningStats", "stats", "reset_stats", "simulated_benchmark", "install", "uninstall"]


@dataclass
class TuningStats:
    """What benchmarking for Inductor cost since the last `reset_stats()`."""

    benchmarks: int = 0  # candidates timed on the simulated clock
    host_benchmarks: int = 0  # candidates timed on the host clock (no nmp launch)
    launches: int = 0  # nmp launches run inside benchmarks (executed natively)
    simulated: int = 0  # of those, timings computed by the timing model (the rest came from the memo)
    replayed: int = 0  # launches replayed without running (benchmark loops)
    host_seconds: float = 0.0  # wall-clock time spent benchmarking

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_stats = TuningStats()
_lock = threading.Lock()
_module_benchmarks = threading.local()  # depth of Inductor's generated-module benchmarking in this thread


def stats() -> TuningStats:
    """A copy of the counters."""
    with _lock:
        return TuningStats(**asdict(_stats))


def reset_stats() -> None:
    global _stats
    with _lock:
        _stats = TuningStats()


def simulated_benchmark(self: Any, fn: Any, *, warmup: int = 25, rep: int = 100, **kwargs: Any) -> float:
    """`register_benchmarker` signature: the simulated milliseconds of one call of `fn`."""
    from triton_nmp.driver.benchmarker import do_bench
    from triton_nmp.driver.device import clock

    t0 = time.perf_counter()
    clock.flush()
    before = (clock.stats.executed, clock.stats.simulated, clock.stats.replayed)
    ms = do_bench(fn)
    clock.flush()
    executed = clock.stats.executed - before[0]
    simulated = clock.stats.simulated - before[1]
    replayed = clock.stats.replayed - before[2]
    host = executed + replayed == 0
    if host and getattr(_module_benchmarks, "depth", 0) == 0:
        ms = self.benchmark_cpu(fn, warmup=warmup, rep=rep)
    with _lock:
        if host:
            _stats.host_benchmarks += 1
        else:
            _stats.benchmarks += 1
        _stats.launches += executed
        _stats.simulated += simulated
        _stats.replayed += replayed
        _stats.host_seconds += time.perf_counter() - t0
    return ms


def _simulated_module_benchmark(method: Any) -> Any:
    """`method` of Inductor's Triton scheduling, with host-only callables reading 0 while it runs."""
    def benchmark(*args: Any, **kwargs: Any) -> Any:
        _module_benchmarks.depth = getattr(_module_benchmarks, "depth", 0) + 1
        try:
            return method(*args, **kwargs)
        finally:
            _module_benchmarks.depth -= 1

    benchmark._nmp_original = method  # type: ignore[attr-defined]
    return benchmark


_MODULE_BENCHMARKS = ("benchmark_codegened_module", "benchmark_combo_kernel")
_previous: Any = None


def install() -> None:
    """Register `simulated_benchmark` for device type "cpu" (idempotent)."""
    global _previous
    from torch._inductor.codegen.triton import TritonScheduling
    from torch._inductor.runtime import benchmarking

    current = benchmarking._BENCHMARK_DISPATCH.get("cpu")
    if current is simulated_benchmark:
        return
    _previous = current
    benchmarking.register_benchmarker("cpu", simulated_benchmark, override=True)
    for name in _MODULE_BENCHMARKS:
        method = getattr(TritonScheduling, name)
        if not hasattr(method, "_nmp_original"):
            setattr(TritonScheduling, name, _simulated_module_benchmark(method))


def uninstall() -> None:
    global _previous
    from torch._inductor.codegen.triton import TritonScheduling
    from torch._inductor.runtime import benchmarking

    if _previous is not None:
        benchmarking.register_benchmarker("cpu", _previous, override=True)
        _previous = None
    for name in _MODULE_BENCHMARKS:
        method = getattr(TritonScheduling, name)
        if hasattr(method, "_nmp_original"):
            setattr(TritonScheduling, name, method._nmp_original)

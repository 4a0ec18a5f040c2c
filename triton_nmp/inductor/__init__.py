"""PyTorch models on nmp: `torch.compile(model, backend="nmp")` through Inductor's Triton code generation.

    model = torch.compile(model, backend="nmp")                       # registered via torch_dynamo_backends
    model = torch.compile(model, backend="nmp", mode="max-autotune")  # tuned on simulated time

Contract:
* `nmp` (in `backend`) is the Dynamo backend; `install()` (idempotent) puts the integration in place for
  plain Inductor too (`torch.compile(f, options={"cpu_backend": "triton"})` compiles for nmp anyway, since nmp is
  Triton's "cpu" backend; `install()` adds nmp's device properties, simulated-time benchmarking and the
  workarounds).
* `compiled_graphs()` lists what was compiled (graphs, generated code, kernels, host fallbacks).
* `tuning_stats()` counts what tuning cost (candidates benchmarked, launches simulated).
"""

from __future__ import annotations

from typing import Any

__all__ = ["install", "installed", "compiled_graphs", "tuning_stats", "reset_tuning_stats", "nmp"]

_installed = False


def install() -> None:
    """Make Inductor's CPU + Triton path target nmp on nmp's terms (idempotent; see the modules)."""
    global _installed
    if _installed:
        return
    from triton_nmp.errors import NMPError
    from triton_nmp.triton_name import cpu_entry_registered, foreign_cpu_backend

    foreign = foreign_cpu_backend()
    if foreign is not None:
        raise NMPError(
            f"Triton's 'cpu' backend is '{foreign.value}' (installed by another package), so Inductor's CPU "
            f"kernels go there, not to nmp; uninstall it to compile PyTorch models for nmp")
    if not cpu_entry_registered():
        raise NMPError("triton-nmp's Triton entry point 'cpu' is not registered (an install older than this "
                       "source tree); reinstall triton-nmp (pip install -e .) to compile PyTorch models for nmp")
    from . import benchmarking, device, workarounds

    device.install()
    workarounds.install()
    benchmarking.install()
    _installed = True


def installed() -> bool:
    return _installed


def compiled_graphs() -> list[Any]:
    from .graphs import compiled_graphs as graphs

    return graphs()


def tuning_stats() -> Any:
    from .benchmarking import stats

    return stats()


def reset_tuning_stats() -> None:
    from .benchmarking import reset_stats

    reset_stats()


def nmp(gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
    from .backend import nmp as backend

    return backend(gm, example_inputs, **kwargs)

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

from .installation import install, installed

__all__ = ["install", "installed", "compiled_graphs", "tuning_stats", "reset_tuning_stats", "nmp"]


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

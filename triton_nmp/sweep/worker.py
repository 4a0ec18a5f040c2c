"""The worker side of every engine: turn a task into a `TaskResult`, in whatever process runs it.

A `Worker` lives as long as its process (an engine's pool process, a Ray worker, or the parent for the
in-process engine) and keeps what tasks share: payloads by id and target specs by hash. Arguments are built
fresh for every task (seeded, so every worker builds the same bytes; see `KernelCase.build_args` for why
they are not shared). Compiled kernels stay in Triton's caches as usual (in memory, and on disk under
`TRITON_CACHE_DIR`). A handler never raises: a failure becomes the result's `error`.

Task kinds: "kernel" (a sweep candidate: `measure.measure_candidate`) and any kind registered with
`register_handler` (the Inductor integration registers its template-benchmark requests).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import Any

from .plan import Payload, Task, TaskResult, target_active

__all__ = ["Worker", "register_handler", "worker_name"]

Handler = Callable[["Worker", Payload, Task], TaskResult]
_HANDLERS: dict[str, Handler] = {}


def register_handler(kind: str, handler: Handler) -> None:
    """Run tasks of `kind` with `handler(worker, payload, task)` (must be importable in every worker)."""
    _HANDLERS[kind] = handler


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _ensure_nmp_driver() -> None:
    """nmp as Triton's active driver, through the public `triton_nmp.activate()` (the driver, whose
    autotuning hooks reach the tuner and so this sweep, is not imported from here)."""
    import triton_nmp

    triton_nmp.activate()


class Worker:
    """Runs tasks; see the module docstring."""

    def __init__(self) -> None:
        self._specs: dict[str, Any] = {}
        self._payloads: dict[str, Payload] = {}
        _ensure_nmp_driver()

    def payload(self, payload_id: str, payload: Payload | None) -> Payload | None:
        """The payload `payload_id` (remembered from an earlier task when `payload` is None)."""
        if payload is not None:
            self._payloads[payload_id] = payload
            while len(self._payloads) > 4:
                self._payloads.pop(next(iter(self._payloads)))
        return self._payloads.get(payload_id)

    def target(self, payload: Payload, target_hash: str) -> Any:
        spec = self._specs.get(target_hash)
        if spec is None:
            from triton_nmp.target import TargetSpec

            spec = TargetSpec.from_toml(payload.targets[target_hash], f"<sweep target {target_hash[:12]}>")
            self._specs[target_hash] = spec
        return spec

    def args(self, payload: Payload, task: Task) -> dict[str, Any]:
        """The case's arguments, freshly built and placed for this task (see `KernelCase.build_args`)."""
        named = payload.cases[task.case].build_args()
        payload.placements[task.placement].apply(named)
        return named

    def run(self, payload: Payload, task: Task) -> TaskResult:
        t0 = time.perf_counter()
        handler = _HANDLERS.get(task.kind)
        try:
            if handler is None:
                raise KeyError(f"no handler for task kind {task.kind!r} in this worker")
            result = handler(self, payload, task)
        except Exception as exc:  # reported with the task, never raised into the engine
            msg = str(exc).strip().splitlines()
            result = TaskResult(task.id, error=f"{type(exc).__name__}: {msg[0] if msg else ''}"[:500])
        result.host_seconds = result.host_seconds or time.perf_counter() - t0
        result.worker = worker_name()
        return result


def _run_kernel(worker: Worker, payload: Payload, task: Task) -> TaskResult:
    from triton_nmp.tuning.configs import config_from_record

    from .measure import measure_candidate

    case = payload.cases[task.case]
    with target_active(worker.target(payload, task.target)):
        named = worker.args(payload, task)
        m = measure_candidate(case.fn(), named, task.grid, config_from_record(case.configs[task.index]),
                              predict=payload.predict)
    return TaskResult(task.id, m.simulated_seconds, m.predicted_seconds, m.pruned, m.error, m.host_seconds)


register_handler("kernel", _run_kernel)

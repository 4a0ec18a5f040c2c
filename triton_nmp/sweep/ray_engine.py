"""`RayEngine`: tasks as Ray tasks, on an embedded local cluster (`"auto"`) or a running one (an address).

Ray is an optional dependency (`pip install triton-nmp[ray]`); without it the engine raises
`NMPSweepError` with the install command. Each candidate is one Ray task of one CPU: Ray places tasks on
any node with a free CPU, reuses its worker processes (so a worker's imports, compiled kernels and built
arguments serve the tasks that follow), and ships the shared `Payload` once through the object store.

Retries are the engine's, not Ray's (`max_retries=0`): a task whose worker process or node died
(`WorkerCrashedError`, `NodeDiedError`, ...) is submitted again, to wherever Ray schedules it, up to
`retries` more times, and reported through `on_retry` like the process pool does. A task that raised
inside the worker is not retried: the worker turns every failure into a result, so such an error means the
worker itself is broken, and it is reported as the candidate's error.

The embedded cluster (`"auto"`) is sized to `workers` CPUs (default: this machine's), listens on the
loopback interface only, and starts without dashboard or usage reporting; it is shut down by `close()`.
Workers get this process's `TRITON_*` settings and `sys.path` (the kernel modules must import there: on a
multi-node cluster, install the project on every node or use a Ray `working_dir`, see docs/sweeps.md).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from .engine import DEFAULT_RETRIES, Engine, ResultCallback, RetryCallback, died_result
from .plan import Payload, Task, TaskResult
from .spec import NMPSweepError

__all__ = ["RayEngine", "ray_available", "RAY_REQUIREMENT"]

RAY_REQUIREMENT = "ray==2.60.0"
_EMBEDDED_OBJECT_STORE_BYTES = 128 * 1024 * 1024


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def _worker_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.startswith(("TRITON_", "OPENBLAS_"))}
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([os.getcwd(), *paths]))
    return env


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail fast on an address nothing listens at (Ray itself retries for minutes)."""
    import socket

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        raise NMPSweepError(f"--ray {address!r}: expected 'auto' or a cluster address HOST:PORT (the head's GCS port)")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        raise NMPSweepError(f"cannot reach the Ray cluster at {address!r} ({exc}): is `ray start --head` running "
                            f"there, and is this its GCS port?") from None


_WORKER: Any = None


def _run_in_ray_worker(payload_id: str, boxed_payload: list, task: Task) -> TaskResult:
    """The Ray task: one candidate, on this Ray worker process's `Worker` (kept between tasks)."""
    global _WORKER
    import ray

    from .worker import Worker

    if _WORKER is None:
        _WORKER = Worker()
    payload = _WORKER.payload(payload_id, None)
    if payload is None:
        payload = _WORKER.payload(payload_id, ray.get(boxed_payload[0]))
    return _WORKER.run(payload, task)


class RayEngine(Engine):
    """See the module docstring."""

    name = "ray"

    def __init__(self, address: str = "auto", workers: int | None = None, retries: int = DEFAULT_RETRIES) -> None:
        super().__init__(retries)
        if not ray_available():
            raise NMPSweepError(f"the Ray engine needs Ray: pip install 'triton-nmp[ray]' (or {RAY_REQUIREMENT}); "
                                f"--engine pool runs on this machine without it")
        self.address = address
        embedded = address in ("auto", "local")
        if not embedded:
            _check_reachable(address)
        if embedded:
            # before `import ray`: Ray reads these at import; loopback only, nothing reported anywhere
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        import ray

        self._ray = ray
        self._started = False
        if ray.is_initialized():
            pass  # the caller's session: use it as it is, leave it running
        elif embedded:
            ray.init(num_cpus=workers or os.cpu_count() or 1, include_dashboard=False, log_to_driver=False,
                     object_store_memory=_EMBEDDED_OBJECT_STORE_BYTES, _node_ip_address="127.0.0.1",
                     runtime_env={"env_vars": _worker_env()}, configure_logging=False)
            self._started = True
        else:
            try:
                ray.init(address=address, runtime_env={"env_vars": _worker_env()}, log_to_driver=False,
                         configure_logging=False)
            except (ConnectionError, ValueError, RuntimeError) as exc:
                raise NMPSweepError(f"cannot join the Ray cluster at {address!r}: {exc}") from None
            self._started = True
        self.workers = int(ray.cluster_resources().get("CPU", workers or 1))
        self._remote = ray.remote(num_cpus=1, max_retries=0)(_run_in_ray_worker)

    def describe(self) -> str:
        where = "embedded local cluster" if self.address in ("auto", "local") else f"cluster {self.address}"
        return f"ray ({where}, {self.workers} CPUs)"

    def run(self, payload: Payload, tasks: Sequence[Task], on_result: ResultCallback,
            on_retry: RetryCallback | None = None) -> None:
        ray = self._ray
        boxed = [ray.put(payload)]  # boxed: passed through unresolved, fetched once per worker process
        attempts: dict[str, int] = {}
        pending: dict[Any, Task] = {}

        def submit(task: Task) -> None:
            attempts[task.id] = attempts.get(task.id, 0) + 1
            pending[self._remote.remote(payload.id, boxed, task)] = task

        for task in tasks:
            submit(task)
        try:
            self._collect(pending, attempts, submit, on_result, on_retry)
        finally:
            for ref in pending:  # the caller stopped listening: do not leave its tasks running
                ray.cancel(ref, force=True)

    def _collect(self, pending: dict[Any, Task], attempts: dict[str, int], submit: Any, on_result: ResultCallback,
                 on_retry: RetryCallback | None) -> None:
        ray = self._ray
        from ray.exceptions import RayTaskError

        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                task = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except RayTaskError as exc:  # raised inside the task: the worker is broken, not the machine
                    result = TaskResult(task.id, error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:400]}")
                except ray.exceptions.RayError as exc:  # the worker or its node died: run it again elsewhere
                    reason = type(exc).__name__
                    if attempts[task.id] > self.retries:
                        on_result(task, died_result(task, attempts[task.id], reason))
                    else:
                        if on_retry is not None:
                            on_retry(task, reason)
                        submit(task)
                    continue
                result.attempts = attempts[task.id]
                on_result(task, result)

    def close(self) -> None:
        if self._started:
            self._ray.shutdown()
            self._started = False

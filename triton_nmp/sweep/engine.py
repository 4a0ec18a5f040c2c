"""Engines run tasks somewhere and hand each result back to the parent, retrying tasks whose worker died.

The contract every engine keeps (`Engine.run`):
* each task's result is passed to `on_result(task, result)` exactly once, on the calling thread, in
  completion order (any order: results carry their task's id and the runner keys on it);
* a task whose worker process dies is dispatched again, to any worker, up to `retries` more times;
  after that its result is an error naming the deaths, so a sweep always completes;
* `on_retry(task, reason)` is called for every re-dispatch (the progress bar counts them).

`InProcessEngine` runs tasks one by one in this process (the default: no start-up cost);
`pool.ProcessPoolEngine` and `ray_engine.RayEngine` run them in parallel. Which engine a sweep or an
autotuner uses is `configured` (built from the command line's / environment's words).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .plan import Payload, Task, TaskResult

__all__ = ["DEFAULT_RETRIES", "Engine", "InProcessEngine", "ResultCallback", "RetryCallback", "died_result"]

ResultCallback = Callable[[Task, TaskResult], None]
RetryCallback = Callable[[Task, str], None]
DEFAULT_RETRIES = 2


class Engine:
    """Base class: see the module docstring."""

    name = "engine"
    workers = 1

    def __init__(self, retries: int = DEFAULT_RETRIES) -> None:
        self.retries = retries

    def run(self, payload: Payload, tasks: Sequence[Task], on_result: ResultCallback,
            on_retry: RetryCallback | None = None) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Stop the workers (idempotent)."""

    def describe(self) -> str:
        return f"{self.name} ({self.workers} worker{'s' if self.workers != 1 else ''})"

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def died_result(task: Task, attempts: int, reason: str) -> TaskResult:
    """The result of a task whose workers died on every attempt."""
    return TaskResult(task.id, error=f"worker died {attempts} time(s) running this candidate ({reason}); "
                                     f"not retried further", attempts=attempts)


class InProcessEngine(Engine):
    """Tasks run one after another in this process."""

    name = "in-process"

    def __init__(self, retries: int = DEFAULT_RETRIES) -> None:
        super().__init__(retries)
        self._worker = None

    def run(self, payload: Payload, tasks: Sequence[Task], on_result: ResultCallback,
            on_retry: RetryCallback | None = None) -> None:
        from .worker import Worker

        if self._worker is None:
            self._worker = Worker()
        for task in tasks:
            on_result(task, self._worker.run(payload, task))

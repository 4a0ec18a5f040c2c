"""Engines run tasks somewhere and hand each result back to the parent, retrying tasks whose worker died.

The contract every engine keeps (`Engine.run`):
* each task's result is passed to `on_result(task, result)` exactly once, on the calling thread, in
  completion order (any order: results carry their task's id and the runner keys on it);
* a task whose worker process dies is dispatched again, to any worker, up to `retries` more times;
  after that its result is an error naming the deaths, so a sweep always completes;
* `on_retry(task, reason)` is called for every re-dispatch (the progress bar counts them).

`InProcessEngine` runs tasks one by one in this process (the default: no start-up cost);
`pool.ProcessPoolEngine` and `ray_engine.RayEngine` run them in parallel. `engine_from_options` builds one
from the command line's / environment's words.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from .plan import Payload, Task, TaskResult
from .spec import NMPSweepError

__all__ = ["Engine", "InProcessEngine", "ResultCallback", "RetryCallback", "engine_from_options", "ENV_VAR",
           "configured_engine", "set_engine", "died_result"]

ResultCallback = Callable[[Task, TaskResult], None]
RetryCallback = Callable[[Task, str], None]
ENV_VAR = "TRITON_NMP_SWEEP_ENGINE"
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


def engine_from_options(engine: str | None = None, workers: int | None = None, ray: str | None = None,
                        retries: int = DEFAULT_RETRIES) -> Engine:
    """An engine from `triton-nmp tune`'s options: `engine` "in-process" (default), "pool" or "ray";
    `ray` ("auto" or a cluster address) implies "ray"; `workers` defaults to the CPU count."""
    if ray is not None:
        if engine not in (None, "ray"):
            raise NMPSweepError(f"--ray {ray} runs on Ray: it cannot be combined with --engine {engine}")
        engine = "ray"
    engine = engine or "in-process"
    if workers is not None and workers < 1:
        raise NMPSweepError(f"--workers must be at least 1, not {workers}")
    if engine in ("in-process", "inprocess", "local"):
        return InProcessEngine(retries)
    if engine == "pool":
        from .pool import ProcessPoolEngine

        return ProcessPoolEngine(workers or os.cpu_count() or 1, retries=retries)
    if engine == "ray":
        from .ray_engine import RayEngine

        return RayEngine(ray or "auto", workers, retries=retries)
    raise NMPSweepError(f"unknown sweep engine {engine!r}: choose in-process, pool or ray")


def parse_engine_word(text: str) -> Engine:
    """An engine from `$TRITON_NMP_SWEEP_ENGINE`: "pool", "pool:<workers>", "ray" / "ray:auto" (an embedded
    local cluster), "ray:<address>" (join a cluster), "in-process"."""
    kind, _, rest = text.strip().partition(":")
    if kind == "pool":
        try:
            return engine_from_options("pool", int(rest) if rest else None)
        except ValueError:
            raise NMPSweepError(f"{ENV_VAR}={text!r}: expected pool or pool:<workers>") from None
    if kind == "ray":
        return engine_from_options("ray", ray=rest or "auto")
    return engine_from_options(kind)


_configured: Engine | None = None


def set_engine(engine: Engine | str | None) -> Engine | None:
    """Configure the engine that autotuners and Inductor send candidate benchmarks to (None: in process);
    returns the previous one (not closed). A string is parsed like `$TRITON_NMP_SWEEP_ENGINE`."""
    global _configured
    previous = _configured
    _configured = parse_engine_word(engine) if isinstance(engine, str) else engine
    if isinstance(_configured, InProcessEngine):
        _configured = None
    return previous


def configured_engine() -> Engine | None:
    """The engine set by `set_engine`, else one built (once) from `$TRITON_NMP_SWEEP_ENGINE`, else None."""
    global _configured
    if _configured is None:
        word = os.environ.get(ENV_VAR, "").strip()
        if word and word not in ("in-process", "inprocess", "0", "none"):
            _configured = parse_engine_word(word)
    return _configured

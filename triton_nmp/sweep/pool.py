"""`ProcessPoolEngine`: N spawned worker processes on this machine, one task each at a time.

Why not `concurrent.futures.ProcessPoolExecutor`: when one of its processes dies, the executor breaks and
every pending future fails. Here the parent hands one task at a time to each idle worker over its own pipe,
so it always knows which task a dead worker held: that task goes back to the front of the queue (to the
next idle worker), a fresh process replaces the dead one, and nothing else is disturbed. Results that
already arrived were handed to `on_result` (and stored by the runner) before the death was seen.

Workers are spawned (never forked: the parent holds LLVM and Triton state) and live until `close()`, so
their imports, compiled kernels and built arguments serve every later `run` too (autotuners and Inductor
reuse one configured engine). A worker receives a payload once, with its first task of that payload.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from .engine import DEFAULT_RETRIES, Engine, ResultCallback, RetryCallback, died_result
from .plan import Payload, Task

__all__ = ["ProcessPoolEngine"]

_START_TIMEOUT_S = 300.0
_MAX_START_FAILURES = 3


def _worker_main(conn: Connection) -> None:
    """A pool process: receive (payload id, payload or None, task), send the result, until None."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; Ctrl-C there closes the pool
    import torch

    torch.set_num_threads(1)  # one worker is one CPU (as a Ray task of num_cpus=1): N workers, N busy threads
    from .worker import Worker

    worker = Worker()
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:  # nothing to save here (results are the parent's): skip torch's slow teardown
            from triton_nmp.backend import llvm_target

            llvm_target.shutdown()  # reaped here, so their CPU time counts in the parent's rusage
            conn.close()
            os._exit(0)
        payload_id, payload, task = msg
        known = worker.payload(payload_id, payload)
        if known is None:
            conn.send(("need-payload", task.id))
            continue
        conn.send(("result", worker.run(known, task)))


@dataclass
class _Proc:
    process: Any
    conn: Connection
    pid: int = 0
    ready: bool = False
    task: Task | None = None
    payloads: set[str] = field(default_factory=set)


class ProcessPoolEngine(Engine):
    """See the module docstring."""

    name = "pool"

    def __init__(self, workers: int, retries: int = DEFAULT_RETRIES) -> None:
        super().__init__(retries)
        self.workers = workers
        self._ctx = mp.get_context("spawn")
        self._procs: list[_Proc] = [self._spawn() for _ in range(workers)]
        self.deaths = 0
        self._start_failures = 0

    def _spawn(self) -> _Proc:
        parent, child = self._ctx.Pipe()
        p = self._ctx.Process(target=_worker_main, args=(child,), name="triton-nmp-sweep-worker", daemon=True)
        p.start()
        child.close()
        return _Proc(p, parent)

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers (tests kill one to check recovery)."""
        return [p.process.pid for p in self._procs if p.process.is_alive()]

    def busy_pids(self) -> list[int]:
        return [p.process.pid for p in self._procs if p.task is not None and p.process.is_alive()]

    def run(self, payload: Payload, tasks: Sequence[Task], on_result: ResultCallback,
            on_retry: RetryCallback | None = None) -> None:
        try:
            self._run(payload, tasks, on_result, on_retry)
        except BaseException:
            # the caller stopped listening (an exception in on_result, Ctrl-C): workers still busy would
            # answer a later run with stale results, so they are replaced
            for i, proc in enumerate(self._procs):
                if proc.task is not None:
                    proc.process.kill()
                    proc.process.join(timeout=5)
                    proc.conn.close()
                    self._procs[i] = self._spawn()
            raise

    def _run(self, payload: Payload, tasks: Sequence[Task], on_result: ResultCallback,
             on_retry: RetryCallback | None) -> None:
        queue: deque[Task] = deque(tasks)
        attempts: dict[str, int] = {}
        outstanding = len(tasks)
        deadline = time.monotonic() + _START_TIMEOUT_S
        while outstanding:
            for proc in self._procs:
                if proc.ready and proc.task is None and queue:
                    self._send(proc, payload, queue.popleft(), attempts)
            busy = [p for p in self._procs if p.task is not None or not p.ready]
            if not any(p.ready for p in self._procs) and time.monotonic() > deadline:
                raise RuntimeError(f"no sweep worker started within {_START_TIMEOUT_S:.0f} s")
            ready = wait([p.conn for p in busy] + [p.process.sentinel for p in self._procs], timeout=1.0)
            for proc in list(self._procs):
                if proc.conn in ready:
                    try:
                        kind, value = proc.conn.recv()
                    except (EOFError, OSError):
                        continue  # died: handled below through its sentinel
                    if kind == "ready":
                        proc.ready, proc.pid = True, value
                    elif kind == "need-payload":
                        task, proc.task = proc.task, None
                        proc.payloads.discard(payload.id)
                        queue.appendleft(task)
                    else:
                        task, proc.task = proc.task, None
                        value.attempts = attempts[task.id]
                        outstanding -= 1
                        on_result(task, value)
            for i, proc in enumerate(self._procs):
                if proc.process.sentinel in ready or not proc.process.is_alive():
                    proc.process.join(timeout=5)
                    if proc.process.is_alive():
                        continue
                    self.deaths += 1
                    reason = f"exit code {proc.process.exitcode}"
                    if not proc.ready:
                        self._start_failures += 1
                        if self._start_failures > _MAX_START_FAILURES:
                            raise RuntimeError(f"sweep workers keep dying while starting ({reason}); run with "
                                               f"--engine in-process to see the error")
                    task = proc.task
                    proc.conn.close()
                    self._procs[i] = self._spawn()
                    if task is None:
                        continue
                    if attempts[task.id] > self.retries:
                        outstanding -= 1
                        on_result(task, died_result(task, attempts[task.id], reason))
                    else:
                        queue.appendleft(task)
                        if on_retry is not None:
                            on_retry(task, reason)

    def _send(self, proc: _Proc, payload: Payload, task: Task, attempts: dict[str, int]) -> None:
        first = payload.id not in proc.payloads
        proc.payloads.add(payload.id)
        attempts[task.id] = attempts.get(task.id, 0) + 1
        proc.task = task
        try:
            proc.conn.send((payload.id, payload if first else None, task))
        except (BrokenPipeError, OSError):
            pass  # the worker died: its sentinel reports it and the task is re-queued

    def close(self) -> None:
        for proc in self._procs:
            try:
                proc.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for proc in self._procs:
            proc.process.join(timeout=3)  # nothing to save in a worker: results are the parent's already
            if proc.process.is_alive():
                proc.process.kill()
                proc.process.join(timeout=5)
            proc.conn.close()
        self._procs = []

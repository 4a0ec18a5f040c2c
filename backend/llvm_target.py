"""LLVM through llvmlite: the target machine, the optimisation pipeline, object emission.

The simulator executes kernels natively, so the "nmp pseudo-target" is an x86-64 CPU level:
`x86-64-v3` (AVX2, FMA, F16C) by default, which every machine we run on has, so cached objects are
portable; `TRITON_NMP_HOST_CPU=native` (or any LLVM CPU name) overrides it. The CPU and LLVM version
are part of the backend hash, so Triton's cache never hands an object to a CPU that cannot run it.

Contract: `optimize(ir, kernel)` and `emit_object(ir)` may be called from any number of threads at
once; each call gets a result computed from its own input and nothing else.

llvmlite's LLVM is built with assertions, and an LLVM assertion aborts the process. Verification,
optimisation and object emission therefore run in worker processes (`llvm_worker.py`, spawned, never
forked: see there). A pool hands each compiling thread a worker of its own, so threads compile in
parallel (up to `TRITON_NMP_LLVM_WORKERS`, default the number of CPUs, at most 8) and never read
each other's replies. If a worker dies, the kernel is optimised again without loop vectorisation in a
fresh worker, and if that dies too the user gets a compilation error naming the kernel instead of a
dead interpreter. A worker that does not answer within `TRITON_NMP_LLVM_TIMEOUT` seconds (default
300) is killed and the kernel reported as taking too long, not as crashing.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import os
import pickle
import subprocess
import sys
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Iterator

import llvmlite.binding as llvm

from triton_nmp.errors import NMPCompilationError

from . import llvm_worker

DEFAULT_CPU = "x86-64-v3"
DEFAULT_TIMEOUT_S = 300.0
MAX_WORKERS = 8
_STARTUP_TIMEOUT_S = 60.0
_lock = threading.Lock()


def cpu_name() -> str:
    cpu = os.environ.get("TRITON_NMP_HOST_CPU", DEFAULT_CPU)
    return _host_cpu() if cpu == "native" else cpu


@functools.lru_cache(None)
def _host_cpu() -> str:
    with _lock:
        return llvm.get_host_cpu_name()


@functools.lru_cache(None)
def _target_strings(cpu: str) -> tuple[str, str]:
    with _lock:  # the only LLVM object the parent builds; codegen needs its triple and data layout
        tm = llvm_worker.target_machine(cpu)
        return tm.triple, str(tm.target_data)


def target_triple_and_layout() -> tuple[str, str]:
    """(triple, data layout) of the host target machine codegen emits for."""
    return _target_strings(cpu_name())


@functools.lru_cache(None)
def _fingerprint(cpu: str) -> str:
    with _lock:
        text = cpu + repr(llvm.llvm_version_info)
        if cpu == llvm.get_host_cpu_name():
            text += llvm.get_host_cpu_features().flatten()
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def host_fingerprint() -> str:
    return _fingerprint(cpu_name())


def _timeout() -> float:
    return float(os.environ.get("TRITON_NMP_LLVM_TIMEOUT", DEFAULT_TIMEOUT_S))


def _max_workers() -> int:
    n = os.environ.get("TRITON_NMP_LLVM_WORKERS")
    return max(1, int(n)) if n else max(1, min(os.cpu_count() or 1, MAX_WORKERS))


class WorkerFailed(Exception):
    """The worker died (LLVM crashed) or did not answer in time (`timed_out`)."""

    def __init__(self, timed_out: bool):
        self.timed_out = timed_out


class _Worker:
    """One spawned `llvm_worker.py` process; used by one thread at a time (the pool sees to that)."""

    def __init__(self) -> None:
        self.owner = os.getpid()
        self.proc = subprocess.Popen(
            [sys.executable, "-u", llvm_worker.__file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
        )
        self.req_w, self.resp_r = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        self.ready = False

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _reply(self, deadline: float) -> tuple:
        head = llvm_worker.read_exact(self.resp_r, 8, deadline)
        body = None if head is None else llvm_worker.read_exact(self.resp_r, int.from_bytes(head, "little"), deadline)
        if body is None:
            timed_out = time.monotonic() >= deadline and self.alive
            self.close(kill=True)
            raise WorkerFailed(timed_out)
        return pickle.loads(body)

    def request(self, request: tuple, timeout: float) -> tuple:
        """Send one request, wait for its reply; WorkerFailed (and the worker is gone) if it died or hung."""
        if not self.ready:  # the first reply is the worker's "ready", sent once LLVM is initialised
            self._reply(time.monotonic() + _STARTUP_TIMEOUT_S)
            self.ready = True
        try:
            llvm_worker.write_msg(self.req_w, pickle.dumps(request))
        except OSError:
            self.close(kill=True)
            raise WorkerFailed(False) from None
        return self._reply(time.monotonic() + timeout)

    def close(self, kill: bool = False) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            if kill:
                proc.kill()
            proc.stdin.close()
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        with contextlib.suppress(OSError):
            proc.stdout.close()


class _WorkerPool:
    """Idle workers and a cap on how many exist; `take()` lends one to the calling thread."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._idle: list[_Worker] = []
        self._count = 0
        self.spawned = 0  # workers started by this pool (tests and diagnostics)

    @contextlib.contextmanager
    def take(self) -> Iterator[_Worker]:
        worker = None
        with self._cond:
            while not self._idle and self._count >= _max_workers():
                self._cond.wait()
            if self._idle:
                worker = self._idle.pop()
            else:
                self._count += 1
        try:
            if worker is None:
                worker = _Worker()
                self.spawned += 1
            yield worker
        except BaseException:
            if worker is not None:  # interrupted mid-request (Ctrl-C): its reply would confuse the next user
                worker.close(kill=True)
            raise
        finally:
            with self._cond:
                if worker is not None and worker.alive and worker.owner == os.getpid():
                    self._idle.append(worker)
                else:
                    self._count -= 1
                self._cond.notify()

    def prewarm(self) -> None:
        """Start a worker now if none exists, so its start overlaps the front end's work."""
        with self._cond:
            if self._idle or self._count:
                return
            self._count += 1
        try:
            worker = _Worker()
            self.spawned += 1
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise
        with self._cond:
            self._idle.append(worker)
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            idle, self._idle = self._idle, []
            self._count -= len(idle)
        for w in idle:
            if w.owner == os.getpid():
                w.close()


_pool = _WorkerPool()


def _after_fork_in_child() -> None:
    """A forked child never talks to its parent's workers: it starts a pool of its own."""
    global _pool
    for w in _pool._idle:
        with contextlib.suppress(OSError):
            w.proc.stdin.close()
            w.proc.stdout.close()
    _pool = _WorkerPool()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(lambda: _pool.close())


def shutdown() -> None:
    """Stop this process's idle LLVM workers now (and reap them): for a process about to leave by
    `os._exit`, which skips atexit."""
    _pool.close()


def prewarm() -> None:
    """Start an LLVM worker in the background (no-op when one exists or the guard is off)."""
    if os.environ.get("TRITON_NMP_LLVM_GUARD", "1") != "0":
        _pool.prewarm()


def _run(request: tuple, kernel: str) -> tuple[str, bytes]:
    """Run a request in a pooled worker (or in process with TRITON_NMP_LLVM_GUARD=0)."""
    if os.environ.get("TRITON_NMP_LLVM_GUARD", "1") == "0":
        with _lock:  # in process: LLVM calls share the process, one at a time
            reply = llvm_worker.handle(request)
    else:
        with _pool.take() as worker:
            reply = worker.request(request, _timeout())
    if reply[0] == "error":
        raise NMPCompilationError(f"generated LLVM IR does not verify (a compiler bug): {reply[1]}", kernel=kernel)
    return reply[1], reply[2]


_MAX_KEPT_OBJECTS = 64
_objects: OrderedDict[str, bytes] = OrderedDict()  # optimised IR hash -> object, for emit_object


def _ir_key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _level(name: str, default: int) -> int:
    text = os.environ.get(name, str(default))
    if text.strip() not in ("0", "1", "2", "3"):
        raise NMPCompilationError(f"{name}={text!r} is not an LLVM optimisation level",
                                  hint=f"use 0, 1, 2 or 3 (default {default}), or unset {name}")
    return int(text)


def opt_level() -> int:
    """LLVM's IR optimisation level for kernels (TRITON_NMP_OPT_LEVEL, default 1)."""
    return _level("TRITON_NMP_OPT_LEVEL", 1)


MATRIX_OPS = ("nmp.matmul", "nmp.bmatmul")


def codegen_level(matrix_ops: bool) -> int:
    """LLVM's code generator level for a kernel (llc's -O0..-O3): TRITON_NMP_CODEGEN_LEVEL, or by default 3 for a
    kernel with matrix ops (tile dots) and 0 for the rest.

    The IR is already optimised and vectorised at `opt_level`; the code generator's own work (SelectionDAG
    instruction selection, the greedy register allocator, machine scheduling) was 40-45% of an elementwise or
    reduction kernel's LLVM time, and at -O0 (fast instruction selection and register allocation) its emission
    is ~5x faster while its native run, in the simulator's functional runs, was 0-40% slower. A tile dot's inner
    loop is where native time goes: at -O0 its accumulators are spilled on every iteration (the matmul example
    ran 2.7x slower natively, attention 1.7x), so kernels with matrix ops keep the optimising code generator."""
    forced = _codegen_override()
    if forced is not None:
        return forced
    return 3 if matrix_ops else 0


def _codegen_override() -> int | None:
    return _level("TRITON_NMP_CODEGEN_LEVEL", 0) if os.environ.get("TRITON_NMP_CODEGEN_LEVEL") else None


def levels_key() -> str:
    """The LLVM levels in force, for the backend's cache key (they are environment knobs, not options)."""
    forced = _codegen_override()
    return f"O{opt_level()}cg{'auto' if forced is None else forced}"


def compile_trusted(llvm_ir: str) -> bytes:
    """The object of IR the backend itself fixes (the runtime library, covered by the tests), optimised
    like a kernel but in this process, one LLVM call at a time: no worker to start for it."""
    with _lock:
        return llvm_worker.optimize_and_emit(llvm_ir, cpu_name(), opt_level(), True)[1]


def optimize(llvm_ir: str, kernel: str, codegen: int = 3) -> str:
    """Verify and optimise (O1 with loop and SLP vectorisation); returns the optimised IR text.
    Code generation at level `codegen` (see `codegen_level`).

    The object code is emitted at the same time and kept for `emit_object` of the same text.
    """
    cpu, opt, cg = cpu_name(), opt_level(), codegen
    try:
        text, obj = _run(("optimize", llvm_ir, cpu, opt, True, cg), kernel)
    except WorkerFailed as first:
        what = (f"LLVM did not finish optimising kernel '{kernel}' within {_timeout():.0f} s" if first.timed_out
                else f"LLVM crashed while vectorising kernel '{kernel}' (an LLVM bug)")
        warnings.warn(f"{what}; compiling it without loop vectorisation", stacklevel=2)
        try:
            text, obj = _run(("optimize", llvm_ir, cpu, opt, False, cg), kernel)
        except WorkerFailed as second:
            if second.timed_out:
                raise NMPCompilationError(
                    f"LLVM did not finish optimising this kernel within {_timeout():.0f} s", kernel=kernel,
                    hint="raise TRITON_NMP_LLVM_TIMEOUT (seconds) if the machine is very busy, or use smaller tiles",
                ) from None
            raise NMPCompilationError("LLVM crashed while optimising this kernel (an LLVM bug)", kernel=kernel,
                                      hint="set TRITON_NMP_HOST_CPU to another CPU level, e.g. x86-64-v2") from None
    with _lock:
        _objects[_ir_key(text)] = obj
        while len(_objects) > _MAX_KEPT_OBJECTS:
            _objects.popitem(last=False)
    return text


def emit_object(llvm_ir: str, kernel: str = "", codegen: int = 3) -> bytes:
    """The object file for optimised IR text (emitted by `optimize`, or now for other text)."""
    with _lock:
        obj = _objects.pop(_ir_key(llvm_ir), None)
    if obj is not None:
        return obj
    try:
        return _run(("emit", llvm_ir, cpu_name(), codegen), kernel)[1]
    except WorkerFailed:
        raise NMPCompilationError("LLVM crashed while emitting the object of this kernel (an LLVM bug)",
                                  kernel=kernel) from None


"""LLVM through llvmlite: the target machine, the optimisation pipeline, object emission.

The simulator executes kernels natively, so the "nmp pseudo-target" is an x86-64 CPU level:
`x86-64-v3` (AVX2, FMA, F16C) by default, which every machine we run on has, so cached objects are
portable; `TRITON_NMP_HOST_CPU=native` (or any LLVM CPU name) overrides it. The CPU and LLVM version
are part of the backend hash, so Triton's cache never hands an object to a CPU that cannot run it.

llvmlite's LLVM is built with assertions, and an LLVM assertion aborts the process. Optimisation and
object emission therefore run in a forked worker child (about 1 ms per kernel); if the child dies, the kernel is
optimised again without loop vectorisation, and if that dies too the user gets a compilation error
naming the kernel instead of a dead interpreter. The child is forked once and serves every kernel.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import pickle
import select
import signal
import time
import warnings

import llvmlite.binding as llvm

from triton_nmp.errors import NMPCompilationError

DEFAULT_CPU = "x86-64-v3"
GUARD_TIMEOUT_S = 120.0


@functools.lru_cache(None)
def _init() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()


def cpu_name() -> str:
    cpu = os.environ.get("TRITON_NMP_HOST_CPU", DEFAULT_CPU)
    return llvm.get_host_cpu_name() if cpu == "native" else cpu


@functools.lru_cache(None)
def _target_machine(cpu: str) -> llvm.TargetMachine:
    _init()
    target = llvm.Target.from_default_triple()
    features = llvm.get_host_cpu_features().flatten() if cpu == llvm.get_host_cpu_name() else ""
    return target.create_target_machine(cpu=cpu, features=features, opt=3, reloc="pic", codemodel="default")


def target_machine() -> llvm.TargetMachine:
    return _target_machine(cpu_name())


def host_fingerprint() -> str:
    _init()
    text = cpu_name() + repr(llvm.llvm_version_info)
    if cpu_name() == llvm.get_host_cpu_name():
        text += llvm.get_host_cpu_features().flatten()
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _optimize_and_emit(llvm_ir: str, vectorize: bool) -> tuple[str, bytes]:
    tm = target_machine()
    mod = llvm.parse_assembly(llvm_ir)
    # O1 plus loop/SLP vectorisation, without unrolling: tile loops have static trip counts; O2/O3 and
    # unrolling cost much compile time for little simulation speed. TRITON_NMP_OPT_LEVEL overrides.
    pto = llvm.create_pipeline_tuning_options(speed_level=int(os.environ.get("TRITON_NMP_OPT_LEVEL", "1")))
    pto.loop_vectorization = vectorize
    pto.slp_vectorization = vectorize
    pto.loop_unrolling = False
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return str(mod), tm.emit_object(mod)


def _write_msg(fd: int, payload: bytes) -> None:
    data = len(payload).to_bytes(8, "little") + payload
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, n: int, deadline: float) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        timeout = None if deadline == float("inf") else max(deadline - time.monotonic(), 0)
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            return None
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


class _Worker:
    """A forked child that optimises and emits modules for this process, one request at a time.

    Forking once and reusing the child costs ~1 ms per kernel instead of ~20 ms for a fork per
    kernel. If the child dies (an LLVM assertion) or hangs, it is replaced and the request reported
    as failed. The child exits when the parent closes its request pipe (also when the parent dies).
    """

    def __init__(self) -> None:
        self.owner = os.getpid()
        req_r, self.req_w = os.pipe()
        self.resp_r, resp_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # child
            os.close(self.req_w)
            os.close(self.resp_r)
            self._serve(req_r, resp_w)
        os.close(req_r)
        os.close(resp_w)

    @staticmethod
    def _serve(req_r: int, resp_w: int) -> None:
        try:
            while True:
                head = _read_exact(req_r, 8, float("inf"))
                if head is None:
                    os._exit(0)
                body = _read_exact(req_r, int.from_bytes(head, "little"), float("inf"))
                llvm_ir, vectorize = pickle.loads(body)
                _write_msg(resp_w, pickle.dumps(_optimize_and_emit(llvm_ir, vectorize)))
        except BaseException:
            os._exit(1)

    def request(self, llvm_ir: str, vectorize: bool) -> tuple[str, bytes] | None:
        deadline = time.monotonic() + GUARD_TIMEOUT_S
        try:
            _write_msg(self.req_w, pickle.dumps((llvm_ir, vectorize)))
            head = _read_exact(self.resp_r, 8, deadline)
            body = None if head is None else _read_exact(self.resp_r, int.from_bytes(head, "little"), deadline)
        except OSError:
            body = None
        if body is None:
            self.close(kill=True)
            return None
        return pickle.loads(body)

    def close(self, kill: bool = False) -> None:
        for fd in (self.req_w, self.resp_r):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            if kill:
                os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (OSError, ChildProcessError):
            pass
        self.pid = -1


_worker: _Worker | None = None


def _stop_worker() -> None:
    global _worker
    if _worker is not None and _worker.owner == os.getpid() and _worker.pid > 0:
        _worker.close()
    _worker = None


atexit.register(_stop_worker)


def _guarded(llvm_ir: str, vectorize: bool) -> tuple[str, bytes] | None:
    """Run `_optimize_and_emit` in the worker child; None if it crashed or hung (the worker is replaced)."""
    global _worker
    if _worker is None or _worker.owner != os.getpid() or _worker.pid <= 0:
        _worker = _Worker()  # also after a fork of this process: never share a worker's pipes
    result = _worker.request(llvm_ir, vectorize)
    if result is None:
        _worker = None
    return result


_objects: dict[str, bytes] = {}


def optimize(llvm_ir: str, kernel: str) -> str:
    """Verify and optimise (O1 with loop and SLP vectorisation); returns the optimised IR text.

    The object code is emitted at the same time and kept for `emit_object` of the same text.
    """
    _init()
    try:
        mod = llvm.parse_assembly(llvm_ir)
        mod.verify()
    except RuntimeError as e:
        raise NMPCompilationError(f"generated LLVM IR does not verify (a compiler bug): {e}", kernel=kernel) from e
    if os.environ.get("TRITON_NMP_LLVM_GUARD", "1") == "0":
        text, obj = _optimize_and_emit(llvm_ir, True)
    else:
        result = _guarded(llvm_ir, True)
        if result is None:
            warnings.warn(f"LLVM crashed while vectorising kernel '{kernel}' (an LLVM bug); "
                          f"compiling it without loop vectorisation", stacklevel=2)
            result = _guarded(llvm_ir, False)
        if result is None:
            raise NMPCompilationError("LLVM crashed while optimising this kernel (an LLVM bug)", kernel=kernel,
                                      hint="set TRITON_NMP_HOST_CPU to another CPU level, e.g. x86-64-v2")
        text, obj = result
    _objects[hashlib.sha256(text.encode()).hexdigest()] = obj
    return text


def emit_object(llvm_ir: str) -> bytes:
    """The object file for optimised IR text (emitted by `optimize`, or now for other text)."""
    obj = _objects.pop(hashlib.sha256(llvm_ir.encode()).hexdigest(), None)
    if obj is not None:
        return obj
    tm = target_machine()
    return tm.emit_object(llvm.parse_assembly(llvm_ir))

"""LLVM through llvmlite: the target machine, the optimisation pipeline, object emission.

The simulator executes kernels natively, so the "nmp pseudo-target" is an x86-64 CPU level:
`x86-64-v3` (AVX2, FMA, F16C) by default, which every machine we run on has, so cached objects are
portable; `TRITON_NMP_HOST_CPU=native` (or any LLVM CPU name) overrides it. The CPU and LLVM version
are part of the backend hash, so Triton's cache never hands an object to a CPU that cannot run it.

llvmlite's LLVM is built with assertions, and an LLVM assertion aborts the process. Optimisation and
object emission therefore run in a forked child (about 5 ms); if the child dies, the kernel is
optimised again without loop vectorisation, and if that dies too the user gets a compilation error
naming the kernel instead of a dead interpreter.
"""

from __future__ import annotations

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
    # O2 with vectorisation, without unrolling: tile loops have static trip counts, and fully unrolling
    # them costs much compile time for little simulation speed.
    pto = llvm.create_pipeline_tuning_options(speed_level=2)
    pto.loop_vectorization = vectorize
    pto.slp_vectorization = vectorize
    pto.loop_unrolling = False
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return str(mod), tm.emit_object(mod)


def _guarded(llvm_ir: str, vectorize: bool) -> tuple[str, bytes] | None:
    """Run `_optimize_and_emit` in a forked child; None if the child crashed or hung."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns
        try:
            os.close(r)
            payload = pickle.dumps(_optimize_and_emit(llvm_ir, vectorize))
            view = memoryview(payload)
            while view:
                n = os.write(w, view)
                view = view[n:]
            os._exit(0)
        except BaseException:
            os._exit(1)
    os.close(w)
    chunks = []
    deadline = time.monotonic() + GUARD_TIMEOUT_S
    try:
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([r], [], [], max(left, 0))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                break
            chunk = os.read(r, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(r)
        _, status = os.waitpid(pid, 0)
    if status != 0:
        return None
    return pickle.loads(b"".join(chunks))


_objects: dict[str, bytes] = {}


def optimize(llvm_ir: str, kernel: str) -> str:
    """Verify and optimise (O2 with loop and SLP vectorisation); returns the optimised IR text.

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

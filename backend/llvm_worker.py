"""The LLVM worker process: verifies, optimises and emits one module per request, in its own process.

Contract: run as a script (`python llvm_worker.py`), it reads requests from stdin and writes replies
to stdout, each a length-prefixed pickle (8-byte little-endian length, then the payload):

    request  ("optimize", llvm_ir, cpu, opt_level, vectorize, codegen_level) -> ("ok", optimised_ir, object_bytes)
             ("emit", llvm_ir, cpu, codegen_level)                            -> ("ok", llvm_ir, object_bytes)
    failure  -> ("error", message)  (the IR does not parse or verify: a compiler bug, reported as such)

It exits when stdin closes (also when its parent dies). It imports only the standard library and
llvmlite, so it starts in tens of milliseconds. Why a separate process at all: llvmlite's LLVM is
built with assertions and an assertion aborts the process; in a worker it only kills the worker.
Why spawned rather than forked: forking a multi-threaded parent can copy a lock another thread holds
(LLVM's, malloc's, Python's) into a child that then waits for it forever.

`optimize_and_emit` is also imported by the parent for in-process compilation
(`TRITON_NMP_LLVM_GUARD=0`).
"""

from __future__ import annotations

import functools
import os
import pickle
import select
import signal
import sys
import time

import llvmlite.binding as llvm

# At import, before any thread can compile: LLVM's target registration is not thread-safe.
llvm.initialize_native_target()
llvm.initialize_native_asmprinter()
llvm.initialize_native_asmparser()


# Options of the worker's code generator, process-wide in LLVM (so set in the worker only, never in a parent that
# may host other llvmlite users; in process, TRITON_NMP_LLVM_GUARD=0, LLVM's defaults apply). No loop strength
# reduction: it took ~14% of object emission, and the kernels measured no slower natively without it (attention
# ~5% faster). Fast instruction selection (`-fast-isel`, another ~15% of emission) was measured and not kept: the
# attention example ran 15% slower natively.
CODEGEN_OPTIONS = ("-disable-lsr",)


def set_codegen_options() -> None:
    for option in CODEGEN_OPTIONS:
        llvm.set_option("", option)


@functools.lru_cache(None)
def target_machine(cpu: str, codegen_level: int = 3) -> llvm.TargetMachine:
    """The host target machine for `cpu` (an LLVM CPU name; host features only for the host's own CPU) whose
    code generator runs at `codegen_level` (llc's -O0..-O3). Made once per pair (~1 ms each): a worker serves
    one request at a time, and in process every LLVM call holds `llvm_target`'s lock."""
    target = llvm.Target.from_default_triple()
    features = llvm.get_host_cpu_features().flatten() if cpu == llvm.get_host_cpu_name() else ""
    return target.create_target_machine(cpu=cpu, features=features, opt=codegen_level, reloc="pic",
                                        codemodel="default")


class IRError(Exception):
    """The module does not parse or verify."""


def _parse(llvm_ir: str, context: llvm.context.ContextRef) -> llvm.ModuleRef:
    try:
        mod = llvm.parse_assembly(llvm_ir, context=context)
        mod.verify()
    except RuntimeError as e:
        raise IRError(str(e)) from e
    return mod


def optimize_and_emit(llvm_ir: str, cpu: str, opt_level: int, vectorize: bool,
                      codegen_level: int = 3) -> tuple[str, bytes]:
    """Verify, optimise (O`opt_level` + loop/SLP vectorisation, no unrolling) and emit an object with the code
    generator at `codegen_level`.

    Tile loops have static trip counts; O2/O3 and unrolling cost much compile time for little
    simulation speed. Each call uses its own LLVM context, so calls from several threads never share one.
    """
    tm = target_machine(cpu, codegen_level)
    mod = _parse(llvm_ir, llvm.create_context())
    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    pto.loop_vectorization = vectorize
    pto.slp_vectorization = vectorize
    pto.loop_unrolling = False
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return str(mod), tm.emit_object(mod)


def emit(llvm_ir: str, cpu: str, codegen_level: int = 3) -> tuple[str, bytes]:
    """The object of already optimised IR text."""
    tm = target_machine(cpu, codegen_level)
    return llvm_ir, tm.emit_object(_parse(llvm_ir, llvm.create_context()))


def handle(request: tuple) -> tuple:
    """One request -> one reply (see the module docstring)."""
    try:
        if request[0] == "optimize":
            return ("ok", *optimize_and_emit(*request[1:]))
        if request[0] == "emit":
            return ("ok", *emit(*request[1:]))
        return ("error", f"unknown request {request[0]!r}")
    except IRError as e:
        return ("error", str(e))


def write_msg(fd: int, payload: bytes) -> None:
    data = len(payload).to_bytes(8, "little") + payload
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_exact(fd: int, n: int, deadline: float | None = None) -> bytes | None:
    """Exactly n bytes from fd, or None at end of file (or when time.monotonic() passes `deadline`)."""
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                return None
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def serve(req_fd: int, resp_fd: int) -> None:
    write_msg(resp_fd, pickle.dumps(("ready", os.getpid())))
    while True:
        head = read_exact(req_fd, 8)
        if head is None:
            return
        body = read_exact(req_fd, int.from_bytes(head, "little"))
        if body is None:
            return
        write_msg(resp_fd, pickle.dumps(handle(pickle.loads(body))))


if __name__ == "__main__":
    # Ctrl-C reaches the whole process group; the parent decides (it kills a worker it interrupted).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_codegen_options()
    # The replies own stdout; anything LLVM or Python prints goes to stderr instead.
    resp = os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin.fileno(), resp)

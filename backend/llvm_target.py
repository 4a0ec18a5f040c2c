"""LLVM through llvmlite: the host target machine, the optimisation pipeline, object emission.

The simulator executes kernels natively, so the "nmp pseudo-target" is the host CPU. Objects are
therefore only valid on a CPU like the one that compiled them: the host fingerprint is part of the
backend hash, so Triton's cache never hands an object to a machine that cannot run it.
"""

from __future__ import annotations

import functools
import hashlib

import llvmlite.binding as llvm

from triton_nmp.errors import NMPCompilationError


@functools.lru_cache(None)
def _init() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()


@functools.lru_cache(None)
def target_machine() -> llvm.TargetMachine:
    _init()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
                                        opt=3, reloc="pic", codemodel="default")


@functools.lru_cache(None)
def host_fingerprint() -> str:
    _init()
    text = llvm.get_host_cpu_name() + llvm.get_host_cpu_features().flatten() + llvm.llvm_version_info.__repr__()
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def optimize(llvm_ir: str, kernel: str) -> str:
    """Verify and optimise (O3 with loop and SLP vectorisation); returns the optimised IR text."""
    tm = target_machine()
    try:
        mod = llvm.parse_assembly(llvm_ir)
        mod.verify()
    except RuntimeError as e:
        raise NMPCompilationError(f"generated LLVM IR does not verify (a compiler bug): {e}", kernel=kernel) from e
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    pm = pb.getModulePassManager()
    pm.run(mod, pb)
    return str(mod)


def emit_object(llvm_ir: str) -> bytes:
    tm = target_machine()
    mod = llvm.parse_assembly(llvm_ir)
    return tm.emit_object(mod)

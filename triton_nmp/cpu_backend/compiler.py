"""The compiler class Triton finds under the name "cpu".

When nmp owns the name, `NMPCPUBackend` is the nmp compiler for `GPUTarget("cpu", ...)` targets, including
Inductor's `GPUTarget("cpu", "", 32)` (empty arch: the active nmp target) and kernels whose arch names another
nmp target (`triton_nmp.target_registry`). When another backend owns "cpu", this module exposes that backend's
compiler class instead (Triton takes the one concrete `BaseBackend` subclass it finds here).
"""

import importlib as _importlib

from triton.backends.compiler import GPUTarget as _GPUTarget

from triton_nmp.triton_name import foreign_cpu_backend as _foreign_cpu_backend

_foreign = _foreign_cpu_backend()

if _foreign is not None:
    from triton.backends import BaseBackend as _BaseBackend
    from triton.backends import _find_concrete_subclasses

    _cls = _find_concrete_subclasses(_importlib.import_module(f"{_foreign.value}.compiler"), _BaseBackend)
    globals()[_cls.__name__] = _cls
    del _cls  # Triton looks for exactly one backend class in this module
else:
    from triton_nmp.backend import compiler as _nmp_compiler

    class NMPCPUBackend(_nmp_compiler.NMPBackend):
        """nmp for Triton targets named "cpu"."""

        @staticmethod
        def supports_target(target: _GPUTarget) -> bool:
            return target.backend == "cpu"

        def __init__(self, target: _GPUTarget) -> None:
            from triton_nmp import target_registry
            from triton_nmp.target import target_arch

            # Inductor's GPUTarget("cpu", "", 32) means the active target; an arch published by another
            # process (a compile worker's parent) is loaded from the registry. The stages read the spec back
            # from the options' arch.
            super().__init__(_GPUTarget("cpu", target_arch(target_registry.resolve(str(target.arch))), 1))

"""The compiler class Triton finds under the name "cpu".

When nmp owns the name, `NMPCPUBackend` is the nmp compiler for `GPUTarget("cpu", ...)` targets, including
Inductor's `GPUTarget("cpu", "", 32)` (empty arch: the active nmp target) and kernels whose arch names another
nmp target (`triton_nmp.target_registry`). When another backend owns "cpu", this module exposes that backend's
compiler class instead (Triton takes the one concrete `BaseBackend` subclass it finds here).
"""

from triton.backends.compiler import BaseBackend as _BaseBackend
from triton.backends.compiler import GPUTarget as _GPUTarget

from triton_nmp.triton_name import foreign_backend_class as _foreign_backend_class

_cls = _foreign_backend_class("compiler", _BaseBackend)
if _cls is not None:
    globals()[_cls.__name__] = _cls  # another package owns "cpu": Triton finds its compiler here
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

del _cls  # Triton takes the one backend class it finds in this module

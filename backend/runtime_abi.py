"""The runtime library's interface as kernels see it: the helpers' names and types (`runtime_library`
compiles and loads their definitions, `codegen_runtime` builds them).

A kernel module only declares a helper (`declare(module, name)`), under a name that carries the
version (`symbol(name)`: `nmp_rt_<name>_<hash of the backend's sources>`, the hash that also keys
Triton's cache of kernel binaries), so an object can never bind to helpers of another version: its
load fails with the loader's "external symbols that do not exist" error instead.
"""

from __future__ import annotations

import functools

from llvmlite import ir

from triton_nmp.abi import TRACE_WORDS

from .codegen_scalar import I64
from .version import source_hash

PREFIX = "nmp_rt_"
TYPES: dict[str, ir.FunctionType] = {
    "trace": ir.FunctionType(I64, [I64.as_pointer()] + [I64] * TRACE_WORDS),
    "watchdog": ir.FunctionType(I64, [I64.as_pointer()]),
    "fail": ir.FunctionType(ir.VoidType(), [I64.as_pointer()] + [I64] * 8),
}
# called on every WATCHDOG_TICKS-th tick / when a check fails
_ATTRS: dict[str, tuple[str, ...]] = {"watchdog": ("cold",), "fail": ("cold",)}


@functools.lru_cache(None)
def symbol(name: str) -> str:
    """The linker name of helper `name` in this version of the library."""
    return f"{PREFIX}{name}_{source_hash()[:12]}"


def declare(module: ir.Module, name: str) -> ir.Function:
    """Helper `name` declared in a kernel's module (once; later calls return the declaration)."""
    return module.globals.get(symbol(name)) or define(module, name)


def define(module: ir.Module, name: str) -> ir.Function:
    """Helper `name` in `module`: a declaration, or the library's definition once its builder
    (`codegen_runtime.build_library`) appends the body."""
    fn = ir.Function(module, TYPES[name], symbol(name))
    for attr in ("nounwind",) + _ATTRS.get(name, ()):
        fn.attributes.add(attr)
    return fn

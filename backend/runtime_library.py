"""The runtime library of compiled kernels: the helpers every kernel calls out of line, compiled once
per process instead of once in every kernel's module.

The helpers: `trace` (append a trace record, growing the buffer), `copy_rows_<1|2|4|8>` (move the rows
of a DMA descriptor between global memory and a tile) and `watchdog` (`codegen_watchdog`). They are the
same in every kernel; defined in each module they were about a third of a small kernel's LLVM IR and
~10 ms of LLVM's optimisation and object emission per kernel (benchmarks/README.md, compile time).
Kernels declare them under versioned names (`runtime_abi`).

Contract: importing this module (the compiler does) registers the library with `simulator.loader`,
which, before it loads the first object that refers to `nmp_rt_` symbols, calls `compile_library()`
once in this process, keeps the library's code for the life of the process and makes its symbols
resolvable for every object loaded afterwards. The library is compiled in process (its IR is fixed and
covered by the tests, so it needs no LLVM worker's crash guard): ~30 ms once per process that loads
kernels, never part of a kernel's compile.
"""

from __future__ import annotations

from llvmlite import ir

from triton_nmp.simulator import loader

from . import llvm_target
from .codegen_runtime import build_library
from .runtime_abi import PREFIX


def library_ir() -> str:
    """The library's LLVM IR, helpers under their `runtime_abi.symbol()` names, for the host target."""
    module = ir.Module(name="nmp_runtime")
    module.triple, module.data_layout = llvm_target.target_triple_and_layout()
    build_library(module)
    return str(module)


def compile_library() -> bytes:
    """The library's object code for this host."""
    return llvm_target.compile_trusted(library_ir())


loader.register_library(PREFIX, compile_library)

"""The runtime library of compiled kernels: the helpers every kernel calls out of line, compiled once
per process instead of once in every kernel's module.

The helpers: `trace` (append a trace record, growing the buffer), `fail` (record a failed check) and
`watchdog` (`codegen_watchdog`); their definitions are built in `codegen_runtime`. The row copier of DMA
descriptors stays in each kernel's module, where its call sites' constants specialise it (`codegen_runtime`).
The helpers are the same in every kernel; defined in each module they were a large part of a small kernel's
LLVM IR and of LLVM's time per kernel (benchmarks/README.md, compile time).
Kernels declare them under versioned names (`runtime_abi`).

Contract: importing this module (the compiler does) registers the library with `simulator.loader`,
which, before it loads the first object that refers to `nmp_rt_` symbols, calls `compile_library()`
once in this process, keeps the library's code for the life of the process and makes its symbols
resolvable for every object loaded afterwards. Its object is kept in Triton's cache (keyed by version,
host CPU and optimisation level; a cached file that is truncated, foreign or lacks a helper is compiled again and
replaced, with a warning naming it); without one it is compiled in process (its IR is fixed and covered by
the tests, so it needs no LLVM worker's crash guard), ~30 ms once, never part of a kernel's compile.
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path

from llvmlite import ir

from triton_nmp.simulator import loader

from . import llvm_target
from .codegen_runtime import build_library
from .runtime_abi import PREFIX, TYPES, symbol

_FILE = "nmp_runtime.o"


def library_ir() -> str:
    """The library's LLVM IR, helpers under their `runtime_abi.symbol()` names, for the host target."""
    module = ir.Module(name="nmp_runtime")
    module.triple, module.data_layout = llvm_target.target_triple_and_layout()
    build_library(module)
    return str(module)


def _unusable(data: bytes) -> str | None:
    """Why a cached library object cannot be loaded (a truncated or foreign file, a helper missing), or None."""
    try:
        defined = loader.elf_symbols(data).defined
    except loader.NMPLoadError as e:
        return str(e)
    missing = sorted(symbol(n) for n in TYPES if symbol(n) not in defined)
    return f"it does not define {', '.join(missing)}" if missing else None


def compile_library() -> bytes:
    """The library's object code for this host: from Triton's cache, else compiled now and stored there."""
    from triton.runtime.cache import get_cache_manager

    key = f"{symbol('trace')}-{llvm_target.cpu_name()}-{llvm_target.host_fingerprint()}-{llvm_target.opt_level()}"
    cache = get_cache_manager(hashlib.sha256(key.encode()).hexdigest())
    path = cache.get_file(_FILE)
    if path is not None:
        data = Path(path).read_bytes()
        problem = _unusable(data)
        if problem is None:
            return data
        warnings.warn(f"triton-nmp: the cached runtime library {path} is unusable ({problem}); compiling it again "
                      f"and replacing the file", stacklevel=2)
    obj = llvm_target.compile_trusted(library_ir())
    try:
        cache.put(obj, _FILE, binary=True)
    except OSError as e:
        warnings.warn(f"triton-nmp: cannot store the runtime library in Triton's cache ({e})", stacklevel=2)
    return obj


loader.register_library(PREFIX, compile_library)

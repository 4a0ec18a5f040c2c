"""Load an `nmpbin` object file into the process and resolve its entry symbol.

The compiler emits a host ELF relocatable object (llvmlite `TargetMachine.emit_object`). It is
loaded with MCJIT (`add_object_file`), so a cached binary runs without re-optimising. Before the
object is handed to LLVM we check it ourselves: RuntimeDyld silently resolves an unknown external
symbol to address 0 and a call through it kills the process, and it does not validate foreign or
truncated files either. Both become an `NMPLoadError` here instead. Code that every object would
otherwise carry lives in libraries (`register_library`: the compiler's runtime library), loaded once
per process before the first object that calls them.

Thread safety: loading, symbol lookup and unloading hold one lock. Triton lets two threads initialise
the same compiled kernel at once (`CompiledKernel._init_handles` is not locked), and two compiled
kernels can share a binary; so an object already loaded under the same name is handed out again with a
reference count, and `close()` frees the code only when its last holder lets go. No thread can
find the code it is about to call freed by another's load.
"""

from __future__ import annotations

import ctypes.util
import hashlib
import platform
import struct
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import llvmlite.binding as llvm

from triton_nmp.errors import NMPRuntimeError

__all__ = [
    "NMPLoadError",
    "ElfSymbols",
    "LoadedObject",
    "elf_symbols",
    "load_object",
    "object_for_address",
]


class NMPLoadError(NMPRuntimeError):
    """An nmpbin object cannot be loaded (not a host object, unresolved symbol, missing entry)."""


# ---------------------------------------------------------------------------------------------
# ELF symbol table reader (just enough to list defined and undefined global symbols)

_EM_BY_MACHINE = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183}
_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_SHT_SYMTAB = 2
_STB_GLOBAL, _STB_WEAK = 1, 2
_STT_FUNC = 2
_ET_REL = 1
# Symbols RuntimeDyld synthesises itself, so they are never looked up in the process.
_DYLD_PROVIDED = frozenset({"_GLOBAL_OFFSET_TABLE_"})


@dataclass(frozen=True)
class ElfSymbols:
    """Global symbols of an object: what it defines and what it needs from the process."""

    functions: tuple[str, ...]  # defined global/weak functions, in symbol-table order
    defined: frozenset[str]  # every defined global/weak symbol
    undefined: tuple[str, ...]  # strong undefined references (weak ones may legally stay 0)


def _cstr(blob: bytes, off: int) -> str:
    end = blob.find(b"\0", off)
    return blob[off : end if end >= 0 else len(blob)].decode("utf-8", "replace")


def elf_symbols(data: bytes) -> ElfSymbols:
    """Parse the symbol table of a host ELF64 relocatable object; raise NMPLoadError if it is not one."""
    if len(data) < _EHDR.size or data[:4] != b"\x7fELF":
        raise NMPLoadError("the nmpbin is not an ELF object file (was it produced by emit_object?)")
    ident, e_type, e_machine, *_rest = _EHDR.unpack_from(data, 0)
    e_shoff, e_shentsize, e_shnum = _rest[3], _rest[8], _rest[9]
    if ident[4] != 2 or ident[5] != 1:
        raise NMPLoadError("the nmpbin is not a little-endian 64-bit ELF object")
    want = _EM_BY_MACHINE.get(platform.machine().lower())
    if want is not None and e_machine != want:
        raise NMPLoadError(
            f"the nmpbin was compiled for ELF machine {e_machine}, but this host ({platform.machine()}) "
            f"needs machine {want}: recompile for the host triple"
        )
    if e_type != _ET_REL:
        raise NMPLoadError(f"the nmpbin is an ELF file of type {e_type}, expected a relocatable object (1)")

    def section(i: int) -> tuple[int, ...]:
        off = e_shoff + i * e_shentsize
        if e_shentsize < _SHDR.size or off + _SHDR.size > len(data):
            raise NMPLoadError("the nmpbin is truncated or malformed (section header out of range)")
        return _SHDR.unpack_from(data, off)

    if e_shoff == 0:
        raise NMPLoadError("the nmpbin has no section headers")
    if e_shnum == 0:  # extended numbering: the count lives in section 0
        e_shnum = section(0)[5]
    functions: list[str] = []
    defined: set[str] = set()
    undefined: list[str] = []
    for i in range(e_shnum):
        _n, sh_type, _f, _a, sh_offset, sh_size, sh_link, _i, _al, sh_entsize = section(i)
        if sh_type != _SHT_SYMTAB:
            continue
        str_off, str_size = section(sh_link)[4:6]
        if sh_offset + sh_size > len(data) or str_off + str_size > len(data) or sh_entsize < _SYM.size:
            raise NMPLoadError("the nmpbin is truncated or malformed (symbol table out of range)")
        strtab = data[str_off : str_off + str_size]
        for off in range(sh_offset, sh_offset + sh_size - _SYM.size + 1, sh_entsize):
            st_name, st_info, _o, st_shndx, _v, _s = _SYM.unpack_from(data, off)
            bind, typ = st_info >> 4, st_info & 0xF
            if bind not in (_STB_GLOBAL, _STB_WEAK) or st_name == 0:
                continue
            name = _cstr(strtab, st_name)
            if st_shndx == 0:
                if bind == _STB_GLOBAL:
                    undefined.append(name)
                continue
            defined.add(name)
            if typ == _STT_FUNC:
                functions.append(name)
    return ElfSymbols(tuple(functions), frozenset(defined), tuple(undefined))


# ---------------------------------------------------------------------------------------------
# MCJIT loading

# Reentrant: Triton's CompiledKernel.__del__ unloads its module, and the garbage collector can run
# that finalizer inside `load_object` (any allocation may trigger a collection) on the thread that
# already holds the lock; a plain Lock deadlocked the process there (seen in long test runs).
_lock = threading.RLock()
_initialized = False
# Loaded objects by the function address `load_binary` handed to Triton, so the launcher can get
# from `CompiledKernel.function` back to the object and resolve metadata["nmp_entry"] in it.
_by_address: weakref.WeakValueDictionary[int, LoadedObject] = weakref.WeakValueDictionary()
# Live objects by (name, content hash): a second load of the same binary shares the first.
_by_content: weakref.WeakValueDictionary[tuple[str, str], LoadedObject] = weakref.WeakValueDictionary()


def _initialize() -> None:
    """One-time LLVM setup; libm/libgcc_s are made searchable for libcalls (expf, __truncsfhf2...)."""
    global _initialized
    if _initialized:
        return
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    for lib in ("m", "gcc_s"):
        path = ctypes.util.find_library(lib)
        if path:
            try:
                llvm.load_library_permanently(path)
            except RuntimeError:  # not fatal: the check below names any symbol still missing
                pass
    _initialized = True


@dataclass(eq=False)
class LoadedObject:
    """An nmpbin loaded in the process. The engine owns the code: keep this alive while calling it."""

    name: str
    symbols: ElfSymbols
    engine: llvm.ExecutionEngine | None = field(repr=False)
    key_address: int = 0  # the address reported to Triton as `function`
    refs: int = 1  # load_object calls not yet matched by close()

    @property
    def closed(self) -> bool:
        return self.engine is None

    def address(self, symbol: str) -> int:
        """Address of a defined symbol; NMPLoadError (listing what is defined) if it is absent."""
        with _lock:
            if self.engine is None:
                raise NMPLoadError(f"the object of kernel '{self.name}' was unloaded")
            addr = self.engine.get_function_address(symbol) if symbol in self.symbols.defined else 0
        if not addr:
            raise NMPLoadError(
                f"entry symbol '{symbol}' is not defined in the object of kernel '{self.name}' "
                f"(it defines functions {list(self.symbols.functions)})"
            )
        return addr

    def close(self) -> None:
        """Release one load; the last release frees the code (calling into it afterwards is undefined)."""
        with _lock:
            if self.engine is None:
                return
            self.refs -= 1
            if self.refs > 0:
                return
            if _by_address.get(self.key_address) is self:
                del _by_address[self.key_address]
            self.engine.close()
            self.engine = None


def load_object(data: bytes, name: str = "") -> LoadedObject:
    """Load an nmpbin; `name` (the kernel name) is used in messages and to pick `key_address`.

    `key_address` is the address of the function called `name` if the object defines one, otherwise
    of its first global function. `object_for_address(key_address)` finds the object again.
    """
    data = bytes(data)
    syms = elf_symbols(data)
    _load_libraries(syms)  # outside our lock: a library loads through load_object
    content_key = (name, hashlib.sha256(data).hexdigest())
    with _lock:
        shared = _by_content.get(content_key)
        if shared is not None and shared.engine is not None:
            shared.refs += 1
            return shared
        _initialize()
        tm = llvm.Target.from_default_triple().create_target_machine()
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
        # After the engine exists, LLVM's symbol search covers the process (libc, libm, Python).
        missing = [s for s in syms.undefined if s not in _DYLD_PROVIDED and not llvm.address_of_symbol(s)]
        if missing:
            engine.close()
            raise NMPLoadError(
                f"the object of kernel '{name}' calls external symbols that do not exist in this process: "
                f"{missing}; only libc, libm, compiler-runtime (libgcc_s), Python C-API functions and this version's "
                f"runtime library (nmp_rt_*: an object compiled by another version of triton-nmp calls other names) "
                f"can be called"
            )
        try:
            engine.add_object_file(llvm.ObjectFileRef.from_data(data))
            engine.finalize_object()
        except RuntimeError as exc:
            engine.close()
            raise NMPLoadError(f"LLVM could not load the object of kernel '{name}': {exc}") from exc
        obj = LoadedObject(name, syms, engine)
        key_sym = name if name in syms.functions else (syms.functions[0] if syms.functions else None)
        if key_sym is not None:
            obj.key_address = engine.get_function_address(key_sym)
            _by_address[obj.key_address] = obj
        _by_content[content_key] = obj
    return obj


# ---------------------------------------------------------------------------------------------
# Libraries: code objects call instead of carrying it (the compiler's runtime library)

_libraries: dict[str, Callable[[], bytes]] = {}  # symbol prefix -> builds the library's object
_loaded_libraries: dict[str, LoadedObject] = {}  # kept for the life of the process
_library_lock = threading.Lock()


def register_library(prefix: str, build: Callable[[], bytes]) -> None:
    """Objects may call functions named `prefix...` that `build()`'s object defines: it is built and
    loaded once, before the first object that calls one of them, and its functions stay resolvable for
    every later load in this process."""
    _libraries[prefix] = build


def _load_libraries(syms: ElfSymbols) -> None:
    for prefix, build in _libraries.items():
        if prefix in _loaded_libraries or not any(s.startswith(prefix) for s in syms.undefined):
            continue
        with _library_lock:
            if prefix in _loaded_libraries:
                continue
            lib = load_object(build(), f"library {prefix}*")
            for fn in lib.symbols.functions:
                llvm.add_symbol(fn, lib.address(fn))
            _loaded_libraries[prefix] = lib


def object_for_address(address: int) -> LoadedObject | None:
    """The live object whose `key_address` is `address`, if any."""
    return _by_address.get(address)

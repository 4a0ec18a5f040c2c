"""The runtime library (`backend/runtime_library.py`, `runtime_abi.py`): kernels declare the shared
helpers instead of defining them, the loader loads the library once per process, and an object calling
another version's helpers is refused with a clear error instead of binding to the wrong code."""

from __future__ import annotations

import re

import llvmlite.binding as llvm
import pytest
import torch

from triton_nmp.backend import runtime_abi, runtime_library
from triton_nmp.simulator import loader

from . import pipeline_kernels as pk


def test_kernels_declare_the_helpers_and_run_through_the_library():
    x = torch.randn(3000)
    y = torch.empty_like(x)
    k = pk.copy_kernel[(3,)](x, y, 3000, BLOCK=1024)  # masked last block: a failed-check path, trace, watchdog
    assert torch.equal(y, x)
    llir = k.asm["llir"]
    for name in ("trace", "fail", "watchdog"):
        sym = runtime_abi.symbol(name)
        assert re.search(rf"^declare [^\n]*@{sym}\(", llir, re.M), name
        assert not re.search(rf"^define [^\n]*@{sym}\(", llir, re.M), name
    assert "nmp_rt_" in "".join(loader.elf_symbols(k.asm["nmpbin"]).undefined)
    assert list(loader._loaded_libraries) == [runtime_abi.PREFIX]  # loaded by the launch, once
    for name in runtime_abi.TYPES:
        assert llvm.address_of_symbol(runtime_abi.symbol(name))


def test_the_library_verifies_and_defines_every_helper():
    mod = llvm.parse_assembly(runtime_library.library_ir())
    mod.verify()
    defined = {f.name for f in mod.functions if not f.is_declaration}
    assert defined == {runtime_abi.symbol(n) for n in runtime_abi.TYPES}
    assert set(runtime_abi.TYPES) == {"trace", "fail", "watchdog"}


OTHER_VERSION_IR = r"""
declare i64 @nmp_rt_trace_000000000000(ptr, i64, i64, i64, i64, i64, i64, i64, i64)

define i64 @old_entry(ptr %slots, i64 %gx, i64 %gy, i64 %gz, ptr %ctx) {
  %r = call i64 @nmp_rt_trace_000000000000(ptr %ctx, i64 0, i64 0, i64 0, i64 0, i64 0, i64 0, i64 0, i64 0)
  ret i64 %r
}
"""


def test_an_object_of_another_version_is_refused_by_name():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    mod = llvm.parse_assembly(OTHER_VERSION_IR)
    data = llvm.Target.from_default_triple().create_target_machine().emit_object(mod)
    with pytest.raises(loader.NMPLoadError, match=r"nmp_rt_trace_000000000000.*another version of triton-nmp"):
        loader.load_object(data, "old_kernel")


def test_the_library_object_is_compiled_once_then_read_from_tritons_cache(tmp_path, monkeypatch):
    from triton import knobs

    from triton_nmp.backend import llvm_target

    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path))
    first = runtime_library.compile_library()  # an empty cache: compiled now, and stored
    assert loader.elf_symbols(first).functions
    monkeypatch.setattr(llvm_target, "compile_trusted", lambda ir: pytest.fail("compiled again"))
    assert runtime_library.compile_library() == first


@pytest.mark.parametrize("damage", ["truncated", "other_object"])
def test_a_damaged_cached_library_is_compiled_again_and_replaced(tmp_path, monkeypatch, damage):
    """A truncated cache file, or one that lacks the helpers, would make every kernel load fail: it is rebuilt."""
    from pathlib import Path

    from triton import knobs

    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path))
    good = runtime_library.compile_library()
    (path,) = Path(tmp_path).rglob(runtime_library._FILE)
    if damage == "truncated":
        path.write_bytes(good[:100])
        reason = "truncated or malformed"
    else:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        mod = llvm.parse_assembly("define i64 @other() {\n  ret i64 0\n}\n")
        path.write_bytes(llvm.Target.from_default_triple().create_target_machine().emit_object(mod))
        reason = f"does not define .*{runtime_abi.symbol('fail')}"
    with pytest.warns(UserWarning, match=rf"cached runtime library .*nmp_runtime.o is unusable \(.*{reason}.*compiling "
                                         r"it again and replacing the file"):
        assert runtime_library.compile_library() == good
    assert path.read_bytes() == good  # replaced: the next process reads a good file

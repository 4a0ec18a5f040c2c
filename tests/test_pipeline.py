"""The compilation pipeline end to end: stages, caches, dumps, memory-access lowering and errors."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import triton

import triton_nmp
from triton_nmp.backend.ir import Block, Func, Module, Op, Ty, Value
from triton_nmp.backend.nmpir import verify
from triton_nmp.errors import NMPCompilationError, NMPOutOfBoundsError

from . import pipeline_kernels as pk

HERE = Path(__file__).resolve().parent


def test_stages_visible_in_asm():
    x = torch.randn(1000)
    y = torch.empty(1000)
    k = pk.copy_kernel[(4,)](x, y, 1000, BLOCK=256)
    assert torch.equal(x, y)
    assert list(k.asm) == ["source", "ttir", "nmpir", "llir", "nmpbin"]
    assert "nmp.dma_load" in k.asm["nmpir"] and "nmp.dma_store" in k.asm["nmpir"]
    assert "pipeline_kernels.py" in k.asm["nmpir"]  # source locations survive into the tile dialect
    assert "define" in k.asm["llir"] and isinstance(k.asm["nmpbin"], bytes)
    assert k.metadata.nmp_entry.startswith("nmp_grid_")


def test_elementwise_loops_are_vectorised():
    x = torch.randn(1000)
    y = torch.empty(1000)
    k = pk.row_sum_loop_kernel[(1,)](x, y, 1000, 1000, BLOCK=256)
    assert "<8 x float>" in k.asm["llir"] or "<4 x float>" in k.asm["llir"]


def test_loop_carried_pointer_becomes_scalar_offset():
    x = torch.randn(7, 300)
    out = torch.empty(7)
    k = pk.row_sum_loop_kernel[(7,)](x, out, 300, x.stride(0), BLOCK=128)
    torch.testing.assert_close(out, x.sum(1), rtol=1e-5, atol=1e-5)
    nmpir = k.asm["nmpir"]
    assert "_off: i64" in nmpir  # the pointer tensor is carried as one i64 byte offset
    assert "nmp.gather" not in nmpir and "tt.addptr" not in nmpir


def test_unstructured_access_falls_back_to_gather():
    n = 1000
    x = torch.randn(n)
    y = torch.empty(n)
    k = pk.modulo_gather_kernel[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256)
    idx = (torch.arange(n) * 7) % n
    assert torch.equal(y, x[idx])
    assert "nmp.gather" in k.asm["nmpir"]


def test_out_of_bounds_load_is_reported_with_argument_range_and_line():
    x = torch.randn(1000)
    y = torch.empty(1024)
    with pytest.raises(NMPOutOfBoundsError, match=r"tt\.load of argument 'x_ptr' touches bytes \[3072, 4096\) "
                       r"but the tensor spans \[0, 4000\).*pipeline_kernels\.py:17"):
        pk.unmasked_copy_kernel[(4,)](x, y, BLOCK=256)


def test_out_of_bounds_store_writes_nothing_outside_the_tensor():
    storage = torch.zeros(2048)
    view = storage[:1000]  # the kernel's programs 3.. would write into the rest of the storage
    with pytest.raises(NMPOutOfBoundsError, match=r"tt\.store of argument 'y_ptr'.*pipeline_kernels\.py:23"):
        pk.unmasked_store_kernel[(8,)](view, BLOCK=256)
    assert torch.all(storage[1000:] == 0)
    assert torch.all(storage[:768] == 7.0)  # programs before the failing one ran


def test_unsupported_op_names_op_and_line():
    x = torch.randn(64)
    y = torch.empty(64)
    with pytest.raises(NMPCompilationError,
                       match=r"pipeline_kernels\.py:38:9: inline assembly .* is not supported on nmp"):
        pk.inline_asm_kernel[(1,)](x, y, BLOCK=64)


def test_verifier_rejects_use_before_definition():
    body = Block()
    ghost = Value("ghost", Ty("i32"))
    body.ops.append(Op("arith.addi", [ghost, ghost], [Value("r", Ty("i32"))]))
    with pytest.raises(NMPCompilationError, match="operand %ghost is not defined before its use"):
        verify(Module([Func("k", [], [], body)]), "test")


def test_backend_hash_changes_with_target():
    from triton.compiler.compiler import make_backend

    drv = triton_nmp.activate()
    h1 = make_backend(drv.get_current_target()).hash()
    previous = triton_nmp.set_active_target(triton_nmp.TargetSpec.load("upmem-like"))
    try:
        h2 = make_backend(drv.get_current_target()).hash()
    finally:
        triton_nmp.set_active_target(previous)
    assert h1 != h2


_CHILD = textwrap.dedent(
    """
    import sys, torch, triton
    from triton import knobs
    sys.path.insert(0, {here!r})
    import pipeline_kernels as pk
    hits = []
    knobs.compilation.listener = lambda **kw: hits.append(kw["cache_hit"])
    x = torch.arange(300, dtype=torch.float32); y = torch.empty(300)
    pk.copy_kernel[(2,)](x, y, 300, BLOCK=256)
    assert torch.equal(x, y)
    print("CACHE_HIT" if hits == [True] else "COMPILED")
    """
)


def test_second_process_loads_kernel_from_cache(tmp_path):
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "cache"))
    code = _CHILD.format(here=str(HERE))
    outs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    assert outs[0].returncode == 0, outs[0].stderr
    assert outs[1].returncode == 0, outs[1].stderr
    assert outs[0].stdout.strip() == "COMPILED"
    assert outs[1].stdout.strip() == "CACHE_HIT"
    cached = {p.suffix for p in (tmp_path / "cache").rglob("*copy_kernel*")}
    assert {".ttir", ".nmpir", ".llir", ".nmpbin", ".json"} <= cached


def test_kernel_dump_contains_every_stage(tmp_path):
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "cache"), TRITON_KERNEL_DUMP="1",
               TRITON_DUMP_DIR=str(tmp_path / "dump"))
    code = _CHILD.format(here=str(HERE))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    dumped = {p.suffix for p in (tmp_path / "dump").rglob("copy_kernel.*")}
    assert {".ttir", ".nmpir", ".llir", ".nmpbin"} <= dumped


def test_timing_only_variant_reproduces_the_trace_without_computing():
    from triton_nmp.simulator import loader, runtime

    BM = BN = BK = 32
    K = 128
    a, b = torch.randn(BM, K), torch.randn(K, BN)
    c = torch.empty(BM, BN)
    seen = []

    def listener(meta, grid, result):
        seen.append(result)

    runtime.add_launch_listener(listener)
    try:
        k = pk.dot_loop_kernel[(1,)](a, b, c, K, BM=BM, BN=BN, BK=BK, timing_variant=True)
    finally:
        runtime.remove_launch_listener(listener)
    assert k.metadata.nmp_timing_entry == "nmp_grid_timing_dot_loop_kernel"
    obj = loader.load_object(k.asm["nmpbin"])
    fn = runtime.entry_function(obj.address(k.metadata.nmp_timing_entry))
    out = torch.full((BM, BN), -1.0)
    slots = runtime.make_slots([a.data_ptr(), a.numel() * 4, b.data_ptr(), b.numel() * 4,
                                out.data_ptr(), out.numel() * 4, K])
    r = runtime.run_grid(fn, slots, (1, 1, 1), runtime.KernelABI.from_metadata(k.metadata))
    assert (r.trace == seen[-1].trace).all() and r.counters == seen[-1].counters
    assert torch.all(out == -1.0)  # nothing computed, nothing stored


def test_row_offsets_from_program_ids_are_computed_by_the_timing_only_variant():
    """`(pid_m * BM + arange) % M` rows (the matmul tutorial) do not depend on loaded data: the kernel is
    grid-pipelined and has a timing-only variant, which computes the row offsets (M = 96 wraps the last
    row block, so the runs of rows, and with them the trace, depend on their values)."""
    from triton_nmp.simulator import loader, runtime

    from .corpus import matmul_tutorial

    M, N, K = 96, 64, 64
    a, b = torch.randn(M, K).half(), torch.randn(K, N).half()
    c = torch.empty(M, N, dtype=torch.float16)
    seen = []

    def listener(meta, grid, result):
        seen.append(result)

    cfg = dict(BLOCK_SIZE_M=64, BLOCK_SIZE_N=32, BLOCK_SIZE_K=32, GROUP_SIZE_M=8)
    runtime.add_launch_listener(listener)
    try:
        k = matmul_tutorial[(4,)](a, b, c, M, N, K, K, 1, N, 1, N, 1, timing_variant=True, **cfg)
    finally:
        runtime.remove_launch_listener(listener)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-1)
    assert k.metadata.nmp_grid_pipeline, k.metadata.nmp_grid_pipeline_reason
    assert k.metadata.nmp_timing_entry == "nmp_grid_timing_matmul_tutorial", k.metadata.nmp_timing_reason
    obj = loader.load_object(k.asm["nmpbin"])
    fn = runtime.entry_function(obj.address(k.metadata.nmp_timing_entry))
    out = torch.full((M, N), -1.0, dtype=torch.float16)
    slots = runtime.make_slots([a.data_ptr(), a.numel() * 2, b.data_ptr(), b.numel() * 2,
                                out.data_ptr(), out.numel() * 2, M, N, K, K, N, N])
    r = runtime.run_grid(fn, slots, (4, 1, 1), runtime.KernelABI.from_metadata(k.metadata))
    assert r.status == 0
    assert (r.trace == seen[-1].trace).all() and r.counters == seen[-1].counters
    assert torch.all(out == -1.0)


def test_data_dependent_addresses_are_not_timing_only():
    x = torch.randn(512)
    y = torch.empty(512)
    k = pk.modulo_gather_kernel[(2,)](x, y, 512, BLOCK=256, timing_variant=True)
    assert k.metadata.nmp_timing_entry == ""
    assert "gather" in k.metadata.nmp_timing_reason


def test_libdevice_through_the_portable_module():
    from . import pipeline_kernels as kernels

    x = torch.randn(100)
    y = torch.empty(100)
    kernels.libdevice_kernel[(1,)](x, y, 100, BLOCK=128)
    torch.testing.assert_close(y, torch.erf(x) + x * x, atol=1e-5, rtol=1e-5)


def test_importing_triton_nmp_before_triton_works() -> None:
    """`import triton_nmp` first used to start Triton's import from inside ours: Triton came out half
    initialised and the scratchpad-overflow error was no OutOfResources (autotune could not skip it)."""
    import subprocess
    import sys

    code = ("import triton_nmp, triton\n"
            "from triton.runtime.errors import OutOfResources\n"
            "from triton_nmp.errors import NMPScratchpadOverflowError\n"
            "assert issubclass(NMPScratchpadOverflowError, OutOfResources)\n"
            "assert hasattr(triton, 'knobs') and hasattr(triton, 'jit')\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_pipeline_names_every_nmpir_pass_in_order():
    from triton_nmp.backend import pipeline

    assert [p.name for p in pipeline.PASSES] == [
        "split-pointer-selects", "ttir-to-nmpir", "dead-code-elimination", "hoist-loop-invariants",
        "place-cheap-tiles",
        "sink-address-computations",
        "legalize-scratchpad", "pipeline-grid"]
    for p in pipeline.PASSES:
        assert p.name in pipeline.__doc__  # the module docstring describes each pass


def test_verifier_runs_after_every_pass_and_names_it():
    from triton_nmp.backend.pipeline import Pass, PassContext, run_passes

    def break_ir(mod, ctx):
        ghost = Value("ghost", Ty("i32"))
        mod.kernel.body.ops.append(Op("arith.addi", [ghost, ghost], [Value("r", Ty("i32"))]))
        return mod

    mod = Module([Func("k", [], [], Block())])
    with pytest.raises(NMPCompilationError, match="nmpir verifier after break-it: arith.addi: operand %ghost"):
        run_passes(mod, PassContext(None), [Pass("break-it", break_ir)])


def _compile_for(spec, block):
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    src = ASTSource(pk.copy_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                    {(3,): block})
    return triton.compile(src, target=GPUTarget("nmp", triton_nmp.target.target_arch(spec), 1))


def test_compile_plans_for_the_target_its_options_name():
    """The nmpir stage takes the machine from the compile target (options.arch), not the active target:
    a 16 KiB tile fits nmp-64's scratchpad as it is, and is strip-mined for hbm-pim-like's 8 KiB."""
    assert triton_nmp.active_target().name == "nmp-64"
    wide = _compile_for(triton_nmp.TargetSpec.load("nmp-64"), 4096)
    assert wide.metadata.shared >= 16384 and "strip_mined" not in wide.asm["nmpir"]
    small = triton_nmp.TargetSpec.load("hbm-pim-like")
    narrow = _compile_for(small, 4096)
    assert narrow.metadata.shared <= small.spm_bytes and "strip_mined" in narrow.asm["nmpir"]


def test_unknown_compile_target_is_refused():
    from triton_nmp.target import spec_for_arch

    with pytest.raises(triton_nmp.NMPTargetError, match="no nmp target matches the compile target's arch 'nmp-64:0'"):
        spec_for_arch("nmp-64:0")


def test_codegen_temporaries_never_share_a_stale_buffer():
    """Buffers are looked up by id(value); a codegen temporary (the scalar tile of a scalar DMA, an
    atomic's old values, a staged yield) that was freed left its id to the next temporary, which then got
    the earlier one's buffer, of another type ("cannot store i32 to float*" at compile time)."""
    from llvmlite import ir as llvm_ir

    from triton_nmp.backend.codegen import KernelCodegen
    from triton_nmp.backend.codegen_scalar import storage_type

    cg = KernelCodegen(Func("k", [], [], Block()), "x86_64-unknown-linux-gnu", "")
    fn = llvm_ir.Function(cg.module, llvm_ir.FunctionType(llvm_ir.VoidType(), []), "f")
    cg.alloca_builder = llvm_ir.IRBuilder(fn.append_basic_block("entry"))
    types = [Ty("i32", (4,)), Ty("f32", (4,))]
    wrong = [k for k in range(100) if cg.buffer(Value("tmp", types[k % 2])).type.pointee != storage_type(types[k % 2])]
    assert wrong == []

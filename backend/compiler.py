"""The nmp Triton backend: options and the compilation pipeline ttir -> nmpir -> llir -> nmpbin.

Each stage is one function from one IR to the next. `ttir` runs Triton's own TTIR passes; `nmpir`
imports the printed TTIR and lowers it to the near-memory tile dialect; `llir` generates and
optimises LLVM IR with llvmlite; `nmpbin` is the host object file the simulator loads. Every stage's
text lands in `compiled.asm[...]`, in Triton's cache and in TRITON_KERNEL_DUMP dumps.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from triton._C.libtriton import ir, passes
from triton.backends.compiler import BaseBackend, GPUTarget, Language

from triton_nmp.abi import PU_MAPPINGS
from triton_nmp.errors import NMPCompilationError
from triton_nmp.footprint import register_kernel
from triton_nmp.target import TargetSpec, spec_for_arch

from . import (
    llvm_target,
    runtime_library,  # noqa: F401  (registers the kernels' runtime library with the loader)
)
from .codegen import generate_llvm
from .nmpir import print_module
from .pipeline import PassContext, compile_ttir
from .scratchpad import ScratchpadPlan
from .version import VERSION
from .version import source_hash as _source_hash

FOREIGN_OPTIONS = ("matrix_instr_nonkdim", "waves_per_eu", "kpack", "maxnreg")
_warned: set[str] = set()


def _warn_foreign(name: str) -> None:
    if name not in _warned:
        _warned.add(name)
        warnings.warn(f"launch option '{name}' is defined by another Triton backend and has no effect on nmp",
                      stacklevel=3)


@dataclass(frozen=True)
class NMPOptions:
    """Compile options. `num_warps` and `num_ctas` are accepted for portability and ignored by design
    (one program runs on one PU); `num_stages` is the multi-buffering depth for loops that load tiles
    (default 2: double buffering; 1 turns it off)."""

    num_warps: int = 4
    num_ctas: int = 1
    num_stages: int = 2
    warp_size: int = 1
    debug: bool = False
    sanitize_overflow: bool = False
    backend_name: str = "nmp"
    arch: str = ""
    enable_fp_fusion: bool = True
    launch_cooperative_grid: bool = False
    launch_pdl: bool = False
    supported_fp8_dtypes: tuple[str, ...] = ("fp8e5", "fp8e4nv", "fp8e4b15")
    deprecated_fp8_dot_operand_dtypes: tuple[str, ...] = ()
    default_dot_input_precision: str = "ieee"
    allowed_dot_input_precisions: tuple[str, ...] = ("ieee", "tf32", "tf32x3", "bf16x3", "bf16x6")
    max_num_imprecise_acc_default: int = 0
    extern_libs: tuple | None = None
    instrumentation_mode: str = ""
    fpsan_homomorphic_casts: bool = False
    ir_override: str | None = None
    # nmp knobs (usable in triton.Config kwargs): how programs are mapped to PUs by the timing model, and
    # whether to also emit the timing-only variant of the kernel (for tuning and simulator benchmarks;
    # default from $TRITON_NMP_TIMING_VARIANT, off: it costs compile time most launches never use).
    pu_mapping: str = "auto"
    timing_variant: bool = False
    # Options other backends define that portable code passes on any target (Triton's matmul tutorial
    # passes AMD's on every non-CUDA device): accepted, warned about once, without effect on nmp.
    matrix_instr_nonkdim: int | None = None
    waves_per_eu: int | None = None
    kpack: int | None = None
    maxnreg: int | None = None

    def __post_init__(self) -> None:
        if self.pu_mapping not in PU_MAPPINGS:
            raise NMPCompilationError(f"unknown pu_mapping '{self.pu_mapping}'; choose one of {', '.join(PU_MAPPINGS)}")
        if self.num_stages < 1:
            raise NMPCompilationError(f"num_stages must be >= 1, got {self.num_stages}")
        if self.num_warps < 1 or self.num_ctas < 1:
            raise NMPCompilationError("num_warps and num_ctas must be >= 1")

    @property
    def target(self) -> TargetSpec:
        """The machine compiled for, named by `arch` (from the GPUTarget the compile was asked for)."""
        return spec_for_arch(self.arch)

    def hash(self) -> str:
        key = "_".join(f"{k}-{v}" for k, v in sorted(self.__dict__.items()))
        return hashlib.sha256(key.encode()).hexdigest()


class NMPIR:
    """The nmpir stage's result: the module, its scratchpad plan and what spilled to the bank (None when
    nothing did) for the next stage, and their text for caches and dumps."""

    def __init__(self, module, plan: ScratchpadPlan, spill=None):
        self.module = module
        self.plan = plan
        self.spill = spill
        self._text: str | None = None

    def __str__(self) -> str:
        if self._text is None:
            head = self.plan.summary() + "\n" + (self.spill.summary() + "\n" if self.spill is not None else "")
            self._text = head + print_module(self.module)
        return self._text


def _min_dot_size(lhs_type, rhs_type):
    return (1, 1, 1)


def _allow_inlining(mod) -> None:
    """Clear `noinline` on every function so the inliner inlines them: one program is one straight-line
    body on a PU (there is no call stack of tiles), and a call costs nothing a user could observe."""
    names: list[str] = []
    mod.walk(lambda op: names.append(op.get_str_attr("sym_name")) if op.get_name() == "tt.func" else None)
    no = ir.builder(mod.context).get_bool_attr(False)
    for name in names:
        if mod.has_function(name):
            mod.get_function(name).set_attr("noinline", no)


class NMPBackend(BaseBackend):
    binary_ext = "nmpbin"

    @staticmethod
    def supports_target(target: GPUTarget) -> bool:
        return target.backend == "nmp"

    def __init__(self, target: GPUTarget) -> None:
        super().__init__(target)
        self.binary_ext = "nmpbin"

    def hash(self) -> str:
        # the LLVM levels are environment knobs, not options: in the key, a changed level never reuses an object
        return (f"nmp-{VERSION}-{_source_hash()[:16]}-{self.target.arch}-{llvm_target.host_fingerprint()}"
                f"-{llvm_target.levels_key()}")

    def parse_options(self, opts: dict) -> Any:
        args = {k: opts[k] for k in NMPOptions.__dataclass_fields__ if k in opts and opts[k] is not None}
        for k in FOREIGN_OPTIONS:
            if args.get(k) is not None:
                _warn_foreign(k)
        args["arch"] = str(self.target.arch)
        args["warp_size"] = 1
        if "timing_variant" not in args:
            args["timing_variant"] = os.environ.get("TRITON_NMP_TIMING_VARIANT", "0") == "1"
        if "extern_libs" in args and isinstance(args["extern_libs"], dict):
            args["extern_libs"] = tuple(args["extern_libs"].items())
        for k in ("supported_fp8_dtypes", "deprecated_fp8_dot_operand_dtypes", "allowed_dot_input_precisions"):
            if k in args:
                args[k] = tuple(args[k])
        return NMPOptions(**args)

    def pack_metadata(self, metadata):
        return (metadata.num_warps, metadata.num_ctas, metadata.shared)

    def get_codegen_implementation(self, options):
        from .fp8_convert import convert_custom_types

        return {"min_dot_size": _min_dot_size, "convert_custom_types": convert_custom_types}

    def get_module_map(self) -> dict[str, ModuleType]:
        # `triton.language.extra.libdevice` resolves to CUDA's libdevice names (`__nv_*`), which the
        # nmp codegen implements (codegen_scalar), so portable kernels using libdevice run unchanged.
        from triton.language.extra.cuda import libdevice

        return {"triton.language.extra.libdevice": libdevice}

    def load_dialects(self, ctx) -> None:
        return None

    # -- stages ---------------------------------------------------------------------------------------
    @staticmethod
    def make_ttir(mod, metadata, options):
        llvm_target.prewarm()  # an LLVM worker starts while the front end runs
        _allow_inlining(mod)
        pm = ir.pass_manager(mod.context)
        pm.enable_debug()
        passes.common.add_inliner(pm)
        passes.ttir.add_rewrite_tensor_descriptor_to_pointer(pm)
        passes.common.add_canonicalizer(pm)
        passes.ttir.add_combine(pm)
        passes.ttir.add_reorder_broadcast(pm)
        passes.common.add_cse(pm)
        passes.common.add_symbol_dce(pm)
        passes.ttir.add_loop_unroll(pm)
        pm.run(mod, "make_ttir")
        return mod

    @staticmethod
    def make_nmpir(src, metadata, options) -> NMPIR:
        ctx = PassContext.from_options(options)
        nmp = compile_ttir(str(src), ctx)  # every pass, in order: backend/pipeline.py
        metadata["name"] = nmp.kernel.name
        metadata["nmp_num_stages"] = ctx.stages  # the multi-buffering depth that fits (<= num_stages)
        metadata["shared"] = ctx.plan.peak_bytes
        metadata["nmp_spm_bytes"] = ctx.plan.peak_bytes
        metadata["nmp_spill_bytes"] = ctx.spill.area_bytes if ctx.spill is not None else 0
        metadata["nmp_spilled"] = [t.describe() for t in ctx.spill.tiles] if ctx.spill is not None else []
        metadata["nmp_grid_pipeline"], metadata["nmp_grid_pipeline_reason"] = ctx.grid_pipeline
        # A grid-pipelined kernel keeps a second copy of its tiles in the upper half of the scratchpad while
        # the next program's loads and this one's stores are in flight: the PU uses both copies.
        metadata["nmp_spm_pu_bytes"] = ctx.plan.peak_bytes * (2 if ctx.grid_pipeline[0] else 1)
        register_kernel(metadata, nmp.kernel)  # its static footprint feeds placement
        return NMPIR(nmp, ctx.plan, ctx.spill)

    @staticmethod
    def make_llir(src: NMPIR, metadata, options) -> str:
        triple, data_layout = llvm_target.target_triple_and_layout()
        result = generate_llvm(src.module, triple, data_layout, src.plan, options.timing_variant)
        metadata["name"] = src.module.kernel.name
        metadata["nmp_entry"] = result.entry
        metadata["nmp_timing_entry"] = result.timing_entry
        metadata["nmp_timing_reason"] = result.timing_reason
        metadata["nmp_args"] = result.args
        metadata["nmp_sites"] = [s.__dict__ for s in result.sites]
        metadata["nmp_counters"] = list(result.counters)
        # The scratchpad is what the plan placed; codegen temporaries for scalars are registers on nmp.
        metadata["nmp_spm_bytes"] = src.plan.peak_bytes
        metadata["shared"] = src.plan.peak_bytes
        matrix = any(op.name in llvm_target.MATRIX_OPS for f in src.module.funcs for op in f.walk())
        metadata["nmp_codegen_level"] = level = llvm_target.codegen_level(matrix)
        return llvm_target.optimize(result.llvm_ir, src.module.kernel.name, level)

    @staticmethod
    def make_nmpbin(src: str, metadata, options) -> bytes:
        return llvm_target.emit_object(src, metadata.get("name", ""), metadata.get("nmp_codegen_level", 3))

    def add_stages(self, stages: dict, options: object, language: Language) -> None:
        if language != Language.TRITON:
            raise NMPCompilationError("only Triton kernels (not Gluon) can be compiled for nmp")
        stages["ttir"] = lambda src, metadata: self.make_ttir(src, metadata, options)
        stages["nmpir"] = lambda src, metadata: self.make_nmpir(src, metadata, options)
        stages["llir"] = lambda src, metadata: self.make_llir(src, metadata, options)
        stages["nmpbin"] = lambda src, metadata: self.make_nmpbin(src, metadata, options)

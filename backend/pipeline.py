"""The nmpir stage, pass by pass: TTIR text -> nmpir with a scratchpad plan.

`PASSES` lists every pass of the stage in the order it runs; nothing else assembles them. A pass is a
function `(module, ctx) -> module` from IR to IR. `run_passes` calls the nmpir verifier after every
pass that produces nmpir, so a broken invariant is reported at the pass that broke it. What a pass
needs from the compile options travels in the `PassContext` (the requested multi-buffering depth, and
the target spec named by the options' arch, never the active target), and what the last pass
produces (the plan, the depth that fits) comes back in it.

    split-pointer-selects      TTIR: an access through tl.where(flag, a_ptr, b_ptr) -> scf.if of two accesses
    ttir-to-nmpir              pointer + mask analysis: structured DMA, else gather/scatter; tile ops
    dead-code-elimination      drop the pointer/offset tiles that became DMA descriptor operands
    hoist-loop-invariants      pure ops of a loop body that read only values from outside move before it
    place-cheap-tiles          views next to their source, broadcasts/splats/constants cloned next to each
                               user: fused runs compute them per element, no tile is stored
    sink-address-computations  move a gather/scatter's address ops next to it (one fused run)
    legalize-scratchpad        multi-buffer loop loads, plan the scratchpad; when it does not fit: leaner
                               buffers (make-leaner), strip-mining, buffering less deeply, then spilling
                               tiles to the PU's bank (spill-tiles), else refuse (NMPScratchpadOverflowError)
    pipeline-grid              mark the DMAs of kernels whose next program's loads and posted stores may
                               overlap the current program (backend/grid_pipeline.py)

`EXTRA_PASSES` are the parts of legalization on their own, for tests of one pass on IR text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .grid_pipeline import mark_grid_pipeline
from .hoist import hoist_loop_invariants
from .ir import Module
from .legalize import legalize_with_stages
from .lower_nmpir import lower_to_nmpir
from .nmpir import eliminate_dead_code, make_leaner, place_cheap_tiles, sink_address_computations, verify
from .pointer_select import split_pointer_selects
from .scratchpad import ScratchpadPlan, buffer_align, mark_multibuffered_loads, plan_scratchpad
from .spill import spill_to_fit
from .stripmine import strip_mine
from .stripmine_rows import row_strip_mine
from .ttir_import import import_ttir


@dataclass
class PassContext:
    """What the passes read from the compile options, and what legalization produces."""

    spec: Any  # triton_nmp.target.TargetSpec: the machine compiled for
    num_stages: int = 2  # requested multi-buffering depth of loop loads
    plan: ScratchpadPlan | None = None  # set by legalize-scratchpad / plan-scratchpad
    stages: int = 0  # the multi-buffering depth that fits (<= num_stages), set by legalize-scratchpad
    chunk: int = 0  # strip-mine / strip-mine-rows only: the chunk length (elements / rows)
    spill: Any = None  # spill.SpillInfo when legalize-scratchpad spilled tiles to the bank, else None
    grid_pipeline: tuple[bool, str] = (False, "")  # set by pipeline-grid: (enabled, why)

    @classmethod
    def from_options(cls, options: Any) -> PassContext:
        return cls(options.target, options.num_stages)


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[Module, PassContext], Module]
    on_ttir: bool = False  # a TTIR-to-TTIR rewrite: the nmpir verifier does not apply


def _split_pointer_selects(mod: Module, ctx: PassContext) -> Module:
    for f in mod.funcs:
        split_pointer_selects(f)
    return mod


def _ttir_to_nmpir(mod: Module, ctx: PassContext) -> Module:
    return lower_to_nmpir(mod)


def _dead_code_elimination(mod: Module, ctx: PassContext) -> Module:
    eliminate_dead_code(mod)
    return mod


def _hoist_loop_invariants(mod: Module, ctx: PassContext) -> Module:
    hoist_loop_invariants(mod)
    return mod


def _place_cheap_tiles(mod: Module, ctx: PassContext) -> Module:
    place_cheap_tiles(mod)
    return mod


def _sink_address_computations(mod: Module, ctx: PassContext) -> Module:
    sink_address_computations(mod)
    return mod


def _legalize_scratchpad(mod: Module, ctx: PassContext) -> Module:
    ctx.plan, ctx.stages, ctx.spill = legalize_with_stages(mod, ctx.spec, ctx.num_stages)
    return mod


def _pipeline_grid(mod: Module, ctx: PassContext) -> Module:
    ctx.grid_pipeline = mark_grid_pipeline(mod.kernel, ctx.plan, ctx.spec, ctx.spill)
    return mod


def _make_leaner(mod: Module, ctx: PassContext) -> Module:
    make_leaner(mod.kernel)
    return mod


def _multi_buffer_loads(mod: Module, ctx: PassContext) -> Module:
    mark_multibuffered_loads(mod.kernel, ctx.num_stages)
    return mod


def _plan_scratchpad(mod: Module, ctx: PassContext) -> Module:
    ctx.plan = plan_scratchpad(mod.kernel, buffer_align(ctx.spec))
    return mod


def _spill_tiles(mod: Module, ctx: PassContext) -> Module:
    ctx.plan, ctx.spill = spill_to_fit(mod, ctx.spec, buffer_align(ctx.spec), ctx.spec.spm_bytes_per_program)
    return mod


def _strip_mine(mod: Module, ctx: PassContext) -> Module:
    strip_mine(mod.kernel, ctx.chunk)
    return mod


def _strip_mine_rows(mod: Module, ctx: PassContext) -> Module:
    row_strip_mine(mod.kernel, ctx.chunk)
    return mod


PASSES: tuple[Pass, ...] = (
    Pass("split-pointer-selects", _split_pointer_selects, on_ttir=True),
    Pass("ttir-to-nmpir", _ttir_to_nmpir),
    Pass("dead-code-elimination", _dead_code_elimination),
    Pass("hoist-loop-invariants", _hoist_loop_invariants),
    Pass("place-cheap-tiles", _place_cheap_tiles),
    Pass("sink-address-computations", _sink_address_computations),
    Pass("legalize-scratchpad", _legalize_scratchpad),
    Pass("pipeline-grid", _pipeline_grid),
)

EXTRA_PASSES: tuple[Pass, ...] = (
    Pass("make-leaner", _make_leaner),
    Pass("multi-buffer-loads", _multi_buffer_loads),
    Pass("plan-scratchpad", _plan_scratchpad),
    Pass("spill-tiles", _spill_tiles),
    Pass("strip-mine", _strip_mine),
    Pass("strip-mine-rows", _strip_mine_rows),
)

PASSES_BY_NAME: dict[str, Pass] = {p.name: p for p in PASSES + EXTRA_PASSES}


def run_passes(module: Module, ctx: PassContext, passes: Sequence[Pass] = PASSES) -> Module:
    """Run `passes` in order, verifying the nmpir after each."""
    for p in passes:
        module = p.run(module, ctx)
        if not p.on_ttir:
            verify(module, p.name)
    return module


def compile_ttir(ttir: str, ctx: PassContext) -> Module:
    """The nmpir stage: TTIR text -> legalized nmpir (the plan and depth are left in `ctx`)."""
    return run_passes(import_ttir(ttir), ctx)

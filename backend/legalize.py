"""Legalization: make a kernel's tiles fit the scratchpad, by a ladder of rungs tried in order.

1. The plan as it is (`scratchpad.plan_scratchpad`: liveness, buffer reuse, multi-buffered loads).
2. Leaner buffers (`nmpir.make_leaner`): reductions and iotas fused into the elementwise runs around
   them, so the tiles they would read or write are never stored.
3. Strip-mining, exact or not at all: a kernel of 1-D tiles in chunks of elements (`stripmine`), a
   row-parallel kernel in chunks of rows (`stripmine_rows`), halving the chunk until it fits.
4. Buffering loop loads less deeply (`num_stages` is a request), rungs 1-3 again at each depth.
5. Spilling (`spill`), single-buffered, from the variant of rungs 1-3 with the smallest peak: tiles
   live in a spill area in the PU's own bank and move by DMA; ops are staged in pieces where needed.

A kernel that fits at a rung is never changed by a later one, so kernels that fit as they are compile
exactly as they would without the ladder. Only when spilling cannot make it fit is it refused
(`NMPScratchpadOverflowError`, naming the tiles at the peak and why they cannot spill or split).
"""

from __future__ import annotations

import copy

from .nmpir import make_leaner, verify
from .scratchpad import ScratchpadPlan, buffer_align, mark_multibuffered_loads, plan_scratchpad
from .spill import spill_to_fit
from .stripmine import strip_mine
from .stripmine_rows import row_chunks, row_strip_mine


def legalize_with_stages(module, spec, num_stages: int) -> tuple[ScratchpadPlan, int, object]:
    """Multi-buffer loop loads `num_stages` deep and plan the scratchpad; when the rings do not fit,
    buffer less deeply (down to single buffering); when even that does not fit, spill.

    `num_stages` is a pipelining request, as on GPUs; a kernel that fits single-buffered is not
    rejected for asking more (portable code picks num_stages for a GPU's memory, e.g. the softmax
    tutorial's 4). Returns the plan, the depth used and what spilled (`spill.SpillInfo`, None when
    nothing did); raises NMPScratchpadOverflowError if even spilling does not make it fit."""
    depth = max(num_stages, 1)
    while True:
        marked = mark_multibuffered_loads(module.kernel, depth)
        plan, best = fit_without_spilling(module, spec)
        if plan is not None:
            return plan, depth if marked else min(depth, 1), None
        if not marked or depth <= 1:
            break
        depth -= 1
    # the last rung, single-buffered: spill tiles to the bank, starting from the variant that came closest
    module.funcs[:] = best.funcs
    plan, info = spill_to_fit(module, spec, buffer_align(spec), spec.spm_bytes_per_program)
    verify(module, "spilling")
    return plan, 1, info


def fit_without_spilling(module, spec) -> tuple[ScratchpadPlan | None, object]:
    """Plan the scratchpad; if the kernel does not fit, make its buffers leaner (`nmpir.make_leaner`), then
    strip-mine it where that is exact. Returns the plan when it fits (`module` rewritten to the variant
    that does) and None, plus the variant with the smallest peak (the module or a strip-mined copy) when
    it does not.

    Strip-mining halves the chunk until the plan fits the budget: first along the single dimension of
    a kernel of 1-D tiles (see `stripmine`), then along the rows of a row-parallel kernel (see
    `stripmine_rows`), down to one row."""
    func = module.kernel
    align = buffer_align(spec)
    plan = plan_scratchpad(func, align)
    budget = spec.spm_bytes_per_program
    if plan.peak_bytes <= budget:
        return plan, module
    lean = copy.deepcopy(module)
    if make_leaner(lean.kernel):  # fused reductions and iotas: tiles that are never stored
        lean_plan = plan_scratchpad(lean.kernel, align)
        if lean_plan.peak_bytes < plan.peak_bytes:
            module.funcs[:] = lean.funcs
            func, plan = module.kernel, lean_plan
    if plan.peak_bytes <= budget:
        return plan, module
    best, best_peak = module, plan.peak_bytes
    length = next((v.type.shape[0] for op in func.walk() for v in op.results if v.type.is_tensor), 0)
    for rewrite, smallest, n in ((strip_mine, 64, length), (row_strip_mine, 1, row_chunks(func))):
        chunk = n // 2
        while chunk >= smallest:
            trial = copy.deepcopy(module)
            if not rewrite(trial.kernel, chunk):
                break
            trial_plan = plan_scratchpad(trial.kernel, align)
            if trial_plan.peak_bytes <= budget:
                verify(trial, "strip-mining")
                module.funcs[:] = trial.funcs
                return trial_plan, module
            if trial_plan.peak_bytes < best_peak:
                verify(trial, "strip-mining")
                best, best_peak = trial, trial_plan.peak_bytes
            chunk //= 2
    return None, best

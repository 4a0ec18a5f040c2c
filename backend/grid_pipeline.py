"""Software pipeline across the grid loop: a PU's next program's leading loads and this program's stores
overlap this program's work.

A PU runs its programs one after the other. Without a pipeline every program starts by waiting for its
first DMA (descriptor setup plus transfer) and ends by waiting for its stores, with the PU's compute
idle; for a row kernel (softmax, layer norm) that fixed cost per row is a third of the time. The grid
loop the compiler emits can instead, while program i computes, have program i+1's leading loads in
flight (into a second copy of their tiles) and post program i's stores (from a second copy of the
stored tiles) without waiting for them. That is legal when

* the next program's addresses are known before it runs: no address, mask, loop bound or branch
  depends on loaded data (the `timing_only` criterion), so no gathers, scatters or atomics either
  (programs that synchronise through memory keep their order);
* the second copies fit: the program's scratchpad peak is at most half the scratchpad (the copies
  live in the upper half), and nothing was spilled.

This pass decides it once per kernel and marks every `nmp.dma_load`/`nmp.dma_store` with
`grid_pipelined`; codegen and the trace predictor turn the mark into `abi.FLAG_GRID_PIPELINED` on the
records, and the timing model (simulator/timing.py, item 5) charges the overlap. Results never change:
Triton gives programs of one launch no order, so prefetching a later program's inputs reads what it
would have read.
"""

from __future__ import annotations

from typing import Any

from .ir import Func
from .timing_only import timing_only_eligible

ATTR = "grid_pipelined"


def grid_pipeline_reason(func: Func, peak_bytes: int, spm_bytes: int, spilled: bool,
                         spec_threads: int = 1) -> tuple[bool, str]:
    """(enabled, why) for the kernel `func` with scratchpad peak `peak_bytes` per program."""
    if spec_threads > 1:
        return False, "not pipelined across programs: the PU's threads already overlap programs (item 8)"
    eligible, why = timing_only_eligible(func)
    if not eligible:
        return False, f"not pipelined across programs: {why}"
    if spilled:
        return False, "not pipelined across programs: tiles were spilled to the bank"
    if 2 * peak_bytes > spm_bytes:
        return False, (f"not pipelined across programs: a second copy of the tiles does not fit "
                       f"(peak {peak_bytes} B per program, scratchpad {spm_bytes} B)")
    return True, ("pipelined across programs: the next program's leading loads and this program's stores "
                  "overlap its work")


def mark_grid_pipeline(func: Func, plan: Any, spec: Any, spill: Any) -> tuple[bool, str]:
    """Mark the DMA ops of `func` when the grid pipeline applies; returns (enabled, why)."""
    peak = int(plan.peak_bytes) if plan is not None else 0
    on, why = grid_pipeline_reason(func, peak, int(spec.spm_bytes_per_program), spill is not None,
                                   int(spec.issue_threads))
    for op in func.walk():
        if op.name in ("nmp.dma_load", "nmp.dma_store"):
            if on:
                op.attrs[ATTR] = 1
            else:
                op.attrs.pop(ATTR, None)
    return on, why

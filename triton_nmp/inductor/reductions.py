"""Reduction decisions on nmp's terms: how far to split a reduction, and each reduction kernel's block sizes.

Inductor sizes both for a GPU (`InductorChoices.reduction_split_factor`: thousands of threads per SM, so a
decode step's softmax @ V over a 1024-position cache becomes 256 partial sums of 4 rows each, written and read
back as fp32; `triton_heuristics._reduction_configs`: XBLOCK 8 for an outer reduction, 16-byte DMA runs). On
nmp one program runs on one PU and streams its tiles from a DRAM bank by DMA, so:

* `split_factor`: split only as far as needed to give every PU a program, in chunks that stay long contiguous
  DMA runs, chosen by a small model of the target (waves of programs streaming their chunk from the banks,
  plus, when split, the second pass over the partials and its launch);
* `outer_block_config`: an outer reduction (reducing over rows of a row-major tile) gets XBLOCK = the
  contiguous row and an R0_BLOCK that keeps the tile within 4096 elements;
* `inner_block_config`: a persistent inner reduction (a layer norm) gets several rows per program, as many as
  keep every PU busy (where that is one row, Inductor's own config stays).

The split factor and the outer block sizes are opt-in (`split_enabled`, `TRITON_NMP_REDUCTION_SPLIT=1`): they make
a decode step's attention kernels about twice as fast, but the smaller partials change Inductor's buffer reuse
so that layer-norm outputs land in storages automatic placement replicated for a GEMV, and a store to a
replicated tensor writes every bank's copy (Llama decode +30% end to end; a placement issue). The block sizes
are fixed at compile time (Inductor's `FixedTritonConfig`, set by `NMPChoices`), so nothing is
autotuned for them at run time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from triton_nmp.target import TargetSpec

__all__ = ["SplitChoice", "split_factor", "outer_block_config", "inner_block_config", "split_enabled"]

OUTER_XBLOCK = 64  # columns of an outer reduction one program reduces: a 128-256 byte run per row
MIN_OUTER_XBLOCK = 16  # ... at least, when fewer columns spread the outputs over more PUs
MIN_OUTER_ROWS = 32  # rows per split chunk of an outer reduction (a chunk is one contiguous DMA of rows x XBLOCK)
MIN_INNER_RUN = 512  # elements per split chunk of an inner reduction (one contiguous run)
INNER_TILE_ELEMS = 8192  # elements of a persistent inner reduction's [XBLOCK, R0_BLOCK] tile (32 KiB in fp32)
ELEMENT_BYTES = 2  # the reduced tensor's element size is not known here: fp16/bf16, an LLM's activations
PARTIAL_BYTES = 4  # the first pass writes fp32 partials


def split_enabled() -> bool:
    """Whether nmp's split factor and outer block sizes replace Inductor's (`TRITON_NMP_REDUCTION_SPLIT=1`)."""
    return os.environ.get("TRITON_NMP_REDUCTION_SPLIT", "") == "1"


@dataclass(frozen=True)
class SplitChoice:
    split: int
    programs: int  # of the first pass
    cycles: float  # modelled: the first pass's waves plus, when split, the second pass and its launch


def split_factor(spec: TargetSpec, reduction_numel: int, numel: int, inner: bool) -> SplitChoice:
    """How many pieces to split a reduction of `reduction_numel` elements into, for each of `numel` outputs.

    The model streams the reduced tensor from the banks: a program costs a DMA setup plus its chunk at the bank
    bandwidth, programs run in waves over the PUs; a split adds the second pass (partials read remotely, spread
    over the PUs) and one more launch (a launch graph's dispatch, the cheapest). Splits are powers of two that
    divide the reduction and keep each chunk a long contiguous run."""
    x_programs = numel if inner else max(1, -(-numel // OUTER_XBLOCK))
    chunk_bytes_per_elem = ELEMENT_BYTES * (1 if inner else min(numel, OUTER_XBLOCK))
    min_chunk = MIN_INNER_RUN if inner else MIN_OUTER_ROWS
    launch = spec.launch_graph_dispatch_us * 1e3 * spec.clock_ghz

    def first_pass(split: int) -> tuple[int, float]:
        programs = x_programs * split
        waves = -(-programs // spec.num_pus)
        return programs, waves * (spec.dma_setup_cycles
                                  + reduction_numel // split * chunk_bytes_per_elem / spec.bank_bytes_per_cycle)

    programs, cycles = first_pass(1)
    best = SplitChoice(1, programs, cycles)
    s = 2
    while s <= reduction_numel and reduction_numel // s >= min_chunk:
        if reduction_numel % s == 0:
            programs, cycles = first_pass(s)
            partials = numel * s * PARTIAL_BYTES / spec.num_pus
            cycles += launch + spec.dma_setup_cycles + partials / spec.remote_read_bytes_per_cycle
            if cycles < best.cycles:
                best = SplitChoice(s, programs, cycles)
        s *= 2
    return best


def outer_block_config(num_pus: int, numel: int, reduction_numel: int, persistent: bool,
                       tile_elems: int = 4096) -> dict[str, int]:
    """XBLOCK/R0_BLOCK for an outer reduction: a full contiguous row, rows up to `tile_elems` per tile."""
    xblock = min(OUTER_XBLOCK, max(MIN_OUTER_XBLOCK, _pow2_ceil(-(-numel // num_pus))), _pow2_ceil(numel))
    if persistent:
        return {"XBLOCK": xblock}
    rblock = max(1, min(_pow2_ceil(reduction_numel), tile_elems // xblock))
    return {"XBLOCK": xblock, "R0_BLOCK": rblock}


def inner_block_config(num_pus: int, numel: int, reduction_numel: int,
                       tile_elems: int = INNER_TILE_ELEMS) -> dict[str, int]:
    """XBLOCK of a persistent inner reduction (each program reduces whole rows): as many rows per program as
    keep every PU busy and the tile within `tile_elems`, so a program's DMAs are runs of several rows (a
    prefill layer norm: 8 rows of 768 per program, 64 programs, instead of Inductor's 512 one-row programs)."""
    rblock = _pow2_ceil(reduction_numel)
    xblock = 1
    while xblock * 2 * rblock <= tile_elems and -(-numel // (xblock * 2)) >= num_pus:
        xblock *= 2
    return {"XBLOCK": xblock}


def _pow2_ceil(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p

"""Matmul template configs sized for an nmp target, pruned by its scratchpad and ranked by its machine model.

Inductor's mm/bmm Triton templates take BLOCK_M/N/K, GROUP_M and num_stages. Its CPU config list is sized
for triton-cpu (and its GPU lists for SMs with registers): on nmp a program runs on one PU, the A and B tiles
of every pipeline stage plus the accumulator and the output tile live in the PU's scratchpad, and the grid
should cover every PU. `candidates()` enumerates power-of-two tiles (a matmul of fewer than 16 rows, a decode
step's GEMV, gets BLOCK_M = its row count rounded up to a power of two, so the matrix unit does not multiply
padding rows and the grid splits N over every PU), drops those whose buffers do not fit the
scratchpad (the planner's accounting: `num_stages` copies of the A and B tiles, an fp32 accumulator, the output
tile), and `rank()` orders them by `estimate()`: per program the DMA of its A and B panels (setup per
descriptor; under the default "auto" placement a B panel only one program reads is in its bank, the other
panels are read at the mix of local and remote bandwidth of an interleaved tensor) overlapped with the matrix
unit's MACs at the dtype's rate (the first step's panels are not overlapped; a column-major B tile is also
transposed by the vector unit), times the waves of programs over the PUs (when two copies of the tiles fit, the
grid loop is pipelined: after a PU's first program only transfers and compute count), plus the launch
overhead.
Default mode compiles the top candidate only; max-autotune simulates the few `tuned()` picks from the ranking: the
best, then the next ones modelled within `TUNE_MARGIN` of it, at most `MAX_TUNED` (at least `MIN_TUNED`), skipping a
tile the model cannot tell from one already picked (the same tile with another `num_stages` > 1 and the same
estimate: it only deepens the buffering of a loop whose DMA the model already counts overlapped), and a single-stage
tile unless it is the model's pick (alone it can win by leaving room to pipeline the grid loop, but a prologue or
epilogue fused into the template afterwards takes that room and its K loop's DMA is then exposed: GPT-2's LM head
128x128x64x1 simulated 2.5% faster alone than the pick 128x128x32x2, 60% slower fused in the model). Every simulated
candidate costs a compile and a native run on the host (GPT-2's LM head: seconds each), and max-autotune used to
simulate 12% of the legal tiles (39 of 319 for each 512-row matmul): that was most of a cold compile's 345 s.
A simulated tile replaces the model's pick only when it is more than `SIMULATED_MARGIN` faster
(`prefer_simulated`): the template is simulated alone, before the prologue or epilogue that fuses into it (a layer
norm's per-K-step loads) and on fresh tensors laid out for that tile; smaller differences are within what those
change (GPT-2's LM head: 128x128x16 simulated 0.8% faster than the pick 128x128x32 alone, 4% slower fused).

A one-row matmul (a decode step's GEMV, `mm`/`addmm` with M == 1) also gets the tiles of our own one-row template
(`gemv.gemv_template`: program p of ceil(N / share) computes the `share` = ceil(N / num_pus) output columns from
p * share, in power-of-two blocks of `block_n` with a masked tail, so every PU streams an even, contiguous part of
the weight from its own bank). `gemv_candidates()` enumerates them (BLOCK_N up to 1024, BLOCK_K up to 4096: a
thin tile, so one block can hold a PU's whole share and long K steps pay fewer DMA setups) and `estimate_gemv()`
models them in `estimate()`'s terms (one wave; per column block a K loop of the activation's slice read from all
banks and the weight's tile from the PU's own bank under "auto" placement; masked columns move no bytes). Both
templates' tiles are ranked together and the one-row template is kept only where it is modelled faster (ties go
to the mm template). Measured (`benchmarks/llm_matmuls.py --tokens 1 --check-choice`: every legal tile of both
templates simulated alone): the model's pick is the best simulated tile for GPT-2's QKV and MLP-down and within
1.1% of it for the attention projection, always a one-row tile; on GPT-2 fp16 decode the projections are 64
programs for 64 PUs (QKV 7.8 -> 5.1 us, LM head 108 -> 84 us per launch; benchmarks/README.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from triton_nmp.target import TargetSpec

__all__ = ["Tile", "GemvTile", "candidates", "estimate", "estimate_gemv", "estimate_norm_gemv", "norm_gemv_tiles",
           "gemv_candidates", "gemv_share",
           "gemv_spm_bytes", "rank", "spm_bytes", "tuned", "prefer_simulated", "MAX_TUNED", "MIN_TUNED",
           "TUNE_MARGIN", "SIMULATED_MARGIN", "NORM_GEMV_MIN_BLOCK_K"]

BLOCKS_MN = (16, 32, 64, 128, 256)
BLOCKS_K = (16, 32, 64, 128, 256)
STAGES = (1, 2, 3)
# a one-row tile is thin: a program's whole share can be one block, and long K steps pay fewer DMA setups
GEMV_BLOCKS_N = (16, 32, 64, 128, 256, 512, 1024)
GEMV_BLOCKS_K = (32, 64, 128, 256, 512, 1024, 2048, 4096)
MAX_TUNED = 4  # max-autotune simulates at most this many candidates of a matmul ...
MIN_TUNED = 2  # ... at least this many (when legal) ...
TUNE_MARGIN = 0.15  # ... and beyond MIN_TUNED only those modelled within this fraction of the best
NORM_GEMV_MIN_BLOCK_K = 128  # a norm GEMV's one-block tiles need K steps at least this long (or one step)
SIMULATED_MARGIN = 0.02  # a simulated tile must beat the model's pick by this fraction to replace it


@dataclass(frozen=True, order=True)
class Tile:
    block_m: int
    block_n: int
    block_k: int
    num_stages: int
    group_m: int = 8


def spm_bytes(t: Tile, in_bytes: int, out_bytes: int) -> int:
    """Scratchpad bytes one program of the mm template needs with tile `t`."""
    a = t.block_m * t.block_k * in_bytes
    b = t.block_k * t.block_n * in_bytes
    acc = t.block_m * t.block_n * 4
    return (a + b) * t.num_stages + acc + t.block_m * t.block_n * out_bytes


def _pow2_at_least(x: int) -> int:
    return 1 << max(0, (max(1, x) - 1).bit_length())


def candidates(m: int, n: int, k: int, in_bytes: int, out_bytes: int, spec: TargetSpec) -> list[Tile]:
    """Legal tiles for an (m x k) @ (k x n) product: fit the scratchpad, no block far beyond its dimension;
    fewer than 16 rows take BLOCK_M = m rounded up to a power of two (GEMVs: 1)."""
    cap_m, cap_n, cap_k = (max(16, _pow2_at_least(x)) for x in (m, n, k))
    small_m = _pow2_at_least(m)
    blocks_m = (small_m,) if small_m < BLOCKS_MN[0] else BLOCKS_MN
    out = []
    for bm in blocks_m:
        if bm > cap_m:
            continue
        for bn in BLOCKS_MN:
            if bn > cap_n:
                continue
            for bk in BLOCKS_K:
                if bk > cap_k:
                    continue
                for stages in STAGES:
                    t = Tile(bm, bn, bk, stages)
                    if spm_bytes(t, in_bytes, out_bytes) <= spec.spm_bytes:
                        out.append(t)
    return out


def _mean_hops(spec: TargetSpec) -> float:
    """Mean XY distance between two uniformly drawn PUs of the mesh (a remote bank to the reader)."""
    return sum((d * d - 1) / (3 * d) for d in (spec.mesh_rows, spec.mesh_cols))


def _shared_bw(spec: TargetSpec) -> float:
    """Bytes per cycle of a read spread over all banks (mostly remote)."""
    remote = 1.0 - 1.0 / spec.num_pus
    return 1.0 / ((1.0 - remote) / spec.bank_bytes_per_cycle + remote / spec.remote_read_bytes_per_cycle)


def _panel_dma(nbytes: float, local: bool, spec: TargetSpec) -> tuple[float, float]:
    """(transfer, setup) cycles of one operand panel: 2-D strided descriptors split at the descriptor size cap,
    issued `dma_max_in_flight` at a time; `local`: in the reader's bank, else spread over all banks."""
    batches = math.ceil(math.ceil(nbytes / spec.dma_max_descriptor_bytes) / spec.dma_max_in_flight)
    hops = 0.0 if local else spec.noc_hop_cycles * _mean_hops(spec)
    return nbytes / (spec.bank_bytes_per_cycle if local else _shared_bw(spec)), batches * (spec.dma_setup_cycles + hops)


def _store(c_bytes: float, spec: TargetSpec) -> float:
    """Cycles of storing an output tile (charged at the spread-read bandwidth, as the mm template's model did)."""
    batches = math.ceil(math.ceil(c_bytes / spec.dma_max_descriptor_bytes) / spec.dma_max_in_flight)
    return c_bytes / _shared_bw(spec) + batches * spec.dma_setup_cycles


def _k_loop(k_steps: int, step_dma: float, step_compute: float, num_stages: int) -> float:
    """Cycles of a K loop: with more than one stage the first step's panels are loaded before any compute and
    the others overlap it."""
    if num_stages > 1:
        return step_dma + (k_steps - 1) * max(step_dma, step_compute) + step_compute
    return k_steps * (step_dma + step_compute)


def estimate(t: Tile, m: int, n: int, k: int, batch: int, in_bytes: int, out_bytes: int, dtype: str,
             spec: TargetSpec, b_columns: bool = False, auto_placement: bool = True) -> float:
    """Modelled seconds of the mm template with tile `t` (see the module docstring); `b_columns`: B is
    column-major (the weight of `x @ w.T`), its tiles are transposed in the scratchpad by the vector unit;
    `auto_placement`: tensors are laid out by the "auto" policy (the default), which puts B's column panels
    in the bank of the program that reads them when only one program does (a grid of one row of tiles: a
    decode GEMV; B is a weight, laid out by the matmuls that read it). A is an activation, laid out by the
    kernel that wrote it, and B panels several programs share are read from all banks as if interleaved."""
    grid_m, grid_n = math.ceil(m / t.block_m), math.ceil(n / t.block_n)
    programs = batch * grid_m * grid_n
    waves = math.ceil(programs / spec.num_pus)
    k_steps = math.ceil(k / t.block_k)
    b_local = auto_placement and grid_m == 1
    a_bytes = t.block_m * t.block_k * in_bytes
    b_bytes = t.block_k * t.block_n * in_bytes
    step_xfer, step_setup = _panel_dma(a_bytes, False, spec)
    b_xfer, b_setup = _panel_dma(b_bytes, b_local, spec)
    step_xfer += b_xfer
    step_setup += b_setup
    step_dma = step_xfer + step_setup
    bw = _shared_bw(spec)
    step_compute = t.block_m * t.block_n * t.block_k / spec.peak_macs_per_cycle(dtype)
    if b_columns:
        step_compute += math.ceil(t.block_k * t.block_n / spec.vector_fp32_lanes)
    overlap = _k_loop(k_steps, step_dma, step_compute, t.num_stages)
    c_bytes = t.block_m * t.block_n * out_bytes
    store = _store(c_bytes, spec)
    cycles = waves * (overlap + store)
    if waves > 1 and 2 * spm_bytes(t, in_bytes, out_bytes) <= spec.spm_bytes:
        # grid pipeline (backend/grid_pipeline.py: a second copy of the tiles fits): a PU's next program loads
        # while this one computes, so after the first program only transfers and compute count, not setups
        steady = max(k_steps * step_xfer + c_bytes / bw, k_steps * step_compute)
        cycles = overlap + store + (waves - 1) * steady
    return spec.cycles_to_seconds(cycles) + spec.launch_overhead_us * 1e-6


def rank(tiles: list[Tile], m: int, n: int, k: int, batch: int, in_bytes: int, out_bytes: int, dtype: str,
         spec: TargetSpec, b_columns: bool = False, auto_placement: bool = True) -> list[Tile]:
    """`tiles`, fastest first by `estimate` (ties: fewer stages, then smaller tiles)."""
    return sorted(tiles, key=lambda t: (estimate(t, m, n, k, batch, in_bytes, out_bytes, dtype, spec, b_columns,
                                                 auto_placement), t))


@dataclass(frozen=True, order=True)
class GemvTile:
    """A tile of the one-row template (`gemv.gemv_template`): each program's `share` output columns in blocks of
    `block_n`, over K in steps of `block_k`."""

    block_n: int
    block_k: int
    num_stages: int
    share: int


def gemv_share(n: int, spec: TargetSpec) -> int:
    """Output columns per program of the one-row template: an even split of `n` over the target's PUs."""
    return math.ceil(n / spec.num_pus)


def gemv_spm_bytes(t: GemvTile, in_bytes: int, out_bytes: int) -> int:
    """Scratchpad bytes one program of the one-row template needs with tile `t`."""
    return spm_bytes(Tile(1, t.block_n, t.block_k, t.num_stages), in_bytes, out_bytes)


def gemv_candidates(n: int, k: int, in_bytes: int, out_bytes: int, spec: TargetSpec) -> list[GemvTile]:
    """Legal tiles of the one-row template for a (1 x k) @ (k x n) product: BLOCK_N no wider than the share
    rounded up to a power of two, BLOCK_K no longer than k rounded up, buffers within the scratchpad."""
    cols = gemv_share(n, spec)
    cap_n, cap_k = (max(16, _pow2_at_least(x)) for x in (cols, k))
    return [t for bn in GEMV_BLOCKS_N if bn <= cap_n for bk in GEMV_BLOCKS_K if bk <= cap_k for stages in STAGES
            if gemv_spm_bytes(t := GemvTile(bn, bk, stages, cols), in_bytes, out_bytes) <= spec.spm_bytes]


def estimate_gemv(t: GemvTile, n: int, k: int, in_bytes: int, out_bytes: int, dtype: str, spec: TargetSpec,
                  auto_placement: bool = True) -> float:
    """Modelled seconds of the one-row template with tile `t`, in `estimate`'s terms: one wave of
    `ceil(n / share)` programs; the busiest runs `ceil(share / block_n)` column blocks, each a K loop (the
    activation's slice read from all banks, the weight's tile from the program's own bank under "auto"
    placement, whose footprint-aligned layout gives each program's contiguous rows to its PU; masked columns of
    the last block move no bytes but are multiplied) and a store of the block."""
    k_steps = math.ceil(k / t.block_k)
    step_compute = t.block_n * t.block_k / spec.peak_macs_per_cycle(dtype)  # no transposed tile (see gemv.py)
    a_xfer, a_setup = _panel_dma(t.block_k * in_bytes, False, spec)
    cols = min(t.share, n)
    cycles = 0.0
    for start in range(0, cols, t.block_n):
        valid = min(t.block_n, cols - start)
        b_xfer, b_setup = _panel_dma(t.block_k * valid * in_bytes, auto_placement, spec)
        cycles += _k_loop(k_steps, a_xfer + a_setup + b_xfer + b_setup, step_compute, t.num_stages)
        cycles += _store(valid * out_bytes, spec)
    return spec.cycles_to_seconds(cycles) + spec.launch_overhead_us * 1e-6


def norm_gemv_tiles(n: int, k: int, in_bytes: int, out_bytes: int, spec: TargetSpec) -> list[GemvTile]:
    """The norm GEMV's tiles (`gemv.norm_gemv_template`): one column block holding the program's whole share
    (BLOCK_N = the share rounded up to a power of two: one bias load, one epilogue and store, no store between
    two weight DMAs), multi-buffered K steps of the normalised row (BLOCK_K below k rounded up) or one step,
    within half the scratchpad with the row's buffers (so the compiler can pipeline the grid loop: its DMA
    queue overlaps the setups of loads issued together). None when the row does not fit or a block that wide
    leaves K steps shorter than `NORM_GEMV_MIN_BLOCK_K` (a wide share, the LM head's 786 columns: many short
    strided steps, each paying a setup; the caller keeps narrow column blocks over one K step there)."""
    share_pow2 = _pow2_at_least(gemv_share(n, spec))
    k_pow2 = _pow2_at_least(k)
    row = k_pow2 * (4 * 3 + in_bytes * 4)  # the fp32 row, its deviations, the scaled row and the inputs
    tiles = [t for t in gemv_candidates(n, k, in_bytes, out_bytes, spec)
             if t.block_n == max(16, share_pow2) and (t.num_stages == 2 or t.block_k == k_pow2)
             and t.block_k >= min(NORM_GEMV_MIN_BLOCK_K, k_pow2)
             and gemv_spm_bytes(t, in_bytes, out_bytes) + row <= spec.spm_bytes]
    half = [t for t in tiles if gemv_spm_bytes(t, in_bytes, out_bytes) + row <= spec.spm_bytes // 2]
    return half or tiles


def estimate_norm_gemv(t: GemvTile, n: int, k: int, in_bytes: int, out_bytes: int, dtype: str,
                       spec: TargetSpec, auto_placement: bool = True) -> float:
    """Modelled seconds of the norm GEMV with tile `t` (one column block, `norm_gemv_tiles`): the prologue (the
    row, the norm's weight and bias and the linear's bias loaded together: one setup; the statistics, about 8
    vector passes over the row, and with one K step the normalisation, 6 more), then the K loop: each step's
    weight tile (its setup is exposed: the next step's DMA is issued when the step before it starts computing)
    overlapped with the previous step's product and the step's normalisation of its slice (three slices taken
    by two passes over the row each, 6 passes over the slice), then the last product and the store."""
    k_pow2 = _pow2_at_least(k)
    cols = min(t.share, n)
    k_steps = math.ceil(k / t.block_k)
    lanes = spec.vector_fp32_lanes
    row_pass = math.ceil(k_pow2 / lanes)
    sliced = t.block_k < k_pow2
    prologue = spec.dma_setup_cycles + 3 * k * in_bytes / spec.bank_bytes_per_cycle + (8 if sliced else 14) * row_pass
    slice_passes = 6 * row_pass + 6 * math.ceil(t.block_k / lanes) if sliced else 0
    step_compute = t.block_n * t.block_k / spec.peak_macs_per_cycle(dtype) + slice_passes
    b_xfer, b_setup = _panel_dma(t.block_k * cols * in_bytes, auto_placement, spec)
    loop = _k_loop(k_steps, b_xfer + b_setup, step_compute, t.num_stages)
    return spec.cycles_to_seconds(prologue + loop + _store(cols * out_bytes, spec)) + spec.launch_overhead_us * 1e-6


def _stage_free(t: Tile | GemvTile) -> Tile | GemvTile:
    """`t` with its buffering depth folded: the tiles the model tells apart only by `num_stages` > 1."""
    return replace(t, num_stages=min(t.num_stages, 2))


def tuned(ranked: Sequence[tuple[float, Tile | GemvTile]]) -> list[int]:
    """Indices into `ranked` ((modelled seconds, tile), fastest first) of the candidates max-autotune simulates
    (see the module docstring)."""
    if not ranked:
        return []
    best = ranked[0][0]
    picked: list[int] = []
    seen: set[tuple[float, Tile | GemvTile]] = set()
    for i, (seconds, tile) in enumerate(ranked):
        if len(picked) >= MAX_TUNED or (len(picked) >= MIN_TUNED and seconds > best * (1 + TUNE_MARGIN)):
            break
        key = (seconds, _stage_free(tile))
        if key not in seen and (tile.num_stages > 1 or not picked):
            seen.add(key)
            picked.append(i)
    return picked


def prefer_simulated(pick_seconds: float, best_seconds: float) -> bool:
    """Whether the fastest simulated candidate (`best_seconds`) replaces the model's pick (`pick_seconds`)."""
    return best_seconds < pick_seconds * (1 - SIMULATED_MARGIN)

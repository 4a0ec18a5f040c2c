"""The software pipeline across the grid loop (backend/grid_pipeline.py, simulator/grid_stream.py): which
kernels get it, that results do not change, and what the timing model charges for it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from triton_nmp import examples as ex
from triton_nmp.abi import FLAG_GRID_PIPELINED, KIND_DMA_LOAD, KIND_DMA_STORE, TRACE_WORDS
from triton_nmp.backend.grid_pipeline import grid_pipeline_reason
from triton_nmp.footprint import kernel_func
from triton_nmp.placement import clear_placements, place
from triton_nmp.simulator import runtime as rt
from triton_nmp.simulator.timing import arg_buffers, simulate_timing
from triton_nmp.target import TargetSpec

SPEC = TargetSpec()  # nmp-64


@pytest.fixture
def launches():
    seen: list = []

    def listen(metadata, grid, result):
        seen.append((metadata, grid, result.trace))

    rt.add_launch_listener(listen)
    yield seen
    rt.remove_launch_listener(listen)
    clear_placements()


def _meta(metadata, key):
    return metadata[key] if isinstance(metadata, dict) else getattr(metadata, key)


@triton.jit
def _count_positive(x_ptr, total_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.atomic_add(total_ptr, tl.sum((x > 0).to(tl.int32), axis=0))


@triton.jit
def _gather_rows(idx_ptr, src_ptr, out_ptr, D: tl.constexpr):
    row = tl.load(idx_ptr + tl.program_id(0))
    cols = tl.arange(0, D)
    tl.store(out_ptr + tl.program_id(0) * D + cols, tl.load(src_ptr + row * D + cols))


def test_row_kernels_are_pipelined_and_compute_the_same(launches):
    x = torch.randn(300, 200)
    torch.testing.assert_close(ex.softmax(x), torch.softmax(x, dim=1))
    metadata, _, trace = launches[-1]
    assert _meta(metadata, "nmp_grid_pipeline") is True
    assert "pipelined across programs" in _meta(metadata, "nmp_grid_pipeline_reason")
    dma = trace[(trace[:, 0] == KIND_DMA_LOAD) | (trace[:, 0] == KIND_DMA_STORE)]
    assert dma.size and np.all(dma[:, 7] & FLAG_GRID_PIPELINED)


def test_the_profile_counts_both_copies_of_a_pipelined_kernels_tiles(launches):
    """The second copies live in the upper half of the scratchpad: a PU uses twice the plan's peak."""
    import triton_nmp

    x = torch.randn(300, 200)
    with triton_nmp.profile() as prof:
        ex.softmax(x)
    metadata, _, _ = launches[-1]
    peak = _meta(metadata, "nmp_spm_bytes")
    assert _meta(metadata, "nmp_grid_pipeline") is True and peak > 0
    assert _meta(metadata, "nmp_spm_pu_bytes") == 2 * peak
    assert prof.launches[-1].spm_peak_bytes == 2 * peak
    total = torch.zeros(1, dtype=torch.int32)
    with triton_nmp.profile() as prof:
        _count_positive[(4,)](torch.randn(4096), total, 4096, BLOCK=1024)
    metadata, _, _ = launches[-1]
    assert _meta(metadata, "nmp_grid_pipeline") is False
    assert prof.launches[-1].spm_peak_bytes == _meta(metadata, "nmp_spm_bytes") == _meta(metadata, "nmp_spm_pu_bytes")


def test_kernels_whose_programs_depend_on_memory_are_not_pipelined(launches):
    x = torch.randn(4096)
    total = torch.zeros(1, dtype=torch.int32)
    _count_positive[(4,)](x, total, 4096, BLOCK=1024)
    assert int(total) == int((x > 0).sum())
    metadata, _, trace = launches[-1]
    assert _meta(metadata, "nmp_grid_pipeline") is False
    assert "atomic" in _meta(metadata, "nmp_grid_pipeline_reason")
    assert not np.any(trace[:, 7] & FLAG_GRID_PIPELINED)

    idx = torch.tensor([3, 0, 2], dtype=torch.int32)
    src = torch.randn(4, 64)
    out = torch.empty(3, 64)
    _gather_rows[(3,)](idx, src, out, D=64)
    torch.testing.assert_close(out, src[idx.long()])
    metadata, _, _ = launches[-1]
    assert _meta(metadata, "nmp_grid_pipeline") is False
    assert "depends on loaded data" in _meta(metadata, "nmp_grid_pipeline_reason")


def test_pipeline_needs_room_for_a_second_copy_of_the_tiles(launches):
    ex.softmax(torch.randn(8, 64))
    metadata, _, _ = launches[-1]
    func = kernel_func(metadata)
    on, _ = grid_pipeline_reason(func, 131072, 262144, False)
    assert on
    on, why = grid_pipeline_reason(func, 131073, 262144, False)
    assert not on and "does not fit" in why and "131073" in why
    on, why = grid_pipeline_reason(func, 1024, 262144, True)
    assert not on and "spilled" in why
    on, why = grid_pipeline_reason(func, 1024, 262144, False, spec_threads=16)
    assert not on and "threads" in why


def _softmax_launch(launches, rows: int):
    x = torch.randn(rows, 1024)
    out = torch.empty_like(x)
    place(x, "interleaved", granularity=4096)  # row r in bank r mod 64: local under round robin
    place(out, "interleaved", granularity=4096)
    ex.softmax_kernel[(rows,)](out, x, 1024, 1024, 1024, BLOCK=1024, pu_mapping="round_robin")
    torch.testing.assert_close(out, torch.softmax(x, dim=1))
    metadata, grid, trace = launches[-1]
    return trace, grid, arg_buffers(metadata, {"out_ptr": out, "in_ptr": x})


def _unpipelined(trace: np.ndarray) -> np.ndarray:
    t = trace.copy()
    t[:, 7] &= ~FLAG_GRID_PIPELINED
    return t


def test_one_program_costs_what_it_costs_without_the_pipeline(launches):
    trace, grid, bufs = _softmax_launch(launches, 1)
    a = simulate_timing(trace, grid, bufs, SPEC, "round_robin")
    b = simulate_timing(_unpipelined(trace), grid, bufs, SPEC, "round_robin")
    assert a.cycles == pytest.approx(b.cycles)


def test_pipeline_overlaps_a_pus_programs_up_to_the_bank_bandwidth(launches):
    trace, grid, bufs = _softmax_launch(launches, 1024)  # 16 rows per PU
    piped = simulate_timing(trace, grid, bufs, SPEC, "round_robin")
    plain = simulate_timing(_unpipelined(trace), grid, bufs, SPEC, "round_robin")
    assert piped.bytes_remote == 0 and trace.shape[1] == TRACE_WORDS
    # per row: 4 KiB in and 4 KiB out at 16 B/cycle = 512 cycles; each setup (100) and the compute hidden
    # except at the stream's ends
    bank_bound = 1024 * 8192 / SPEC.num_pus / SPEC.bank_bytes_per_cycle
    assert bank_bound <= piped.device_cycles <= 1.05 * bank_bound
    assert plain.device_cycles > 1.5 * piped.device_cycles
    assert piped.seconds >= piped.roofline_seconds
    # the PU's programs back to back: each starts where the previous one ended
    order = np.argsort(piped.program_pu * 10**6 + np.arange(piped.num_programs), kind="stable")
    pu, start, end = piped.program_pu[order], piped.program_start[order], piped.program_end[order]
    same = pu[1:] == pu[:-1]
    assert np.allclose(start[1:][same], end[:-1][same])

"""The machine model against hardware (issue #17): scalar-core fields, the hardware table, calibration.

The UPMEM rows below are real hardware measurements (DPU kernel time, 16 tasklets, 350 MHz) of PrIM
workloads published by the uPIMulator authors in VIA-Research/uPIMulator,
tools/upmem_reg_model/data/input.xlsx; they are kept here as fixtures so the bundled CSV cannot drift.
Full-size validation is `benchmarks/validation.py`; these tests run the same workloads at 1/16 size.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from triton_nmp import prim
from triton_nmp.calibrate_target import CalibrationError, fit_target, split_rows
from triton_nmp.cli import main
from triton_nmp.errors import NMPTargetError
from triton_nmp.opclass import OP_ALU, OP_FLOAT_DIV, OP_FLOAT_SPECIAL, OP_INT_MUL, op_class
from triton_nmp.simulator.timing import simulate_timing
from triton_nmp.target import TargetSpec

SOURCE = "uPIMulator input.xlsx"
HARDWARE_ROWS = [  # workload, DPUs, elements (GEMV: rows of an m x 64 uint32 matrix), ms
    ("VA", 1, 2_097_152, 61.450), ("VA", 4, 8_388_608, 61.436),
    ("GEMV", 1, 8_192, 36.415), ("GEMV", 4, 32_768, 36.139),
    ("RED", 1, 2_097_152, 49.506), ("RED", 4, 8_388_608, 49.556),
    ("SCAN-SSA", 1, 1_048_576, 76.571),
    ("SCAN-RSS", 1, 1_048_576, 62.676), ("SCAN-RSS", 4, 4_194_304, 62.667),
]  # fmt: skip


def test_bundled_table_is_the_published_one():
    rows = prim.load_table()
    assert [(r.workload, r.dpus, r.elements, r.ms) for r in rows] == HARDWARE_ROWS
    assert all(r.source == SOURCE for r in rows)


@pytest.fixture(scope="module")
def upmem():
    return TargetSpec.load("upmem-like")


@pytest.fixture(scope="module")
def small_runs(upmem):
    """Every table row at 1/16 of its size (same work per program structure, 16x fewer blocks)."""
    return [(row, prim.run_workload(row.workload, row.dpus, row.elements // 16, upmem)) for row in prim.load_table()]


def test_upmem_like_meets_the_hardware_table_at_small_size(small_runs, upmem):
    errors = [run.seconds(upmem) * 1e3 / (row.ms / 16) - 1 for row, run in small_runs]
    assert np.mean(np.abs(errors)) <= 0.15
    assert max(abs(e) for e in errors) <= 0.35
    va = [e for (row, _), e in zip(small_runs, errors) if row.workload == "VA"]
    assert all(abs(e) < 0.1 for e in va)  # streaming is instruction-bound: ~10 cycles per element


def test_weak_scaling_is_flat(small_runs, upmem):
    for workload in ("VA", "RED"):
        per_dpu = {row.dpus: run.seconds(upmem) / (row.elements / row.dpus) for row, run in small_runs
                   if row.workload == workload}
        assert per_dpu[4] == pytest.approx(per_dpu[1], rel=0.02)


def test_retiming_is_deterministic_and_follows_the_fields(small_runs, upmem):
    row, run = small_runs[0]
    assert run.seconds(upmem) == run.seconds(upmem)
    slower = dataclasses.replace(upmem, issue_loop_cycles=upmem.issue_loop_cycles + 1)
    assert run.seconds(slower) > run.seconds(upmem)
    serial = dataclasses.replace(upmem, issue_dma_overlap=0.0)
    assert run.seconds(serial) > run.seconds(upmem)


def test_one_tasklet_is_much_slower_than_sixteen(upmem):
    """The revolver pipeline: one thread issues once every 11 cycles; >= 11 threads fill it."""
    one = dataclasses.replace(upmem, issue_threads=1)
    t16 = prim.run_workload("VA", 1, 16 * 256 * 4, upmem).seconds(upmem)
    t1 = prim.run_workload("VA", 1, 16 * 256 * 4, one).seconds(one)
    assert t1 > 5 * t16


def test_unknown_workload_and_bad_sizes_are_refused(upmem):
    with pytest.raises(prim.PrimError, match="unknown workload 'XX'"):
        prim.run_workload("XX", 1, 1024, upmem)
    with pytest.raises(prim.PrimError, match="do not split into 16 programs"):
        prim.run_workload("VA", 1, 1000, upmem)
    with pytest.raises(prim.PrimError, match="65 DPUs requested"):
        prim.run_workload("VA", 65, 1 << 20, upmem)


def test_table_errors_name_file_and_row(tmp_path):
    bad = tmp_path / "t.csv"
    bad.write_text("workload,dpus,elements,ms\nVA,1,1024,1.0\nVA,x,1024,1.0\n")
    with pytest.raises(prim.PrimError, match=r"t.csv' row 2"):
        prim.load_table(bad)
    bad.write_text("workload,dpus,elements,ms\nFFT,1,1024,1.0\n")
    with pytest.raises(prim.PrimError, match="expected a workload of VA"):
        prim.load_table(bad)
    toml = tmp_path / "t.toml"
    toml.write_text('[[row]]\nworkload = "RED"\ndpus = 1\nelements = 4096\nms = 0.1\n')
    assert prim.load_table(toml)[0].label == "RED 1 DPU 4,096"


# ------------------------------------------------------------------------------ calibration


def test_fit_stays_in_range_and_reports_held_out_rows(small_runs, upmem):
    rows = [dataclasses.replace(row, elements=row.elements // 16, ms=row.ms / 16) for row, _ in small_runs]
    runs = [run for _, run in small_runs]
    start = dataclasses.replace(upmem, issue_dma_overlap=0.1, ops_int_mul_cycles=25.0)
    fit_idx, test_idx = split_rows(rows, None)
    assert {rows[i].dpus for i in fit_idx} == {1} and {rows[i].dpus for i in test_idx} == {4}
    result = fit_target(start, rows, fit_idx, ["issue.dma_overlap", "ops.int_mul"], runs=runs)
    for _, value, lo, hi in result.fitted.values():
        assert lo <= value <= hi
    assert result.mae(result.fit_rows) < 0.1 and result.mae(result.test_rows) < 0.15
    assert "test rows" in result.table()


def test_calibration_errors(upmem, tmp_path):
    rows = prim.load_table()
    with pytest.raises(CalibrationError, match="declares no free fields"):
        fit_target(TargetSpec.load("nmp-64"), rows, [0])
    with pytest.raises(CalibrationError, match="ops.int_div: no range"):
        fit_target(upmem, rows, [0], ["ops.int_div"])
    with pytest.raises(CalibrationError, match=r"no row has \[2\] DPUs"):
        split_rows(rows, {2})


def test_calibrate_target_cli(tmp_path, capsys):
    table = tmp_path / "rows.csv"
    table.write_text("workload,dpus,elements,ms\nVA,1,65536,1.92\nVA,2,131072,1.92\n")
    out = tmp_path / "fitted.toml"
    assert main(["calibrate-target", "--table", str(table), "--params", "issue.dma_overlap", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "fitting on 1 of 2 rows" in text and "VA 2 DPUs 131,072" in text
    fitted = TargetSpec.load(str(out))
    assert 0.0 <= fitted.issue_dma_overlap <= 1.0 and fitted.fit_ranges
    assert main(["calibrate-target", "--target", "nmp-64", "--table", str(table)]) == 1
    assert "declares no free fields" in capsys.readouterr().err


# ---------------------------------------------------------------------------------- targets


def test_fit_ranges_are_validated():
    text = TargetSpec.load("upmem-like").to_toml()
    with pytest.raises(NMPTargetError, match=r"fit.ops.int_mul: the value 12.1 of ops.int_mul lies outside"):
        TargetSpec.from_toml(text.replace('"ops.int_mul" = [4.0, 29.0]', '"ops.int_mul" = [20.0, 29.0]'))
    with pytest.raises(NMPTargetError, match="fit.ops.nope: unknown field"):
        TargetSpec.from_toml(text + '"ops.nope" = [1, 2]\n')
    with pytest.raises(NMPTargetError, match=r"fit.issue.loop_cycles: is \[1\]; expected \[low, high\]"):
        TargetSpec.from_toml(text.replace('"issue.loop_cycles" = [2.0, 4.0]', '"issue.loop_cycles" = [1]'))


def test_optional_fields_may_be_omitted_and_keep_hashes():
    base = TargetSpec.load("nmp-64")
    explicit = base.to_toml()  # writes every optional field at its neutral value
    assert "[issue]" in explicit and TargetSpec.from_toml(explicit).hash() == base.hash()
    assert base.dma_store_setup_cycles == base.dma_setup_cycles == 100
    upmem = TargetSpec.load("upmem-like")
    assert (upmem.dma_setup_cycles, upmem.dma_store_setup_cycles) == (77, 61)
    assert upmem.spm_bytes_per_program == 65536 // 16 and base.spm_bytes_per_program == base.spm_bytes


def test_hbm_pim_like_matches_samsung_figures():
    s = TargetSpec.load("hbm-pim-like")
    assert s.num_pus == 128 and s.clock_ghz == 0.3
    assert s.peak_flops("fp16") == pytest.approx(1.2288e12)  # 128 PCUs x 16 lanes x 2 FLOP x 300 MHz
    assert s.remote_bytes_per_second == pytest.approx(307.2e9)  # external: 1024 pins x 2.4 Gb/s
    assert s.local_bytes_per_second == pytest.approx(4 * s.remote_bytes_per_second)  # "4x the bandwidth"
    assert s.dma_max_in_flight == 2  # one PCU serves two banks


# ------------------------------------------------------------------------------- timing model


def _rec(kind, prog, *words):
    return [kind, prog, *words] + [0] * (6 - len(words))


def test_op_classes():
    assert op_class("arith.muli", ["i32", "i32"]) == OP_INT_MUL
    assert op_class("arith.divf", ["f32", "f32"]) == OP_FLOAT_DIV
    assert op_class("math.exp", ["f32"]) == OP_FLOAT_SPECIAL
    assert op_class("arith.addi", ["i64", "i64"]) == OP_ALU


def test_neutral_fields_keep_the_vector_model():
    """On nmp-64 every class costs one lane group (64-bit: two), so classes and accesses change nothing."""
    spec = TargetSpec()
    plain = [_rec(5, 0, 1000, 0, 0), _rec(5, 0, 1000, 0, 7), _rec(1, 0, 0, 0, 1, 4096, 4096)]
    classed = [_rec(5, 0, 1000, 0, 0, OP_INT_MUL, 3), _rec(5, 0, 1000, 0, 7, OP_FLOAT_DIV, 2), plain[2]]
    a, b = simulate_timing(np.array(plain), 1, None, spec), simulate_timing(np.array(classed), 1, None, spec)
    assert a.cycles == b.cycles and a.compute_cycles == 32 + 64


def test_scalar_core_charges_classes_accesses_and_loops():
    spec = dataclasses.replace(TargetSpec(), vector_fp32_lanes=1, ops_int_mul_cycles=30.0, issue_spm_access_cycles=1.0,
                               issue_loop_cycles=3.0)
    t = simulate_timing(np.array([_rec(5, 0, 100, 0, 6, OP_INT_MUL, 3), _rec(5, 0, 100, 0, 6, OP_ALU, 0)]), 1, None,
                        spec)
    assert t.compute_cycles == 100 * (30 + 3 * 1 + 3) + 100 * 1  # the second op runs inside the first's loop


def test_threads_share_pipeline_and_dma_engine():
    spec = dataclasses.replace(TargetSpec(mesh_rows=1, mesh_cols=1), vector_fp32_lanes=1, issue_threads=4,
                               issue_thread_interval_cycles=2, issue_dma_overlap=0.5, dma_setup_cycles=0,
                               dma_store_setup_cycles=0)
    trace = []
    for p in range(4):  # each program: 64 B load (4 cycles at 16 B/cycle), 100 issue cycles of compute
        trace += [_rec(1, p, 0, p * 64, 1, 64, 64), _rec(5, p, 100, 0, 0)]
    t = simulate_timing(np.array(trace), 4, None, spec)
    issue, dma = 400, 16  # one group of 4 threads: pipeline full (4 >= interval 2), one DMA engine
    chain = 100 * 2 + 4  # one program alone: an instruction every 2 cycles
    assert t.device_cycles == pytest.approx(max(chain, issue + dma - 0.5 * min(issue, dma)))
    assert t.extra["threads"] == 4 and t.wave_cycles.size == 1


def test_store_direction_has_its_own_dma_law():
    spec = dataclasses.replace(TargetSpec(mesh_rows=1, mesh_cols=1), dma_store_setup_cycles=10,
                               dma_store_bytes_per_cycle=4.0)
    load = simulate_timing(np.array([_rec(1, 0, 0, 0, 1, 256, 256)]), 1, None, spec)
    store = simulate_timing(np.array([_rec(2, 0, 0, 0, 1, 256, 256)]), 1, None, spec)
    assert load.dma_cycles == 100 + 256 / 16 and store.dma_cycles == 10 + 256 / 4

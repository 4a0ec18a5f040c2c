"""Profiler and simulated device clock: real @triton.jit kernels on torch CPU tensors, timed by the model."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
import triton
import triton.language as tl

from tests.conftest import BLOCK, N
from triton_nmp.driver import device as dev
from triton_nmp.driver.device import CounterEstimate, clock
from triton_nmp.placement import place
from triton_nmp.profiler import LAUNCH_PID, LaunchRecord, Profile, profile
from triton_nmp.simulator import runtime
from triton_nmp.target import active_target, set_active_target

pytestmark = pytest.mark.usefixtures("fresh_clock_state")


@triton.jit
def vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor, block: int = BLOCK) -> None:
    vadd[(triton.cdiv(N, block),)](x, y, out, N, BLOCK=block)


def test_profile_records_vector_add(tensors) -> None:
    x, y, out = tensors
    with profile() as prof:
        launch(x, y, out)
    assert torch.equal(out, x + y)
    assert len(prof.launches) == 1
    rec = prof.launches[0]
    assert isinstance(rec, LaunchRecord)
    assert rec.kernel == "vadd" and rec.grid == (N // BLOCK, 1, 1)
    assert rec.bytes_local + rec.bytes_remote == 3 * N * 4  # two loads and one store of N fp32
    assert rec.counters["dma_load_bytes"] + rec.counters["dma_store_bytes"] == 3 * N * 4
    assert rec.flops == N
    assert rec.cycles > 0 and rec.sim_seconds > 0
    assert rec.sim_seconds == pytest.approx(active_target().cycles_to_seconds(rec.cycles), rel=1e-3)
    assert 0 < rec.roofline_seconds <= rec.sim_seconds
    assert rec.spm_peak_bytes > 0 and rec.host_seconds > 0
    assert rec.timing is not None and not rec.estimated and not rec.memo_hit
    # the clock also advanced by the host writes of x and y (first use: host data into the banks)
    assert [t.kind for t in prof.transfers] == ["host_write", "host_write"]
    assert prof.end_seconds - prof.start_seconds == pytest.approx(rec.sim_seconds + prof.transfer_seconds)
    assert rec.sim_start_seconds == pytest.approx(prof.start_seconds + prof.transfer_seconds)  # after the writes


def test_placement_reaches_the_timing_model(tensors) -> None:
    """A tensor placed in one bank is mostly remote to the PUs that read it, and slower."""
    x, y, out = tensors
    with profile() as prof:
        launch(x, y, out)
        place(x, bank=3)
        launch(x, y, out)
    fast, slow = prof.launches
    assert fast.bytes_remote < slow.bytes_remote
    assert slow.bytes_local + slow.bytes_remote == 3 * N * 4
    assert slow.sim_seconds > fast.sim_seconds


def test_only_launches_inside_the_context_are_recorded(tensors) -> None:
    x, y, out = tensors
    launch(x, y, out)  # still pending when the context opens: belongs to nobody's profile
    with profile() as prof:
        launch(x, y, out, block=512)
        launch(x, y, out, block=1024)
    launch(x, y, out)
    clock.flush()
    assert [r.grid[0] for r in prof.launches] == [N // 512, N // 1024]
    assert prof.launches[1].sim_start_seconds == pytest.approx(
        prof.launches[0].sim_start_seconds + prof.launches[0].sim_seconds
    )


def test_nested_profiles_both_record(tensors) -> None:
    x, y, out = tensors
    with profile() as outer:
        launch(x, y, out)
        with profile() as inner:
            launch(x, y, out)
    assert len(outer.launches) == 2 and len(inner.launches) == 1


def test_save_trace_writes_pu_tracks(tensors, tmp_path) -> None:
    x, y, out = tensors
    with profile() as prof:
        launch(x, y, out)
        launch(x, y, out, block=1024)
    path = tmp_path / "trace.json"
    prof.save_trace(path)
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    num_pus = active_target().num_pus
    spans = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("dma", "compute")]
    assert {e["cat"] for e in spans} == {"dma", "compute"}
    assert all(0 <= e["pid"] < num_pus for e in spans)
    assert len({e["pid"] for e in spans}) == N // BLOCK  # 16 programs, round robin: one PU each
    launches = [e for e in events if e.get("cat") == "launch"]
    assert [e["name"] for e in launches] == ["vadd", "vadd"]
    assert all(e["pid"] == LAUNCH_PID for e in launches)
    assert launches[0]["ts"] == 0 and launches[1]["ts"] == pytest.approx(launches[0]["dur"])
    end_first = launches[0]["dur"]
    first_spans = [e for e in spans if e["ts"] < end_first - 1e-9]
    assert first_spans and all(e["ts"] + e["dur"] <= end_first + 1e-6 for e in first_spans)
    names = [e for e in events if e.get("ph") == "M" and e["name"] == "process_name"]
    assert len(names) == len({(e["pid"], e["args"]["name"]) for e in names})  # no duplicated track names


def test_summary_and_roofline_plot(tensors, tmp_path) -> None:
    x, y, out = tensors
    with profile() as prof:
        launch(x, y, out)
    table = prof.summary()
    assert "vadd" in table and "16x1x1" in table and "%" in table and "SPM peak" in table
    assert str(prof) == table
    png = tmp_path / "roofline.png"
    prof.roofline_plot(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_empty_profile_is_harmless(tmp_path) -> None:
    with profile() as prof:
        pass
    assert prof.launches == [] and prof.sim_seconds == 0
    assert "total (0 launches)" in prof.summary()
    prof.save_trace(tmp_path / "t.json")
    prof.roofline_plot(tmp_path / "r.png")


def test_timing_is_lazy_and_bounded(tensors) -> None:
    x, y, out = tensors
    clock.flush()
    simulated = clock.stats.simulated
    launch(x, y, out)
    launch(x, y, out, block=512)
    assert clock.pending == 2 and clock.stats.simulated == simulated  # nothing computed yet
    t = clock.now()
    assert clock.pending == 0 and clock.stats.simulated == simulated + 2
    for _ in range(dev.MAX_PENDING_LAUNCHES + 5):
        launch(x, y, out)
    assert clock.pending <= dev.MAX_PENDING_LAUNCHES
    assert clock.now() > t


def test_identical_launches_are_simulated_once(tensors) -> None:
    x, y, out = tensors
    clock.flush()
    before = (clock.stats.simulated, clock.stats.memo_hits)
    with profile() as prof:
        for _ in range(10):
            launch(x, y, out)
    assert clock.stats.simulated - before[0] == 1 and clock.stats.memo_hits - before[1] == 9
    assert len({r.sim_seconds for r in prof.launches}) == 1
    assert [r.memo_hit for r in prof.launches] == [False] + [True] * 9


def test_launch_without_trace_is_estimated(tensors, monkeypatch) -> None:
    x, y, out = tensors
    monkeypatch.setattr(runtime, "tracing_enabled", False)
    with profile() as prof:
        launch(x, y, out)
    rec = prof.launches[0]
    assert rec.estimated and isinstance(rec.timing, CounterEstimate)
    spec = active_target()
    assert rec.sim_seconds >= spec.launch_overhead_us * 1e-6
    assert rec.bytes_local == 3 * N * 4 and rec.flops == N
    assert rec.roofline_seconds <= rec.sim_seconds
    assert "(est.)" in prof.summary()
    assert any(e.get("cat") == "estimate" for e in prof.trace_events())


def test_clock_is_monotonic_and_events_read_it(tensors) -> None:
    x, y, out = tensors
    di = dev.device_interface
    e0, e1 = di.Event(enable_timing=True), di.Event(enable_timing=True)
    e0.record()
    with profile() as prof:
        launch(x, y, out)
        launch(x, y, out, block=1024)
    e1.record()
    assert e0.elapsed_time(e1) == pytest.approx((prof.sim_seconds + prof.transfer_seconds) * 1e3, rel=1e-6)
    assert di.simulated_time() == clock.now() >= prof.end_seconds
    with pytest.raises(RuntimeError):
        e0.elapsed_time(di.Event())


def test_profile_dataclass_properties() -> None:
    rec = LaunchRecord("k", (1, 1, 1), 2000, 2e-6, 100, 28, 256, 0, 1e-6, 0.0, {}, None)
    assert rec.bytes_total == 128 and rec.arithmetic_intensity == 2.0
    assert math.isclose(rec.flops_per_second, 128e6) and math.isclose(rec.roofline_fraction, 0.5)
    assert Profile([rec]).sim_seconds == 2e-6


def test_fresh_outputs_reuse_the_memoised_timing(tensors) -> None:
    """Timing depends on where a buffer sits in its placed range, not on the host address."""
    x, y, _ = tensors
    clock.flush()
    simulated = clock.stats.simulated
    outs = [torch.empty(N) for _ in range(4)]
    with profile() as prof:
        for out in outs:
            launch(x, y, out)
    assert clock.stats.simulated == simulated + 1
    assert len({r.sim_seconds for r in prof.launches}) == 1


def test_timing_errors_name_the_launch_and_leave_the_clock_usable(tensors) -> None:
    x, y, out = tensors
    place(out, bank=63)
    small = dataclasses.replace(active_target(), name="nmp-16", mesh_rows=4, mesh_cols=4)
    old = set_active_target(small)
    try:
        launch(x, y, out)  # runs natively; the error appears when the launch is timed: no bank 63 on 16 PUs
        with pytest.raises(Exception, match="bank 63") as info:
            clock.flush()
    finally:
        set_active_target(old)
    assert any("vadd" in note for note in getattr(info.value, "__notes__", []))
    assert clock.pending == 0
    out2 = torch.empty(N)
    with profile() as prof:
        launch(x, y, out2)
    assert len(prof.launches) == 1


def test_a_kept_compiled_kernel_simulates_on_the_target_it_was_compiled_for(tensors) -> None:
    """The launcher takes the machine from the kernel's compile target, not from the active target: a
    compiled kernel kept across `set_active_target` runs A's code, so it is timed with A's numbers
    (through the @jit function the switch compiles the kernel again, for B)."""
    x, y, out = tensors
    grid = (triton.cdiv(N, BLOCK), 1, 1)
    a = active_target()
    compiled = vadd.warmup(x, y, out, N, BLOCK=BLOCK, grid=grid)
    with profile() as on_a:
        compiled[grid](x, y, out, N, BLOCK)
    slow = dataclasses.replace(a, name="nmp-64-slow", bank_bytes_per_cycle=4.0, dma_store_bytes_per_cycle=4.0)
    old = set_active_target(slow)
    try:
        with profile() as kept:
            compiled[grid](x, y, out, N, BLOCK)
        with profile() as recompiled:
            launch(x, y, out)
    finally:
        set_active_target(old)
    assert torch.equal(out, x + y)
    assert kept.launches[0].sim_seconds == on_a.launches[0].sim_seconds
    assert kept.launches[0].cycles == on_a.launches[0].cycles
    assert recompiled.launches[0].sim_seconds > on_a.launches[0].sim_seconds  # B moves bytes 4x slower

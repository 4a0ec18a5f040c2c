"""Automatic placement: tensors laid out by their first kernel's footprint, the auto mapping, and the
cost of moving data (host writes, re-layouts) on the simulated clock."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

import triton_nmp
from triton_nmp import auto_layout
from triton_nmp import examples as ex
from triton_nmp.placement import (
    NMPPlacementError,
    Placement,
    clear_placements,
    decisions,
    lookup,
    place,
    set_default_policy,
)
from triton_nmp.simulator import transfer
from triton_nmp.target import active_target


@pytest.fixture(autouse=True)
def _fresh_registry():
    clear_placements()
    old = set_default_policy("auto")
    yield
    set_default_policy(old)
    clear_placements()


def _run(fn):
    with triton_nmp.profile() as prof:
        out = fn()
    return prof, out


def test_vector_add_out_of_the_box_is_all_local_and_writes_only_its_inputs():
    n = 1 << 18
    x, y = torch.randn(n), torch.randn(n)
    prof, out = _run(lambda: ex.add(x, y, block=4096))
    assert torch.equal(out, x + y)
    rec = prof.launches[-1]
    assert rec.bytes_remote == 0 and rec.bytes_local == 3 * n * 4
    assert rec.mapping.startswith("auto")
    # x and y are host data the kernel reads: written into the banks first; out is only stored to
    assert [t.kind for t in prof.transfers] == ["host_write", "host_write"]
    assert all(t.nbytes == n * 4 for t in prof.transfers)
    pl = lookup(out.data_ptr(), n * 4)
    # tuning keys read the layout chosen (only a tensor still open reads as "auto")
    assert pl is not None and pl.chosen and pl.signature() == ("interleaved", None, 4096 * 4)
    assert any("footprint-aligned" in d.why for d in decisions())
    assert "transfers (data moved outside kernels): 2" in prof.summary()


def test_auto_is_faster_than_the_old_defaults_and_they_remain_available():
    n = 1 << 18
    x, y = torch.randn(n), torch.randn(n)
    auto = _run(lambda: ex.add(x, y, block=4096))[0].launches[-1]
    clear_placements()
    set_default_policy("interleaved")
    x2, y2 = torch.randn(n), torch.randn(n)
    out2 = torch.empty(n)
    prof, _ = _run(lambda: ex.add_kernel[(n // 4096,)](x2, y2, out2, n, BLOCK=4096, pu_mapping="round_robin"))
    old = prof.launches[-1]
    assert old.bytes_remote > 0.9 * (old.bytes_local + old.bytes_remote)  # 1 KiB interleaving, round robin
    assert auto.sim_seconds < 0.5 * old.sim_seconds
    assert lookup(x2.data_ptr(), n * 4).policy == "interleaved"


def test_auto_mapping_is_never_slower_than_round_robin():
    n = 1 << 16
    for policy in ("interleaved", "blocked"):
        x, y, out = (place(torch.randn(n), policy) for _ in range(3))
        times = {}
        for m in ("round_robin", "auto"):
            def go(m=m, x=x, y=y, out=out):
                return ex.add_kernel[(n // 512,)](x, y, out, n, BLOCK=512, pu_mapping=m)

            prof, _ = _run(go)
            times[m] = prof.launches[-1].sim_seconds
        assert times["auto"] <= times["round_robin"]
    assert times["auto"] < times["round_robin"]  # blocked data: owner computes wins


def test_layernorm_replicates_its_weights_and_reads_everything_locally():
    x = torch.randn(256, 1024)
    w, b = torch.randn(1024), torch.randn(1024)
    prof, (y, mean, rstd) = _run(lambda: ex.layernorm(x, w, b, block=1024))
    ref = ex.layernorm_ref(x, w, b)
    assert torch.allclose(y, ref[0], atol=1e-4)
    assert lookup(w.data_ptr(), 4096).policy == "replicated"
    assert prof.launches[-1].bytes_remote < 0.01 * prof.launches[-1].bytes_local
    rep = [t for t in prof.transfers if t.dst == "replicated"]
    assert len(rep) == 2 and all(t.nbytes == 4096 for t in rep)


@triton.jit
def _row_gather_kernel(x_ptr, idx_ptr, out_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    row = tl.load(idx_ptr + pid)  # which row this program copies: loaded data
    cols = tl.arange(0, BLOCK)
    tl.store(out_ptr + pid * BLOCK + cols, tl.load(x_ptr + row * BLOCK + cols))


def test_data_dependent_footprint_falls_back_to_round_robin_and_says_why():
    x = torch.randn(64, 256)
    idx = torch.randint(0, 64, (32,), dtype=torch.int32)
    out = torch.empty(32, 256)
    prof, _ = _run(lambda: _row_gather_kernel[(32,)](x, idx, out, BLOCK=256))
    assert torch.equal(out, x[idx.long()])
    rec = prof.launches[-1]
    assert rec.mapping == "round_robin" and "not static" in rec.note
    assert "not static" in prof.summary()
    pl = lookup(x.data_ptr(), x.numel() * 4)
    assert pl.policy == "interleaved" and pl.chosen


def test_a_tensor_first_read_by_gathers_takes_the_layout_of_its_first_static_kernel():
    # an embedding table: gathered first (no static footprint), then streamed by a kernel that could read it
    # locally (an LM head's GEMV); the fallback layout is provisional, the static launch re-lays it out once
    n = 64 * 256
    x, y = torch.randn(n), torch.randn(n)
    idx = torch.randint(0, 64, (32,), dtype=torch.int32)
    _run(lambda: _row_gather_kernel[(32,)](x.view(64, 256), idx, torch.empty(32, 256), BLOCK=256))
    assert lookup(x.data_ptr(), n * 4).provisional
    prof, out = _run(lambda: ex.add(x, y, block=1024))
    assert torch.equal(out, x + y)
    assert prof.launches[-1].bytes_remote == 0
    pl = lookup(x.data_ptr(), n * 4)
    assert not pl.provisional and pl.chosen
    assert [t.kind for t in prof.transfers if t.nbytes == n * 4].count("relayout") == 1
    prof, _ = _run(lambda: _row_gather_kernel[(32,)](x.view(64, 256), idx, torch.empty(32, 256), BLOCK=256))
    assert lookup(x.data_ptr(), n * 4) == pl and not [t for t in prof.transfers if t.nbytes == n * 4]
    prof, _ = _run(lambda: ex.add(x, y, block=1024))
    assert not prof.transfers  # settled: a repeat moves nothing


@triton.jit
def _copy_rows_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    tl.store(out_ptr + pid * BLOCK + cols, tl.load(x_ptr + pid * BLOCK + cols))


def test_a_launch_touching_few_bytes_of_a_tensor_lays_it_out_provisionally():
    # an embedding lookup of 2 rows of a 64-row table, then a kernel streaming the whole table (an LM head)
    x = torch.randn(64, 256)
    prof, out = _run(lambda: _copy_rows_kernel[(2,)](x, torch.empty(2, 256), BLOCK=256))
    first = lookup(x.data_ptr(), x.numel() * 4)
    assert first.provisional and "provisional" in decisions()[-2].why + decisions()[-1].why
    out = torch.empty(32, 512)
    prof, _ = _run(lambda: _copy_rows_kernel[(32,)](x, out, BLOCK=512))  # two rows per program
    assert torch.equal(out.view(64, 256), x)
    settled = lookup(x.data_ptr(), x.numel() * 4)
    assert not settled.provisional and prof.launches[-1].bytes_remote == 0
    assert settled.granularity == 2048 != first.granularity
    assert [t.kind for t in prof.transfers if t.nbytes == x.numel() * 4] == ["relayout"]
    _run(lambda: _copy_rows_kernel[(2,)](x, torch.empty(2, 256), BLOCK=256))
    assert lookup(x.data_ptr(), x.numel() * 4) == settled  # settled: a sparse launch does not move it again


@triton.jit
def _matvec_rows_kernel(v_ptr, w_ptr, out_ptr, N: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, N)
    tl.store(out_ptr + pid, tl.sum(tl.load(v_ptr + cols) * tl.load(w_ptr + pid * N + cols)))


def test_a_small_written_vector_is_spread_over_every_bank_for_the_kernels_that_read_it():
    # a one-program kernel writes a 2 KiB vector (a decode step's activation), then 128 programs each read all of
    # it (a GEMV's programs): spread over the 64 banks, no bank serves more than its share to the readers
    n, rows = 512, 128
    spec = active_target()
    a = torch.randn(n)
    v = ex.add(a, torch.randn(n), block=n)
    pl = lookup(v.data_ptr(), n * 4)
    assert pl.policy == "blocked" and n * 4 <= auto_layout.SPREAD_BYTES_PER_BANK * spec.num_pus
    assert any("spread over every bank" in d.why for d in decisions())
    w = torch.randn(rows, n)
    out = torch.empty(rows)
    prof, _ = _run(lambda: _matvec_rows_kernel[(rows,)](v, w, out, N=n))
    torch.testing.assert_close(out, w @ v, rtol=1e-4, atol=1e-4)
    spread = prof.launches[-1].timing
    # per bank: each reader's share of the vector (2 KiB / 64 banks), W's share, a few bytes of out
    assert spread.bank_bytes.max() <= rows * (n * 4 // spec.num_pus) + w.numel() * 4 / spec.num_pus + 256
    # the same vector in the default interleaving (two 1 KiB chunks): two banks serve all 128 readers
    v2 = v.clone()
    place(v2, "interleaved")
    prof, _ = _run(lambda: _matvec_rows_kernel[(rows,)](v2, w, out, N=n))
    hot = prof.launches[-1].timing
    assert hot.bank_bytes.max() >= rows * 1024 and hot.device_cycles > spread.device_cycles
    # a tiny tensor the launch only reads is replicated (below)
    assert lookup(a.data_ptr(), n * 4).policy == "replicated"


def test_a_tiny_read_only_tensor_is_replicated_so_every_reader_reads_it_locally():
    # a decode step's layer norm: one program reads a weight of a few KiB; the next one-program kernel
    # that reads it may run on another PU, and reads it locally too
    n = 512
    w, b = torch.randn(n), torch.randn(n)
    prof, out = _run(lambda: ex.add(w, b, block=n))
    torch.testing.assert_close(out, w + b)
    for t in (w, b):
        pl = lookup(t.data_ptr(), n * 4)
        assert pl.policy == "replicated" and pl.chosen
    why = [d.why for d in decisions() if d.layout == "replicated"]
    assert len(why) == 2 and all(f"read-only and tiny ({n * 4} B <= {auto_layout.REPLICATE_TINY_BYTES})" in w
                                 for w in why)
    # reads local, only the output's stores (spread over every bank) cross the mesh
    launch = prof.launches[-1]
    assert launch.bytes_local >= 2 * n * 4 and launch.bytes_remote <= n * 4
    # twice the limit: not tiny, laid out by its footprint
    big = torch.randn(auto_layout.REPLICATE_TINY_BYTES // 4 * 2)
    ex.add(big, big.clone(), block=big.numel())
    assert lookup(big.data_ptr(), big.numel() * 4).policy != "replicated"


def test_relayout_is_charged_over_the_mesh_and_a_repeat_is_free():
    n = 1 << 16
    x = torch.randn(n)
    with triton_nmp.profile() as prof:
        place(x, "interleaved")
        place(x, "blocked")
        place(x, "blocked")  # already so: nothing moves
        place(torch.empty(n), "blocked", copy=False)  # an output buffer: nothing to write
    kinds = [t.kind for t in prof.transfers]
    assert kinds == ["host_write", "relayout"]
    hw, rl = prof.transfers
    assert rl.noc_bytes > 0.9 * n * 4 and rl.src.startswith("interleaved") and rl.dst == "blocked"
    assert prof.end_seconds - prof.start_seconds == pytest.approx(hw.sim_seconds + rl.sim_seconds)
    events = prof.trace_events()
    assert any(e.get("cat") == "transfer" for e in events)


def test_transfer_formulas():
    spec = active_target()
    n = 1 << 20
    pl = Placement("blocked", None, None, n, 0)
    hw = transfer.host_write(pl, n, spec)
    link = n / (spec.host_write_gb_per_s / spec.clock_ghz)
    assert hw.cycles == pytest.approx(spec.dma_setup_cycles + link)
    rep = transfer.host_write(Placement("replicated", None, None, 4096, 0), 4096, spec)
    assert rep.bank_bytes.sum() == 4096 * spec.num_pus
    same = transfer.relayout(pl, 0, pl, n, spec)
    assert same.noc_bytes == 0
    moved = transfer.relayout(Placement("interleaved", None, 1024, n, 0), 0, pl, n, spec)
    assert moved.noc_bytes > 0.9 * n and moved.seconds > same.seconds


def test_bad_default_policy_is_refused_with_the_choices():
    with pytest.raises(NMPPlacementError, match="choose one of auto, interleaved, blocked, replicated"):
        set_default_policy("striped")


def test_place_auto_defers_to_the_first_kernel_even_under_another_default():
    set_default_policy("interleaved")
    n = 1 << 16
    x, y = place(torch.randn(n), "auto"), place(torch.randn(n), "auto")
    assert lookup(x.data_ptr(), n * 4).policy == "auto"
    prof, out = _run(lambda: ex.add(x, y, block=1024))
    assert lookup(x.data_ptr(), n * 4).chosen
    assert [t.kind for t in prof.transfers] == ["host_write", "host_write"]

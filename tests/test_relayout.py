"""Re-layout when it pays (`triton_nmp.relayout`): a tensor the auto policy laid out for one kernel moves
to the layout a later kernel reads it faster in, once that kernel's accrued loss covers the move."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

import triton_nmp
from triton_nmp import relayout
from triton_nmp.driver.benchmarker import do_bench
from triton_nmp.placement import clear_placements, decisions, lookup, place, set_default_policy


@pytest.fixture(autouse=True)
def _fresh_registry():
    clear_placements()
    relayout.ledger.clear()
    relayout.outputs.clear()
    relayout.laid_out.clear()
    relayout.provisional_sites.clear()
    old = set_default_policy("auto")
    yield
    set_default_policy(old)
    clear_placements()
    relayout.ledger.clear()
    relayout.outputs.clear()
    relayout.laid_out.clear()
    relayout.provisional_sites.clear()


@triton.jit
def _copy_blocks_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))


ROWS, COLS = 512, 256  # 512 KiB of fp32


def _rowwise(x):
    """The first consumer: a program per 1 KiB row (the auto policy gives x 1 KiB chunks)."""
    out = torch.empty_like(x)
    _copy_blocks_kernel[(ROWS,)](x, out, BLOCK=COLS)
    return out


def _blockwise(x):
    """The later consumer: a program per 8 KiB (8 rows): in 1 KiB chunks each program reads 7/8 remotely."""
    out = torch.empty_like(x)
    _copy_blocks_kernel[(ROWS // 8,)](x, out, BLOCK=8 * COLS)
    return out


def _moves():
    return [d for d in decisions() if "re-laid out, it pays" in d.why]


def test_a_later_kernel_moves_a_tensor_once_its_accrued_loss_covers_the_move():
    x = torch.randn(ROWS, COLS)
    _rowwise(x)
    first = lookup(x.data_ptr(), x.numel() * 4)
    assert first.chosen and first.granularity == COLS * 4
    times, relayouts = [], []
    for _ in range(8):
        with triton_nmp.profile() as prof:
            out = _blockwise(x)
        assert torch.equal(out, x)  # moving data never changes results
        times.append(prof.launches[-1].sim_seconds)
        relayouts.append([t for t in prof.transfers if t.kind == "relayout" and t.nbytes == x.numel() * 4])
    moved_at = next(k for k, r in enumerate(relayouts) if r)
    assert sum(len(r) for r in relayouts) == 1  # moved once, then settled
    assert moved_at >= 1  # not at the first sight of a gain: the loss accrues first
    after = lookup(x.data_ptr(), x.numel() * 4)
    assert after.chosen and after.layout_signature() != first.layout_signature()
    assert times[-1] < 0.8 * times[0]  # the layout the kernel reads fast in
    (move_decision,) = _moves()
    why = move_decision.why
    assert move_decision.tensor.startswith("_copy_blocks_kernel.x_ptr") and move_decision.transfer == "relayout"
    assert f"{moved_at + 1} launch(es)" in why and "the move costs" in why
    # ski rental: the tensor moves at the launch whose gain makes the accrued loss cover the move
    move = relayouts[moved_at][0].sim_seconds
    gain = times[0] - times[-1]
    lost_before = sum(times[k] - times[-1] for k in range(moved_at))
    assert lost_before < move <= lost_before + gain


def test_the_first_consumer_moves_it_back_only_when_it_pays():
    x = torch.randn(ROWS, COLS)
    _rowwise(x)
    for _ in range(8):
        _blockwise(x)
    moved = lookup(x.data_ptr(), x.numel() * 4)
    _rowwise(x)  # one launch of the first consumer does not pay for a move back
    assert lookup(x.data_ptr(), x.numel() * 4).layout_signature() == moved.layout_signature()


def test_layouts_the_user_asked_for_never_move():
    x = torch.randn(ROWS, COLS)
    place(x, "interleaved")
    for _ in range(8):
        _blockwise(x)
    pl = lookup(x.data_ptr(), x.numel() * 4)
    assert not pl.chosen and pl.granularity == 1024
    assert not any("re-laid out, it pays" in d.why for d in decisions())


def test_benchmark_loops_accrue_nothing_and_the_rule_can_be_turned_off(monkeypatch):
    x = torch.randn(ROWS, COLS)
    _rowwise(x)
    first = lookup(x.data_ptr(), x.numel() * 4)
    do_bench(lambda: [_blockwise(x) for _ in range(8)])
    assert lookup(x.data_ptr(), x.numel() * 4).layout_signature() == first.layout_signature()
    assert not relayout.ledger.pending()
    monkeypatch.setenv("TRITON_NMP_RELAYOUT", "0")
    for _ in range(8):
        _blockwise(x)
    assert lookup(x.data_ptr(), x.numel() * 4).layout_signature() == first.layout_signature()


def test_a_written_tensor_is_not_moved_by_its_writer():
    x = torch.randn(ROWS, COLS)
    _rowwise(x)
    for _ in range(8):  # the kernel writes x: it is not a read-only candidate
        _copy_blocks_kernel[(ROWS // 8,)](x.clone(), x, BLOCK=8 * COLS)
    assert not any("re-laid out, it pays" in d.why for d in decisions())


def test_an_activation_is_never_moved():
    # a step: a writer writes a fresh output whole, a reader reads it 8 times in a layout it would read faster:
    # moving it for one reader could cost its other readers, and the next step writes a new one
    x = torch.randn(ROWS, COLS)
    for _ in range(3):
        with triton_nmp.profile() as prof:
            y = _rowwise(x)
            for _ in range(8):
                assert torch.equal(_blockwise(y), x)
        assert not any(t.kind == "relayout" for t in prof.transfers)
        assert lookup(y.data_ptr(), y.numel() * 4).layout_signature() == ("interleaved", None, COLS * 4)
        del y
    assert not any("re-laid out, it pays" in d.why for d in decisions())


@triton.jit
def _read_blocks_update_heads_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    # reads its block of x and writes back the block's first 16 elements: an in-place update of a few
    # bytes of a tensor read whole (a decode step's KV cache)
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))
    head = pid * BLOCK + tl.arange(0, 16)
    tl.store(x_ptr + head, tl.load(x_ptr + head) * 2.0)


def test_a_tensor_updated_in_place_in_a_few_bytes_moves_like_a_read_only_one():
    x = torch.randn(ROWS, COLS)
    expect = x.clone()
    _rowwise(x)
    first = lookup(x.data_ptr(), x.numel() * 4)
    for _ in range(8):
        out = torch.empty_like(x)
        _read_blocks_update_heads_kernel[(ROWS // 8,)](x, out, BLOCK=8 * COLS)
        heads = expect.view(ROWS // 8, -1)[:, :16]
        heads *= 2.0
    assert torch.equal(x, expect)  # moving data never changes results
    assert lookup(x.data_ptr(), x.numel() * 4).layout_signature() != first.layout_signature()
    assert sum("re-laid out, it pays" in d.why for d in decisions()) == 1


def _scenario() -> int:
    """A process's first sight of the case: laid out row-wise, then read block-wise until it moves; returns
    the launch at which it moved."""
    from tests.process_state import forget_launch_memos

    forget_launch_memos(_copy_blocks_kernel)
    clear_placements()
    relayout.ledger.clear()
    x = torch.randn(ROWS, COLS)
    _rowwise(x)
    for k in range(8):
        with triton_nmp.profile() as prof:
            _blockwise(x)
        if any(t.kind == "relayout" for t in prof.transfers):
            return k
    raise AssertionError("never moved")


def test_a_warm_process_reads_its_offers_from_disk_and_a_bad_file_is_priced_again(tmp_path, monkeypatch):
    from triton import knobs

    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / "triton"))
    _copy_blocks_kernel.device_caches.clear()
    cold = _scenario()
    files = sorted((tmp_path / "triton").rglob("_copy_blocks_kernel.relayouts-*"))
    (path,) = [f for f in files if '"arg"' in f.read_text()]  # the block-wise launch's offer
    good = path.read_bytes()

    def no_pricing(*args):
        raise AssertionError("cached offers must not run the timing model again")

    with monkeypatch.context() as m:
        m.setattr(relayout, "make_offers", no_pricing)
        assert _scenario() == cold
    path.write_text('{"key": "')
    with pytest.warns(UserWarning, match=r"ignoring the unreadable re-layout cache file .*_copy_blocks_kernel\."
                                         r"relayouts-.*pricing the launch's re-layouts again"):
        assert _scenario() == cold
    assert path.read_bytes() == good


def test_a_benchmark_loop_decides_no_layout():
    # a tuner launching a candidate (here: the row-wise kernel) on a fresh tensor must not decide its layout:
    # a warm process reads the tuning cache and never runs that candidate
    x = torch.randn(ROWS, COLS)
    do_bench(lambda: _rowwise(x))
    assert lookup(x.data_ptr(), x.numel() * 4) is None  # still host data
    _blockwise(x)
    fresh = torch.randn(ROWS, COLS)
    _blockwise(fresh)
    assert lookup(x.data_ptr(), x.numel() * 4).layout_signature() == \
        lookup(fresh.data_ptr(), fresh.numel() * 4).layout_signature()


@triton.jit
def _scale_rows_kernel(v_ptr, out_ptr, N: tl.constexpr):
    """Every program reads the whole vector (the auto policy replicates it, as for a GEMV's input)."""
    pid = tl.program_id(0)
    offs = tl.arange(0, N)
    tl.store(out_ptr + pid * N + offs, tl.load(v_ptr + offs) * pid)


@triton.jit
def _write_kernel(x_ptr, v_ptr, N: tl.constexpr, STORED: tl.constexpr, READS_V: tl.constexpr):
    """One program writes the first STORED elements of v (from x, plus v itself when READS_V)."""
    offs = tl.arange(0, N)
    mask = offs < STORED
    y = tl.load(x_ptr + offs)
    if READS_V:
        y += tl.load(v_ptr + offs)
    tl.store(v_ptr + offs, y, mask=mask)


VEC = 1024


def _replicated_vector():
    v = torch.randn(VEC)
    _scale_rows_kernel[(64,)](v, torch.empty(64, VEC), N=VEC)
    pl = lookup(v.data_ptr(), VEC * 4)
    assert pl.policy == "replicated" and pl.chosen
    return v, pl


def test_a_storage_a_launch_overwrites_is_laid_out_afresh_for_free():
    v, first = _replicated_vector()
    x = torch.randn(VEC)
    with triton_nmp.profile() as prof:
        _write_kernel[(1,)](x, v, N=VEC, STORED=VEC, READS_V=False)
    assert torch.equal(v, x)
    after = lookup(v.data_ptr(), VEC * 4)
    assert after.chosen and after.policy != "replicated"
    # nothing moved for v (its old bytes were dead): only x's host write
    assert [t.kind for t in prof.transfers] == ["host_write"] and prof.transfers[0].nbytes == VEC * 4
    (fresh,) = [d for d in decisions() if "laid out afresh" in d.why]
    assert fresh.tensor.startswith("_write_kernel.v_ptr") and fresh.transfer == ""
    assert "overwrites every byte" in fresh.why and "was replicated" in fresh.why
    # the store is no longer one copy per bank
    assert prof.launches[-1].bytes_local + prof.launches[-1].bytes_remote < 4 * VEC * 4


@pytest.mark.parametrize("stored, reads_v", [(VEC // 2, False), (VEC, True)], ids=["half-written", "read-too"])
def test_a_replicated_storage_a_launch_stores_into_is_laid_out_again_its_live_bytes_moved(stored, reads_v):
    # its old bytes are live (half of them kept, or read before the store): not free, but a copy per bank
    # would take every store once per bank, so it is laid out again with the move charged
    v, _ = _replicated_vector()
    expect = v.clone()
    x = torch.randn(VEC)
    expect[:stored] = x[:stored] + (v[:stored] if reads_v else 0)
    with triton_nmp.profile() as prof:
        _write_kernel[(1,)](x, v, N=VEC, STORED=stored, READS_V=reads_v)
    assert torch.equal(v, expect)
    after = lookup(v.data_ptr(), VEC * 4)
    assert after.chosen and after.policy != "replicated"
    assert not any("laid out afresh" in d.why for d in decisions())
    (again,) = [d for d in decisions() if "laid out again" in d.why]
    assert again.tensor.startswith("_write_kernel.v_ptr") and again.transfer == "relayout"
    assert "a copy per bank cannot take stores" in again.why and "was replicated" in again.why
    assert sorted(t.kind for t in prof.transfers) == ["host_write", "relayout"]
    # the store is no longer one copy per bank
    assert prof.launches[-1].bytes_local + prof.launches[-1].bytes_remote < 4 * VEC * 4


def test_layouts_not_the_auto_policys_are_not_laid_out_afresh():
    v = torch.randn(VEC)
    place(v, "blocked")
    _write_kernel[(1,)](torch.randn(VEC), v, N=VEC, STORED=VEC, READS_V=False)
    assert lookup(v.data_ptr(), VEC * 4).policy == "blocked"
    assert not any("laid out afresh" in d.why for d in decisions())


def test_overwritten_needs_every_byte_stored_and_none_loaded():
    from triton_nmp.abi import KIND_DMA_LOAD, KIND_DMA_STORE, KIND_SCATTER

    def rec(kind, arg, first, rows, row_bytes, stride):
        return [kind, 0, arg, first, rows, row_bytes, stride, 0]

    def trace(*recs):
        import numpy as np

        return np.array(recs, dtype=np.int64)

    # two strided halves interleave to cover 4 rows of 64 bytes
    halves = trace(rec(KIND_DMA_STORE, 0, 0, 2, 64, 128), rec(KIND_DMA_STORE, 0, 64, 2, 64, 128))
    assert relayout.overwritten(halves, {0: 256}) == {0}
    assert relayout.overwritten(halves, {0: 320}) == frozenset()  # the last 64 bytes not stored
    gap = trace(rec(KIND_DMA_STORE, 0, 0, 2, 64, 128))
    assert relayout.overwritten(gap, {0: 256}) == frozenset()
    twice = trace(rec(KIND_DMA_STORE, 0, 0, 1, 128, 0), rec(KIND_DMA_STORE, 0, 0, 1, 128, 0))
    assert relayout.overwritten(twice, {0: 256}) == frozenset()  # 256 bytes stored, half of it twice
    loaded = trace(rec(KIND_DMA_STORE, 0, 0, 1, 256, 0), rec(KIND_DMA_LOAD, 0, 0, 1, 4, 0))
    assert relayout.overwritten(loaded, {0: 256}) == frozenset()
    scattered = trace(rec(KIND_DMA_STORE, 0, 0, 1, 256, 0), [KIND_SCATTER, 0, 0, 0, 1, 4, 256, 0])
    assert relayout.overwritten(scattered, {0: 256}) == frozenset()
    other = trace(rec(KIND_DMA_STORE, 0, 0, 1, 256, 0), rec(KIND_DMA_LOAD, 1, 0, 1, 256, 0))
    assert relayout.overwritten(other, {0: 256, 1: 256}) == {0}


@triton.jit
def _row_kernel(row_ptr, v_ptr, N: tl.constexpr):
    """Writes row `row` (a loaded number) of v: where it writes depends on data, so the footprint is not static."""
    offs = tl.arange(0, N)
    tl.store(v_ptr + tl.load(row_ptr) * N + offs, offs.to(tl.float32))


def test_a_provisional_layout_is_settled_for_free_by_a_launch_that_overwrites_it():
    v = torch.zeros(VEC)
    _row_kernel[(1,)](torch.tensor([1]), v, N=VEC // 2)
    assert torch.equal(v[VEC // 2:], torch.arange(VEC // 2, dtype=torch.float32))
    assert lookup(v.data_ptr(), VEC * 4).provisional
    x = torch.randn(VEC)
    with triton_nmp.profile() as prof:
        _write_kernel[(1,)](x, v, N=VEC, STORED=VEC, READS_V=False)
    assert torch.equal(v, x)
    pl = lookup(v.data_ptr(), VEC * 4)
    assert pl.chosen and not pl.provisional
    assert [t.kind for t in prof.transfers] == ["host_write"]  # x's; v's old bytes were dead: not moved
    assert any("laid out afresh" in d.why and d.tensor.startswith("_write_kernel.v_ptr") for d in decisions())


@triton.jit
def _row_copy_kernel(row_ptr, src_ptr, v_ptr, N: tl.constexpr):
    """v = the row of src at a loaded index: v's bytes are written whole, but the footprint is not static."""
    offs = tl.arange(0, N)
    tl.store(v_ptr + offs, tl.load(src_ptr + tl.load(row_ptr) * N + offs))


@triton.jit
def _sum_blocks_kernel(v_ptr, out_ptr, BLOCK: tl.constexpr):
    """A program per BLOCK elements: the static reader that settles v's layout (chunks of one block)."""
    pid = tl.program_id(0)
    tl.store(out_ptr + pid, tl.sum(tl.load(v_ptr + pid * BLOCK + tl.arange(0, BLOCK))))


def test_a_data_dependent_launch_makes_its_next_output_in_the_layout_the_last_one_was_settled_in():
    n, block = 1 << 14, 512  # chunks of 2 KiB: not the default interleaving
    src = torch.randn(4, n)
    relayouts, alive = [], []
    for step in range(3):  # a decode step: a new output buffer each time (kept alive: never the same address)
        v = torch.empty(n)
        alive.append(v)
        out = torch.empty(n // block)
        with triton_nmp.profile() as prof:
            _row_copy_kernel[(1,)](torch.tensor([step]), src, v, N=n)
            made = lookup(v.data_ptr(), n * 4)
            _sum_blocks_kernel[(n // block,)](v, out, BLOCK=block)
        torch.testing.assert_close(out, src[step].view(-1, block).sum(1))
        settled = lookup(v.data_ptr(), n * 4)
        assert made.provisional and not settled.provisional and settled.granularity == block * 4
        relayouts.append([t for t in prof.transfers if t.kind == "relayout"])
        assert (made.layout_signature() == settled.layout_signature()) == (step > 0)
    # the first output is moved to the reader's layout (its bytes are live); the next ones start there
    assert len(relayouts[0]) == 1 and relayouts[1] == relayouts[2] == []
    assert any("the layout this argument was last settled in" in d.why for d in decisions())


def test_a_data_dependent_output_every_program_reads_whole_is_spread_not_replicated_and_never_moves_again():
    # GPT-2's decode: the embedding lookup writes a new row every step and every program of the next GEMV reads
    # it whole; replicated, it was re-laid out into 64 copies every step (a replicated layout is not learned)
    n = VEC
    src = torch.randn(4, n)
    relayouts, alive = [], []
    for step in range(3):
        v = torch.empty(n)
        alive.append(v)
        out = torch.empty(64, n)
        with triton_nmp.profile() as prof:
            _row_copy_kernel[(1,)](torch.tensor([step]), src, v, N=n)
            _scale_rows_kernel[(64,)](v, out, N=n)
        torch.testing.assert_close(out[5], src[step] * 5)
        settled = lookup(v.data_ptr(), n * 4)
        assert settled.chosen and not settled.provisional and settled.policy == "blocked"
        relayouts.append([t for t in prof.transfers if t.kind == "relayout"])
    assert len(relayouts[0]) == 1 and relayouts[1] == relayouts[2] == []  # the first row moves once, then none
    (why,) = {d.why for d in decisions() if "not replicated: a data-dependent launch writes a new one" in d.why}
    assert "spread over every bank" in why


def test_an_overwritten_storage_in_another_auto_layout_keeps_it():
    # only replicated and provisional layouts are laid out afresh: re-deciding a reused storage for its writer
    # can cost its readers more
    x = torch.randn(ROWS, COLS)
    _rowwise(x)
    first = lookup(x.data_ptr(), x.numel() * 4)
    assert first.policy == "interleaved" and first.granularity == COLS * 4
    src = torch.randn(ROWS, COLS)
    _copy_blocks_kernel[(ROWS // 8,)](src, x, BLOCK=8 * COLS)  # writes every byte of x, in 8 KiB blocks
    assert torch.equal(x, src)
    assert lookup(x.data_ptr(), x.numel() * 4).layout_signature() == first.layout_signature()
    assert not any("laid out afresh" in d.why for d in decisions())

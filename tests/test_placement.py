"""Tests of bank placement: the registry, the address -> bank mapping and input validation."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import torch

from triton_nmp.errors import NMPError
from triton_nmp.placement import (
    DEFAULT_GRANULARITY,
    NMPPlacementError,
    Placement,
    clear_placements,
    place,
    placement_generation,
    placement_of,
    placement_signature,
)
from triton_nmp.target import TargetSpec, active_target, set_active_target


@pytest.fixture(autouse=True)
def _fresh_registry():
    clear_placements()
    yield
    clear_placements()


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _reference_banks(pl: Placement, starts, lengths, base: int, P: int) -> np.ndarray:
    """Bank of every single byte, counted: the definition bank_bytes must match."""
    out = np.zeros(P)
    for s, n in zip(starts, lengths):
        x = np.arange(base + s, base + s + n)
        out += np.bincount(pl.bank_of(x, P), minlength=P)
    return out


# ------------------------------------------------------------------------------------ registry


def test_unplaced_tensor_is_interleaved_from_its_first_byte():
    x = torch.zeros(1000)
    pl = placement_of(x.data_ptr(), _nbytes(x))
    assert pl.policy == "interleaved" and pl.granularity == DEFAULT_GRANULARITY
    assert pl.origin == x.data_ptr()


def test_place_returns_the_tensor_and_views_inherit():
    x = torch.zeros(64 * 256)
    assert place(x, "blocked") is x
    pl = placement_of(x.data_ptr(), _nbytes(x))
    assert pl.policy == "blocked" and pl.extent == _nbytes(x) and pl.origin == x.data_ptr()
    v = x[100:200]
    assert placement_of(v.data_ptr(), _nbytes(v)) == pl  # equality ignores the origin...
    assert placement_of(v.data_ptr(), _nbytes(v)).origin == x.data_ptr()  # ...which stays the tensor's
    other = torch.zeros(10)
    assert placement_of(other.data_ptr(), _nbytes(other)).policy == "interleaved"


def test_newest_placement_containing_the_buffer_wins():
    x = torch.zeros(4096)
    place(x, "blocked")
    head = x[:1024]
    place(head, bank=3)
    assert placement_of(head.data_ptr(), _nbytes(head)).policy == "bank"
    tail = x[2048:]
    assert placement_of(tail.data_ptr(), _nbytes(tail)).policy == "blocked"


def test_registry_does_not_keep_tensors_alive():
    x = torch.zeros(4096)
    place(x, "replicated")
    ptr, n = x.data_ptr(), _nbytes(x)
    gen = placement_generation()
    ref = weakref.ref(x)
    del x
    gc.collect()
    assert ref() is None
    assert placement_generation() != gen  # the entry was dropped with the memory
    assert placement_of(ptr, n).policy == "interleaved"


def test_placement_survives_while_a_view_keeps_the_storage():
    x = torch.zeros(4096)
    place(x, bank=5)
    v = x[10:]
    del x
    gc.collect()
    assert placement_of(v.data_ptr(), _nbytes(v)).bank == 5


def test_signature_is_hashable_and_distinguishes_policies():
    a, b, c = torch.zeros(256), torch.zeros(256), torch.zeros(256)
    place(a, "blocked")
    place(b, bank=2)
    sig = placement_signature(a, b, c, 7)
    hash(sig)
    # c was never placed: host data, laid out by the auto policy at its first launch
    assert sig == (("blocked", None, None), ("bank", 2, None), ("auto", None, None), None)
    d = torch.zeros(512)
    place(d, "blocked")
    assert placement_signature(d) == placement_signature(a)  # same policy, different tensor


def test_views_that_fall_differently_on_the_banks_have_different_signatures():
    """A config tuned for one view must not be served for another that reads other banks."""
    banks = 64  # nmp-64
    blocked = torch.zeros(64 * 1024)  # 256 KiB: 4 KiB per bank
    place(blocked, "blocked")
    first, second = blocked[:1024], blocked[1024:2048]
    assert placement_signature(first) != placement_signature(second)
    assert placement_signature(second) == (("blocked", None, None, "at", 4096, 256 * 1024),)
    assert placement_signature(blocked) == (("blocked", None, None),)  # the whole range: as before
    inter = torch.zeros(2 * banks * 256 + 512)
    place(inter, "interleaved")  # 1 KiB chunks: the bank pattern repeats every 64 KiB
    period = banks * 256  # floats in 64 KiB
    assert placement_signature(inter[period:]) == placement_signature(inter[: inter.numel() - period])
    assert placement_signature(inter[period:]) == (("interleaved", None, 1024),)
    assert placement_signature(inter[256:]) == (("interleaved", None, 1024, "at", 1024),)
    pinned = torch.zeros(4096)
    place(pinned, bank=3)
    assert placement_signature(pinned[100:]) == placement_signature(pinned) == (("bank", 3, None),)


# ------------------------------------------------------------------------------ bank mapping


@pytest.mark.parametrize(
    "pl",
    [
        Placement("interleaved", None, 64, 1 << 16),
        Placement("interleaved", None, 1024, 1 << 16),
        Placement("blocked", None, None, 10_000),  # 8 banks: chunks of 1250 bytes, not aligned
        Placement("bank", 3, None, 1 << 16),
    ],
)
def test_bank_bytes_is_exact_for_runs_crossing_chunk_boundaries(pl):
    rng = np.random.default_rng(0)
    P = 8
    starts = rng.integers(0, 9000, 200)
    lengths = rng.integers(0, 3000, 200)
    base = 48
    got = pl.bank_bytes(starts, lengths, base, P)
    np.testing.assert_allclose(got, _reference_banks(pl, starts, lengths, base, P), atol=1e-6)
    assert got.sum() == pytest.approx(lengths.sum())


def test_interleaving_is_relative_to_the_placed_range():
    # The first granule of a placed tensor is in bank 0 whatever its host address.
    pl = Placement("interleaved", None, 1024, 1 << 20)
    assert pl.bank_bytes([0], [1024], 0, 64)[0] == 1024
    assert pl.bank_bytes([0], [1024], 1024, 64)[1] == 1024  # a view starting one granule later
    assert list(pl.bank_of(np.array([0, 1023, 1024, 64 * 1024]), 64)) == [0, 0, 1, 0]


def test_blocked_splits_into_equal_chunks_one_per_bank():
    pl = Placement("blocked", None, None, 64 * 1000)
    got = pl.bank_bytes([0], [64 * 1000], 0, 64)
    assert np.all(got == 1000)
    tail = Placement("blocked", None, None, 10)  # ceil(10 / 4) = 3 bytes per bank, bank 3 gets 1
    assert list(tail.bank_bytes([0], [10], 0, 4)) == [3, 3, 3, 1]


def test_bank_bytes_rejects_mismatched_runs():
    with pytest.raises(ValueError, match="same length"):
        Placement().bank_bytes([0, 1], [5], 0, 4)


# ------------------------------------------------------------------------------- validation


def _error(fn) -> str:
    with pytest.raises(NMPPlacementError) as info:
        fn()
    assert isinstance(info.value, NMPError) and isinstance(info.value, ValueError)
    return str(info.value)


def test_unknown_policy_suggests_the_closest():
    msg = _error(lambda: place(torch.zeros(4), "blockd"))
    assert "unknown policy 'blockd'" in msg and "did you mean 'blocked'" in msg
    assert "interleaved, blocked, replicated, bank" in msg


def test_bank_out_of_range_names_the_target_and_the_valid_range():
    n = active_target().num_pus
    msg = _error(lambda: place(torch.zeros(4), bank=n))
    assert f"bank {n} does not exist" in msg and f"0..{n - 1}" in msg
    assert "does not exist" in _error(lambda: place(torch.zeros(4), bank=-1))
    assert "must be an integer" in _error(lambda: place(torch.zeros(4), bank=True))


def test_bank_conflicts_and_missing_bank():
    assert "conflicts with policy 'blocked'" in _error(lambda: place(torch.zeros(4), "blocked", bank=1))
    assert "needs the bank number" in _error(lambda: place(torch.zeros(4), "bank"))
    assert place(torch.zeros(4), "bank", bank=1) is not None


def test_granularity_validation():
    msg = _error(lambda: place(torch.zeros(4), granularity=100))
    assert "not a multiple of the DMA granule (32 B" in msg and "e.g. 128" in msg
    assert "positive integer" in _error(lambda: place(torch.zeros(4), granularity=0))
    assert "applies to 'interleaved' only" in _error(lambda: place(torch.zeros(4), "blocked", granularity=64))
    x = place(torch.zeros(4096), granularity=4096)
    assert placement_of(x.data_ptr(), _nbytes(x)).granularity == 4096


def test_non_tensors_and_non_cpu_tensors_are_rejected():
    assert "expected a torch.Tensor, got list" in _error(lambda: place([1, 2, 3]))
    assert "device 'meta'" in _error(lambda: place(torch.empty(4, device="meta")))


def test_too_big_for_one_bank():
    small = TargetSpec(name="tiny", mesh_rows=2, mesh_cols=2, bank_bytes=4096)
    previous = set_active_target(small)
    try:
        msg = _error(lambda: place(torch.zeros(2048), bank=0))  # 8 KiB in a 4 KiB bank
        assert "8192 bytes in one bank" in msg and "holds 4096" in msg and "'interleaved' or 'blocked'" in msg
        assert "in one bank" in _error(lambda: place(torch.zeros(2048), "replicated"))
        place(torch.zeros(2048), "blocked")  # 2 KiB per bank fits
    finally:
        set_active_target(previous)


def test_freeing_a_placed_tensor_inside_place_does_not_deadlock():
    """The GC runs a placed tensor's finalizer at any allocation, also inside place() while it holds the
    registry lock (seen as a hang of the whole test suite): the finalizer must not block."""
    import threading

    from triton_nmp import placement as pl
    from triton_nmp import placement_registry

    doomed = pl.place(torch.zeros(256), "blocked")
    gen = pl.placement_generation()
    ptr, nbytes = doomed.data_ptr(), doomed.numel() * doomed.element_size()
    done = threading.Event()

    def finalizer_inside_place() -> None:
        with placement_registry._lock:  # what place() holds when the collector runs the finalizer on its thread
            nonlocal doomed
            del doomed  # the storage dies here: its finalizer runs now, on this thread
        done.set()

    t = threading.Thread(target=finalizer_inside_place, daemon=True)
    t.start()
    t.join(timeout=30)
    assert done.is_set(), "a placed tensor freed while the registry lock was held deadlocked"
    assert pl.placement_generation() != gen  # the freed entry is forgotten before the next lookup
    assert pl.placement_of(ptr, nbytes).policy == "interleaved"

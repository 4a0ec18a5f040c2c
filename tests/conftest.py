"""Fixtures shared by the tests: the simulated clock (benchmarker, profiler), the grids a test launches,
and the nmpir round trip every kernel the test suite compiles goes through."""

from __future__ import annotations

import pytest
import torch

import triton_nmp.driver.launcher as launcher_mod
from triton_nmp.backend.compiler import NMPBackend
from triton_nmp.driver.device import clock

from .ir_harness import assert_round_trip

N, BLOCK = 4096, 256


@pytest.fixture
def tensors() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(N), torch.randn(N), torch.empty(N)


@pytest.fixture
def launched_grids(monkeypatch) -> list:
    """(slots, grid, metadata, run result) of every grid the test launches, in order."""
    seen = []
    real = launcher_mod.run_grid

    def spy(fn, slots, grid, abi, spans=(), metadata=None, *rest, **kw):
        r = real(fn, slots, grid, abi, spans, metadata, *rest, **kw)
        seen.append((list(slots), grid, metadata, r))
        return r

    monkeypatch.setattr(launcher_mod, "run_grid", spy)
    return seen


@pytest.fixture
def fresh_clock_state():
    """No memo or benchmark segment carried over from another test (the clock's time is kept)."""
    clock.clear_memo()
    yield
    clock.clear_memo()


@pytest.fixture(autouse=True, scope="session")
def nmpir_round_trip():
    """Every nmpir module compiled in this process prints, parses and prints back to the same text and
    parses to the same IR (see tests/ir_harness.py); a kernel that does not fails the test compiling it."""
    make_nmpir = NMPBackend.make_nmpir

    def checked(src, metadata, options):
        nmpir = make_nmpir(src, metadata, options)
        assert_round_trip(nmpir.module)
        return nmpir

    NMPBackend.make_nmpir = staticmethod(checked)
    yield
    NMPBackend.make_nmpir = staticmethod(make_nmpir)

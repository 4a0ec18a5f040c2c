"""Fixtures shared by the tests: the simulated clock (benchmarker, profiler), the grids a test launches,
the nmpir round trip every kernel the test suite compiles goes through, and Inductor caches of the session's
own (`fresh_inductor` for a test that checks what Inductor selects or benchmarks)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import triton_nmp.driver.launcher as launcher_mod
from triton_nmp.backend.compiler import NMPBackend
from triton_nmp.driver.device import clock

from .ir_harness import assert_round_trip

N, BLOCK = 4096, 256

_inductor_dir: str | None = None
_inductor_env_before: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    """The session compiles with Inductor caches of its own: Inductor's default dir (/tmp/torchinductor_<user>)
    is shared by every run on the machine, so a graph or an autotune result another run cached there would let
    a compile skip the work a test checks. Processes the tests start inherit the dir."""
    global _inductor_dir, _inductor_env_before
    _inductor_env_before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    _inductor_dir = tempfile.mkdtemp(prefix="triton-nmp-tests-inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = _inductor_dir


def pytest_unconfigure(config: pytest.Config) -> None:
    if _inductor_dir is None:
        return
    if _inductor_env_before is None:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    else:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = _inductor_env_before
    shutil.rmtree(_inductor_dir, ignore_errors=True)


@pytest.fixture
def fresh_inductor(tmp_path: Path) -> Iterator[Path]:
    """Nothing an earlier compile in this session left in Inductor's caches: an empty cache dir of the test's
    own, Inductor's memoised caches cleared (it memoises e.g. its autotune cache's path on first use) and
    Dynamo reset, before and after the test. For tests that check what a compile selects or benchmarks."""
    from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir

    torch._dynamo.reset()
    with temporary_cache_dir(str(tmp_path / "inductor")):  # clears Inductor's memoised caches on entry and exit
        yield tmp_path / "inductor"
    torch._dynamo.reset()


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

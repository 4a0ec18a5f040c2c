"""Fixtures shared by the tests that read the simulated clock (benchmarker, profiler)."""

from __future__ import annotations

import pytest
import torch

from triton_nmp.driver.device import clock

N, BLOCK = 4096, 256


@pytest.fixture
def tensors() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(N), torch.randn(N), torch.empty(N)


@pytest.fixture
def fresh_clock_state():
    """No memo or benchmark segment carried over from another test (the clock's time is kept)."""
    clock.clear_memo()
    yield
    clock.clear_memo()

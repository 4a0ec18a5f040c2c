"""Benchmarking on simulated time: triton.testing.do_bench, benchmark-loop replay, the driver's
benchmarker, and triton.autotune choosing by simulated time."""

from __future__ import annotations

import time

import pytest
import torch
import triton
import triton.language as tl

import triton_nmp
from tests.conftest import BLOCK, N
from triton_nmp.driver import benchmarker
from triton_nmp.driver.device import clock
from triton_nmp.driver.driver import NMPDriver
from triton_nmp.profiler import profile
from triton_nmp.simulator import runtime

pytestmark = pytest.mark.usefixtures("fresh_clock_state")


@triton.jit
def vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


@pytest.fixture
def native_runs():
    """Grids of the launches that really ran (the runtime's listener never sees a replay)."""
    seen: list[tuple[int, int, int]] = []

    def listener(meta, grid, result) -> None:
        seen.append(grid)

    runtime.add_launch_listener(listener)
    yield seen
    runtime.remove_launch_listener(listener)


def launch(x, y, out, block: int = BLOCK) -> None:
    vadd[(triton.cdiv(N, block),)](x, y, out, N, BLOCK=block)


def sim_ms(fn) -> float:
    with profile() as prof:
        fn()
    return prof.sim_seconds * 1e3


def test_triton_do_bench_reports_simulated_ms_fast(tensors, native_runs) -> None:
    x, y, out = tensors
    fn = lambda: launch(x, y, out)  # noqa: E731
    expected = sim_ms(fn)
    calls = 0

    def counted() -> None:
        nonlocal calls
        calls += 1
        fn()

    replayed0 = clock.stats.replayed
    native_runs.clear()
    t0 = time.perf_counter()
    ms = triton.testing.do_bench(counted)
    wall = time.perf_counter() - t0
    replayed = clock.stats.replayed - replayed0
    assert ms == pytest.approx(expected, rel=1e-6)
    assert torch.equal(out, x + y)
    # Every call either ran natively (and reached the listener) or was replayed, never both.
    assert len(native_runs) + replayed == calls
    n_warmup, n_repeat = max(1, int(25 / expected)), max(1, int(100 / expected))
    assert calls == 1 + 5 + n_warmup + n_repeat
    # First call and the confirming estimate call run, the warmup loop (no clear_cache) runs; every
    # timed call is replayed.
    assert abs(len(native_runs) - (2 + n_warmup)) <= 1 and replayed >= n_repeat
    assert wall < 10, f"do_bench took {wall:.2f} s for {calls} calls"


def test_quantiles_from_triton_do_bench_are_equal(tensors) -> None:
    x, y, out = tensors
    q = triton.testing.do_bench(lambda: launch(x, y, out), quantiles=[0.2, 0.5, 0.8], warmup=1, rep=5)
    assert q[0] == q[1] == q[2]  # integer-picosecond clock: identical launches time identically


def test_replay_only_between_clear_cache_calls(tensors, native_runs) -> None:
    x, y, out = tensors
    d = NMPDriver()
    cache = d.get_empty_cache_for_benchmark()
    for _ in range(5):  # ordinary repeated launches always execute
        launch(x, y, out)
    assert len(native_runs) == 5
    d.clear_cache(cache)
    launch(x, y, out)  # same position as the previous segment's first launch: memo confirmed -> replay
    assert len(native_runs) == 5 and clock.stats.replayed >= 1
    launch(x, y, out)  # the previous segment (the five plain launches) repeats here too: replay
    assert len(native_runs) == 5
    d.clear_cache(cache)
    out2 = torch.empty_like(out)
    launch(x, y, out2)  # a different argument: executes
    assert len(native_runs) == 6 and torch.equal(out2, x + y)
    d.clear_cache(cache)
    launch(x, y, out2)  # identical, and its timing inputs (same shapes and placements) are confirmed
    assert len(native_runs) == 6
    d.clear_cache(cache)
    launch(x, y, out, block=512)  # another grid: executes
    d.clear_cache(cache)
    launch(x, y, out, block=512)  # identical, but executed only once so far: runs to confirm determinism
    assert len(native_runs) == 8
    d.clear_cache(cache)
    launch(x, y, out, block=512)
    assert len(native_runs) == 8  # replayed
    launch(x, y, out, block=512)  # past the end of the previous segment (one launch): executes
    launch(x, y, out, block=512)
    assert len(native_runs) == 10


def test_replay_follows_multi_launch_segments(tensors, native_runs) -> None:
    x, y, out = tensors
    d = NMPDriver()
    cache = d.get_empty_cache_for_benchmark()
    y2 = torch.empty_like(y)

    def fn() -> None:
        scale[(N // BLOCK,)](x, y2, N, BLOCK=BLOCK)
        launch(x, y2, out)

    for _ in range(2):
        d.clear_cache(cache)
        fn()
    assert len(native_runs) == 4
    replayed0 = clock.stats.replayed
    for _ in range(3):
        d.clear_cache(cache)
        fn()
    assert len(native_runs) == 4 and clock.stats.replayed - replayed0 == 6
    d.clear_cache(cache)
    launch(x, y2, out)  # the segment diverges at its first launch: no replay from here on
    scale[(N // BLOCK,)](x, y2, N, BLOCK=BLOCK)
    assert len(native_runs) == 6
    assert torch.equal(out, 3 * x)


def test_clock_advances_by_memoised_time_on_replay(tensors) -> None:
    x, y, out = tensors
    expected = sim_ms(lambda: launch(x, y, out))
    d = NMPDriver()
    cache = d.get_empty_cache_for_benchmark()
    launch(x, y, out)
    d.clear_cache(cache)
    launch(x, y, out)
    t0 = clock.now()
    replayed0 = clock.stats.replayed
    d.clear_cache(cache)
    launch(x, y, out)
    assert clock.stats.replayed == replayed0 + 1
    assert (clock.now() - t0) * 1e3 == pytest.approx(expected, rel=1e-6)


def test_get_benchmarker_is_simulated_and_deterministic(tensors) -> None:
    x, y, out = tensors
    bench = NMPDriver().get_benchmarker()
    assert bench is benchmarker.do_bench
    fn = lambda: launch(x, y, out)  # noqa: E731
    expected = sim_ms(fn)
    calls = 0

    def counted() -> None:
        nonlocal calls
        calls += 1
        fn()

    q = bench(counted, quantiles=(0.5, 0.2, 0.8))
    assert calls == 2  # once, and once more to confirm
    assert isinstance(q, list) and len(q) == 3 and q[0] == q[1] == q[2]
    assert q[0] == pytest.approx(expected, rel=1e-6)
    assert bench(fn) == q[0] == bench(fn, return_mode="median") == bench(fn, return_mode="min")
    assert bench(fn, quantiles=[0.5]) == q[0]
    assert bench(fn, return_mode="all") == [q[0], q[0]]
    with pytest.raises(ValueError):
        bench(fn, return_mode="p99")
    assert bench(lambda: None) == 0.0  # host work is free on the simulated clock


def test_benchmarker_samples_a_nondeterministic_function(tensors) -> None:
    x, y, out = tensors
    launch(x, y, out)  # first use writes x and y into the banks: not part of what is sampled below
    blocks = iter([32, 1024] * 10)
    times = benchmarker.do_bench(lambda: launch(x, y, out, block=next(blocks)), return_mode="all")
    assert len(times) == benchmarker.MAX_SAMPLES and len(set(times)) == 2
    lo, mid, hi = benchmarker.do_bench(lambda: launch(x, y, out, block=next(blocks)), quantiles=(0.0, 0.5, 1.0))
    assert lo < hi and lo <= mid <= hi


def test_grad_to_none_is_reset(tensors) -> None:
    x, y, out = tensors
    w = torch.zeros(1, requires_grad=True)
    w.grad = torch.ones(1)
    benchmarker.do_bench(lambda: launch(x, y, out), grad_to_none=[w])
    assert w.grad is None


CONFIGS = [triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 2048})]


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def tuned_copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit
def plain_copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


def test_autotune_picks_the_config_with_lower_simulated_time() -> None:
    """BLOCK=32 issues 64x more (tiny) DMAs than BLOCK=2048 but keeps each program's bytes in one bank (the
    locality mapping makes them local) and, pipelined across the grid loop, overlaps their setups; BLOCK=2048
    reads 7/8 of its bytes remotely with half the PUs idle. The configs' times differ and the tuner picks the
    lower one."""
    n = 1 << 16
    # fixed layouts: the configs compete on the same placement (with "auto", the first launch's footprint
    # would choose the layout the others then run on)
    x, out = triton_nmp.place(torch.randn(n), "interleaved"), triton_nmp.place(torch.empty(n), "interleaved")
    expected = {}
    for cfg in CONFIGS:
        b = cfg.kwargs["BLOCK"]
        expected[b] = sim_ms(lambda b=b: plain_copy[(triton.cdiv(n, b),)](x, out, n, BLOCK=b))
    assert expected[2048] != pytest.approx(expected[32], rel=0.05)
    best = min(expected, key=expected.get)
    tuned_copy[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    assert torch.equal(out, x)
    assert tuned_copy.do_bench is benchmarker.do_bench
    assert tuned_copy.best_config.kwargs["BLOCK"] == best
    timings = {cfg.kwargs["BLOCK"]: t for cfg, t in tuned_copy.configs_timings.items()}
    for b, ms in expected.items():
        assert timings[b] == pytest.approx([ms, ms, ms], rel=1e-6)

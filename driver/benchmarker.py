"""The nmp benchmarker: Triton's `do_bench` contract, measured on the simulated device clock.

`NMPDriver.get_benchmarker()` returns `do_bench`, so `triton.autotune` ranks configurations by
simulated time. Wall-clock repetition exists to average out noise; simulated time of a deterministic
kernel has none, so `fn` runs once, then once more to confirm the time repeats (and to take JIT
compilation, which the first call of an autotuner config does, out of the picture for the host). Only
when the two disagree (data-dependent traces, launches that differ between calls) does it take up to
`MAX_SAMPLES` samples and summarise them like Triton does.

Only nmp launches advance the simulated clock: host work inside `fn` (torch ops, pre-hooks) is free.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from triton_nmp import relayout

from .device import clock

__all__ = ["do_bench", "MAX_SAMPLES", "CONFIRM_BUDGET_SECONDS"]

MAX_SAMPLES = 5
CONFIRM_BUDGET_SECONDS = 5.0  # skip further runs when one run of `fn` takes longer on the host
_RETURN_MODES = ("min", "max", "mean", "median", "all")


def _run_once(fn: Callable[[], Any], grad_to_none: Sequence[Any] | None) -> tuple[float, float]:
    """(simulated ms, host seconds) of one call of `fn`."""
    if grad_to_none is not None:
        for x in grad_to_none:
            x.grad = None
    t_host = time.perf_counter()
    t0 = clock.now_ps()
    fn()
    t1 = clock.now_ps()
    return (t1 - t0) / 1e9, time.perf_counter() - t_host


def _quantiles(samples: list[float], qs: Sequence[float]) -> list[float]:
    """Linear-interpolation quantiles (numpy's default), as Triton's do_bench reports them."""
    xs = sorted(samples)
    out = []
    for q in qs:
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile {q} is outside [0, 1]")
        pos = q * (len(xs) - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, len(xs) - 1)
        out.append(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo))
    return out


def do_bench(
    fn: Callable[[], Any],
    warmup: float = 25,
    rep: float = 100,
    grad_to_none: Sequence[Any] | None = None,
    quantiles: Sequence[float] | None = None,
    return_mode: str = "mean",
) -> float | list[float]:
    """Simulated run time of `fn` in milliseconds, with `triton.testing.do_bench`'s signature.

    `warmup` and `rep` are accepted for compatibility and ignored (see the module docstring). Returns a
    list when `quantiles` is given (a float for a single quantile, as Triton does) or for
    `return_mode="all"`; for a deterministic `fn` every statistic equals the one simulated time.
    """
    if return_mode not in _RETURN_MODES:
        raise ValueError(f"return_mode must be one of {', '.join(_RETURN_MODES)}, not {return_mode!r}")
    with relayout.suspended():  # a tuner's repetitions are not the workload: no re-layout accrues
        first, host = _run_once(fn, grad_to_none)
        samples = [first]
        if host < CONFIRM_BUDGET_SECONDS:
            second, host = _run_once(fn, grad_to_none)
            samples.append(second)
            if first != second:  # the clock counts integer picoseconds: a deterministic fn repeats exactly
                while len(samples) < MAX_SAMPLES and host < CONFIRM_BUDGET_SECONDS:
                    t, host = _run_once(fn, grad_to_none)
                    samples.append(t)
    if quantiles is not None:
        ret = _quantiles(samples, quantiles)
        return ret[0] if len(ret) == 1 else ret
    if return_mode == "all":
        return samples
    if return_mode == "min":
        return min(samples)
    if return_mode == "max":
        return max(samples)
    if return_mode == "median":
        return statistics.median(samples)
    return statistics.fmean(samples)

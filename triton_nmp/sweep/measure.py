"""One candidate, measured the way the autotuner measures it: legality query, cost-model prediction,
then the kernel launched through the driver's benchmarker (simulated time, deterministic).

The launch is the one `triton.runtime.autotuner.Autotuner._bench` makes (`fn.run(..., grid=..., warmup=False,
**config.all_kwargs())` under `do_bench(..., quantiles=(0.5, 0.2, 0.8))`), so a sweep's time for a config is the
time `triton_nmp.autotune` would measure for it, and the picks agree.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import triton

__all__ = ["Measurement", "measure_candidate"]

_ERROR_CHARS = 500


@dataclass
class Measurement:
    """What one candidate gave: simulated seconds (None if it could not run), the model's prediction,
    a refusal reason (illegal: pruned before running) or an error."""

    simulated_seconds: float | None = None
    predicted_seconds: float | None = None
    pruned: str | None = None
    error: str | None = None
    host_seconds: float = 0.0


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:_ERROR_CHARS]


def measure_candidate(fn: Any, named: dict[str, Any], grid: tuple[int, ...], config: triton.Config,
                      *, predict: bool = True) -> Measurement:
    """Legality, prediction and simulated time of `config` for kernel `fn` (a @jit or a wrapper of one)
    launched with arguments `named` on `grid`, on the active target."""
    from triton.compiler.errors import CompileTimeAssertionFailure
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.driver import driver
    from triton.runtime.errors import OutOfResources

    from triton_nmp.errors import NMPError
    from triton_nmp.legality import check_config
    from triton_nmp.tuning.context import kernel_meta, unwrap_jit
    from triton_nmp.tuning.entries import median_seconds
    from triton_nmp.tuning.perfmodel import PerfModel

    t0 = time.perf_counter()
    out = Measurement()
    while isinstance(fn, Autotuner):  # launch the kernel below the tuner (heuristics apply), as the tuner does
        fn = fn.fn
    jit = unwrap_jit(fn)
    meta = kernel_meta(fn, named, {}, config)
    try:
        verdict = check_config(jit, meta, config)
        if not verdict.legal:
            out.pruned = verdict.reason[:_ERROR_CHARS]
            out.host_seconds = time.perf_counter() - t0
            return out
    except NMPError:
        pass  # legality unknown: the launch will tell, as in the autotuner
    if predict:
        seconds = PerfModel().predict(fn, named, {"grid": grid}, config)
        out.predicted_seconds = seconds if math.isfinite(seconds) else None
    overlap = set(named) & set(config.all_kwargs())
    if overlap:
        out.error = f"arguments {sorted(overlap)} are both given and tuned by the config"
        return out

    def call() -> None:
        fn.run(grid=grid, warmup=False, **named, **config.all_kwargs())

    try:
        timing = driver.active.get_benchmarker()(call, quantiles=(0.5, 0.2, 0.8))
        out.simulated_seconds = median_seconds(timing)
        if out.simulated_seconds is None:
            out.error = "the benchmark returned no finite time"
    except (OutOfResources, CompileTimeAssertionFailure, NMPError) as exc:
        out.error = _first_line(exc)
    except Exception as exc:  # a candidate that fails must not stop the sweep: it is stored with its error
        out.error = _first_line(exc)
    out.host_seconds = time.perf_counter() - t0
    return out

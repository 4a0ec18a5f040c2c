"""Tuning sweeps: many kernels x shapes x configs x targets x placements, measured in parallel.

    sweep = Sweep.load("sweep.toml")                       # or record(): a run's autotuned launches
    with engine_from_options("pool", workers=2) as engine:  # or "ray" with ray="auto" / an address
        report = run_sweep(sweep, engine)                   # results merge into the tuning cache
    print(report.table())

`triton-nmp tune FILE [--engine pool|ray] [--workers N] [--ray auto|ADDRESS]` is the command line.

Modules, one job each: `spec` (the sweep file), `plan` (tasks, groups, the payload workers share),
`measure` (one candidate, as the autotuner measures it), `worker` (runs tasks in any process), `engine`
(the engine contract, the in-process engine), `configured` (engines from options, the configured one),
`pool` (local process pool with retries), `ray_engine` (Ray), `journal` (finished candidates, for
resuming), `progress` (the bar), `runner` (`run_sweep`), `record` (a sweep from a run's autotuned
launches), `integrate` (autotuners' and Inductor's benchmarking on the configured engine, Inductor
template choices in the tuning cache). Design,
guarantees and multi-node scaling: docs/sweeps.md.
"""

from __future__ import annotations

from .configured import ENV_VAR, configured_engine, engine_from_options, set_engine
from .engine import Engine, InProcessEngine
from .plan import Plan, Task, TaskResult, make_plan
from .runner import GroupReport, SweepReport, run_sweep
from .spec import KernelCase, KernelRef, NMPSweepError, PlacementSpec, Sweep, TensorSpec

__all__ = [
    "ENV_VAR",
    "Engine",
    "GroupReport",
    "InProcessEngine",
    "KernelCase",
    "KernelRef",
    "NMPSweepError",
    "PlacementSpec",
    "Plan",
    "Sweep",
    "SweepReport",
    "Task",
    "TaskResult",
    "TensorSpec",
    "configured_engine",
    "engine_from_options",
    "make_plan",
    "run_sweep",
    "set_engine",
]

"""Autotuners' and Inductor's candidate benchmarking on the configured sweep engine (`configured.set_engine`).

* `measure_on_engine(engine, tuner, configs, named_args, kwargs)`: the candidates of one live launch as
  one batch of sweep tasks (the launch's own tensors, copied to the workers with their layouts); the
  `NMPAutotuner` calls it for the configs left after pruning, and so do the stock-autotuner hooks
  (`triton_nmp.tuning.stock`).
  None when the launch cannot be shipped (a kernel defined inside a function, configs with pre-hooks,
  an autotuner with reset/restore hooks): the caller benchmarks in process, after a one-time warning.
* `InductorEnginePool`: the object Inductor's `autotune_process.get_tuning_process_pool()` returns while
  an engine is configured (`inductor_patches()` turns `autotune_in_subproc` on): each template choice's
  benchmark request runs as a task of kind "inductor" on the engine's workers.
* `install_choice_cache()`: Inductor's template benchmarks on nmp read and fill the tuning cache, keyed by
  the choice's generated source and layouts (`choice_key`), so a later compile simulates nothing for a
  choice measured before, even with Inductor's own caches cold (off with Inductor's
  `autotune_local_cache=False`, like Inductor's own autotune cache).
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Any

import triton

from triton_nmp.target import active_target
from triton_nmp.tuning.configs import config_record
from triton_nmp.tuning.context import warn_once

from .configured import configured_engine
from .engine import Engine
from .plan import Payload, Task, TaskResult, target_active
from .spec import KernelCase, KernelRef, NMPSweepError, PlacementSpec, digest
from .worker import Worker, register_handler

__all__ = ["measure_on_engine", "InductorEnginePool", "inductor_patches", "timing_of",
           "choice_key", "install_choice_cache"]

def _layout_spec(named: dict[str, Any]) -> PlacementSpec:
    """The concrete layout of every placed tensor of a live launch (unplaced ones stay unplaced)."""
    import torch

    from triton_nmp.placement_registry import extent_bytes, lookup

    per_arg = []
    for name, v in named.items():
        if isinstance(v, torch.Tensor) and v.device.type == "cpu" and v.numel():
            found = lookup(v.data_ptr(), extent_bytes(v))
            if found is not None:
                policy, bank, granularity = found.layout_signature()
                text = f"bank:{bank}" if policy == "bank" else (
                    f"interleaved:{granularity}" if policy == "interleaved" and granularity else policy)
                per_arg.append((name, text))
    return PlacementSpec(None, tuple(per_arg))


def live_case(tuner: Any, configs: list[triton.Config], named_args: dict[str, Any],
              kwargs: dict[str, Any]) -> KernelCase | str:
    """The launch as a sweep case (holding copies of its tensors), or why it cannot be shipped to workers."""
    import torch

    from triton_nmp.tuning.context import LAUNCH_KWARGS, kernel_meta, resolve_grid

    if any(c.pre_hook for c in configs):
        return "a config has a pre_hook (code cannot be shipped to workers)"
    if getattr(tuner, "reset_to_zero", None) or getattr(tuner, "restore_value", None):
        return "the autotuner resets or restores arguments between candidates"
    try:
        ref = KernelRef.of(tuner.fn)
    except NMPSweepError as exc:
        return str(exc)
    # Copies, not the caller's tensors: shipping a tensor to a worker process moves its storage into shared
    # memory in place, which would change the caller's data_ptr (and so lose its placement: a tensor placed
    # "blocked" came back unplaced and was laid out again, charged).
    args = {k: v.detach().clone() if isinstance(v, torch.Tensor) else v
            for k, v in {**named_args, **{k: v for k, v in kwargs.items() if k not in LAUNCH_KWARGS}}.items()}
    grids = [tuple(resolve_grid(kwargs.get("grid"), kernel_meta(tuner.fn, named_args, kwargs, c))) for c in configs]
    return KernelCase(ref.attr.rpartition(".")[2], ref, args, [config_record(c) for c in configs],
                      list(getattr(tuner, "keys", [])), None, grids, 0, tuner)


def measure_on_engine(engine: Engine, tuner: Any, configs: list[triton.Config], named_args: dict[str, Any],
                      kwargs: dict[str, Any], on_result: Any = None) -> dict[triton.Config, TaskResult] | None:
    """Measure `configs` of one live launch on `engine` (see the module docstring); None: do it in process."""
    case = live_case(tuner, configs, named_args, kwargs)
    if isinstance(case, str):
        warn_once(case, f"sweep engine {engine.describe()} not used for this kernel: {case}; "
                         f"benchmarking in process")
        return None
    spec = active_target()
    placement = _layout_spec(named_args)  # the caller's tensors' layouts (the case holds copies)
    cid = digest([case.kernel.label(), case.configs, case.grids, os.getpid(), id(case)])
    payload = Payload(cid, {cid: case}, {spec.hash(): spec.to_toml()}, {placement.label(): placement}, False)
    tasks = [Task(digest([cid, i]), cid, spec.hash(), placement.label(), i, case.grids[i])
             for i in range(len(configs))]
    results: dict[str, TaskResult] = {}

    def arrived(task: Task, result: TaskResult) -> None:
        results[task.id] = result
        if on_result is not None:
            on_result(configs[task.index], result)

    engine.run(payload, tasks, arrived)
    return {configs[t.index]: results[t.id] for t in tasks}


def timing_of(result: TaskResult) -> list[float]:
    """A worker's result as Triton's timing triple in ms (inf for a config that could not run)."""
    s = result.simulated_seconds
    ms = s * 1e3 if s is not None and result.error is None and result.pruned is None else math.inf
    return [ms, ms, ms]


# -------------------------------------------------------------------------------------- Inductor


class InductorChoice:
    """A template choice's benchmark request with its generated module's source (workers on other
    machines write it to a file of their own)."""

    def __init__(self, bmreq: Any) -> None:
        self.bmreq = bmreq
        self.source = Path(bmreq.module_path).read_text(encoding="utf-8")

    def request(self) -> Any:
        if not Path(self.bmreq.module_path).is_file():
            folder = Path(tempfile.gettempdir()) / "triton-nmp-sweep-inductor"
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{self.bmreq.module_cache_key}.py"
            if not path.is_file():
                path.write_text(self.source, encoding="utf-8")
            self.bmreq.module_path = str(path)
        return self.bmreq


def _meta(m: Any) -> list[Any]:
    return [list(m.sizes), list(m.strides), str(m.dtype), int(m.offset)]


def choice_key(bmreq: Any) -> Any:
    """The tuning-cache key of an Inductor template choice: its generated source's hash (which holds the
    config), the kernel, the input and output layouts, the extra arguments, and the active target."""
    import triton_nmp
    from triton_nmp.tuning.cache import EntryKey

    spec = active_target()
    metas = {"inputs": [_meta(m) for m in bmreq.input_tensor_meta], "output": _meta(bmreq.output_tensor_meta),
             "extra_args": [str(a) for a in bmreq.extra_args]}
    return EntryKey(kernel=bmreq.kernel_name, source_hash=bmreq.module_cache_key, key=metas, dtypes={},
                    target=spec.name, target_hash=spec.hash(), placements={}, space="inductor-template",
                    version=triton_nmp.__version__)


def _cache_enabled() -> bool:
    from torch._inductor import config

    return bool(config.autotune_local_cache)  # Inductor's switch for its own autotune cache governs ours too


def cached_choice_ms(bmreq: Any) -> float | None:
    """A template choice's simulated ms from the tuning cache, if it is there (and Inductor's cache is on)."""
    from triton_nmp.tuning.cache import TuningCache

    if not _cache_enabled():
        return None
    entry = TuningCache().lookup(choice_key(bmreq))
    return None if entry is None or entry.best.simulated_seconds is None else entry.best.simulated_seconds * 1e3


def store_choice_ms(bmreq: Any, ms: float, host_seconds: float = 0.0) -> None:
    import time

    from triton_nmp.tuning.cache import Candidate, Entry, TuningCache

    if not _cache_enabled() or not math.isfinite(ms):
        return
    options = {"num_stages": bmreq.num_stages, "num_warps": bmreq.num_warps}
    entry = Entry(choice_key(bmreq), [Candidate({"kwargs": {}, "options": options}, True, ms / 1e3)], 0, [],
                  {"module": bmreq.module_path}, time.time(), host_seconds)
    try:
        TuningCache().store(entry)
    except OSError as exc:
        warn_once(f"store:{exc}", f"could not write the tuning cache ({exc}); the result is kept in memory only")


_uncached_benchmark: Any = None


def install_choice_cache() -> None:
    """Serve Inductor template benchmarks on nmp from the tuning cache and store new ones (idempotent)."""
    global _uncached_benchmark
    from torch._inductor.autotune_process import TritonCPUBenchmarkRequest

    if _uncached_benchmark is not None:
        return
    _uncached_benchmark = TritonCPUBenchmarkRequest.benchmark

    def benchmark(self: Any, *input_tensors: Any, out: Any = None) -> float:
        ms = cached_choice_ms(self)
        if ms is not None:
            return ms
        import time

        t0 = time.perf_counter()
        ms = _uncached_benchmark(self, *input_tensors, out=out)
        store_choice_ms(self, ms, time.perf_counter() - t0)
        return ms

    TritonCPUBenchmarkRequest.benchmark = benchmark


def _run_inductor_choice(worker: Worker, payload: Payload, task: Task) -> TaskResult:
    from triton_nmp.inductor.installation import install

    install()
    choice: InductorChoice = payload.cases[task.case]
    with target_active(worker.target(payload, task.target)):
        request = choice.request()
        run = _uncached_benchmark or type(request).benchmark  # workers measure; the parent stores
        ms = float(run(request))
    if not math.isfinite(ms):
        return TaskResult(task.id, error="the template choice could not run (its benchmark returned inf)")
    return TaskResult(task.id, simulated_seconds=ms / 1e3)


register_handler("inductor", _run_inductor_choice)


class InductorEnginePool:
    """Inductor's tuning-process-pool interface (`benchmark(choices) -> {choice: ms}`) on a sweep engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def benchmark(self, choices: list[Any]) -> dict[Any, float]:
        spec = active_target()
        out: dict[Any, float] = {}
        shipped = {}
        for i, c in enumerate(choices):
            ms = cached_choice_ms(c.bmreq)
            if ms is not None:
                out[c] = ms
            else:
                shipped[digest([c.bmreq.module_cache_key, c.bmreq.kernel_name, i])] = c
        if not shipped:
            return out
        payload = Payload(digest(sorted(shipped)), {k: InductorChoice(c.bmreq) for k, c in shipped.items()},
                          {spec.hash(): spec.to_toml()}, {"as-launched": PlacementSpec()}, False)
        tasks = [Task(k, k, spec.hash(), "as-launched", 0, kind="inductor") for k in shipped]

        def arrived(task: Task, result: TaskResult) -> None:
            choice = shipped[task.id]
            out[choice] = timing_of(result)[0]
            store_choice_ms(choice.bmreq, out[choice], result.host_seconds)

        self.engine.run(payload, tasks, arrived)
        return out

    def shutdown(self) -> None:
        """Inductor calls this at exit; the engine belongs to whoever configured it."""


_stock_pool_getter: Any = None


def _tuning_process_pool() -> Any:
    engine = configured_engine()
    return InductorEnginePool(engine) if engine is not None else _stock_pool_getter()


def inductor_patches() -> dict[str, Any]:
    """Inductor config for the nmp backend (called per compile): template benchmarks go through the tuning
    cache (`install_choice_cache`), and with an engine configured, through Inductor's sub-process hook,
    which is pointed at the engine."""
    global _stock_pool_getter
    install_choice_cache()
    engine = configured_engine()
    if engine is None:
        return {}
    from torch._inductor import autotune_process

    if _stock_pool_getter is None:
        _stock_pool_getter = autotune_process.get_tuning_process_pool
        autotune_process.get_tuning_process_pool = _tuning_process_pool
    return {"autotune_in_subproc": True}

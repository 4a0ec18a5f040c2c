"""`run_sweep`: plan, skip what is already stored, dispatch the rest to an engine, merge results into the cache.

Results are merged in the parent only, as they arrive: each one is appended to the journal (`journal`), and
when the last candidate of a group is in, the group's entry is written with `TuningCache.store`, which locks
the entry's directory and merges with whatever another writer (another sweep, a tuner in another process)
stored meanwhile. The winner of an entry is the fastest simulated candidate, ties going to the earlier
config of the space: simulated time is deterministic, so the picks do not depend on the engine, the number
of workers or the order results arrive in.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from triton_nmp.tuning.cache import TuningCache
from triton_nmp.tuning.configs import config_label

from .engine import Engine, InProcessEngine
from .journal import Journal
from .plan import Group, Plan, Task, TaskResult, make_plan
from .progress import Progress, format_seconds
from .spec import Sweep

__all__ = ["GroupReport", "SweepReport", "run_sweep"]


@dataclass
class GroupReport:
    """One tuning-cache entry of the sweep."""

    kernel: str
    target: str
    placement: str
    candidates: int
    pruned: int
    failed: int
    best: str | None
    best_seconds: float | None
    entry_id: str
    stored: bool
    skipped: bool = False  # already complete in the cache before this run


@dataclass
class SweepReport:
    engine: str
    groups: list[GroupReport] = field(default_factory=list)
    candidates: int = 0
    measured: int = 0  # measured in this run (the rest came from the journal or the cache)
    resumed: int = 0
    retries: int = 0
    simulated_seconds: float = 0.0
    seconds: float = 0.0

    def picks(self) -> dict[tuple[str, str, str], str | None]:
        """{(kernel, target, placement): best config label}: what must not depend on the engine."""
        return {(g.kernel, g.target, g.placement): g.best for g in self.groups}

    def table(self) -> str:
        rows = [["KERNEL", "TARGET", "PLACEMENT", "CANDIDATES", "PRUNED", "FAILED", "BEST CONFIG", "TIME", "ENTRY"]]
        for g in self.groups:
            rows.append([g.kernel, g.target, g.placement, str(g.candidates), str(g.pruned), str(g.failed),
                         g.best or "(none ran)", format_seconds(g.best_seconds) if g.best_seconds else "-",
                         g.entry_id[:12] + ("" if g.stored else " (not stored)")])
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        lines.append(f"{self.candidates} candidates on {self.engine}: {self.measured} measured in {self.seconds:.1f} s"
                     f" ({self.resumed} from an earlier run), {self.retries} retried, "
                     f"{format_seconds(self.simulated_seconds)} simulated")
        return "\n".join(lines)


def _report(group: Group, results: dict[str, TaskResult], stored: bool, skipped: bool) -> GroupReport:
    entry = group.entry(results) if not skipped else None
    pruned = sum(1 for t in group.tasks if t.id in results and results[t.id].pruned is not None)
    failed = sum(1 for t in group.tasks if t.id in results and results[t.id].error is not None)
    best = best_s = None
    if entry is not None:
        best, best_s = config_label(entry.best.config), entry.best.simulated_seconds
    return GroupReport(group.case.name, group.target.name, group.placement.label(), len(group.tasks), pruned,
                       failed, best, best_s, group.key.digest(), stored, skipped)


def run_sweep(sweep: Sweep | Plan, engine: Engine | None = None, cache: TuningCache | None = None, *,
              progress: bool = True, resume: bool = True, on_result: Any = None) -> SweepReport:
    """Run every candidate of `sweep` on `engine` (default in process) and store the entries in `cache`
    (default: the user's tuning cache). Groups already complete in the cache are not run again, nor are
    candidates in the journal of an interrupted run (`resume=False` measures everything again).
    `on_result(task, result, done, total)` is called after each stored result (tests, benchmarks)."""
    t0 = time.perf_counter()
    plan = sweep if isinstance(sweep, Plan) else make_plan(sweep)
    engine = engine or InProcessEngine()
    cache = cache or TuningCache()
    journal = Journal(cache.directory / ".sweeps" / f"{plan.id}.jsonl")
    # failed candidates are measured again (a failure may have been the machine's, not the config's)
    results = {k: r for k, r in journal.load().items() if r.error is None} if resume else {}
    report = SweepReport(engine.describe(), candidates=len(plan.tasks))
    skipped: set[int] = set()
    if resume:
        for i, g in enumerate(plan.groups):
            if g.complete_in(cache.lookup(g.key)):
                skipped.add(i)
    todo = [t for i, g in enumerate(plan.groups) if i not in skipped for t in g.tasks if t.id not in results]
    report.resumed = len(plan.tasks) - len(todo)
    group_of: dict[str, int] = {t.id: i for i, g in enumerate(plan.groups) for t in g.tasks}
    remaining = {i: sum(1 for t in g.tasks if t.id not in results) for i, g in enumerate(plan.groups)}
    stored: dict[int, bool] = {}

    def finish(i: int) -> None:
        entry = plan.groups[i].entry(results)
        if entry is not None:
            cache.store(entry)
        stored[i] = entry is not None

    for i in range(len(plan.groups)):  # complete in the journal already: store (idempotent merge)
        if i not in skipped and remaining[i] == 0:
            finish(i)
    bar = Progress(len(plan.tasks), report.resumed, progress)
    done = report.resumed

    def arrived(task: Task, result: TaskResult) -> None:
        nonlocal done
        if task.id in results and group_of[task.id] not in skipped and remaining[group_of[task.id]] == 0:
            return  # a duplicate delivery (engines deliver once; be safe)
        journal.append(result)
        results[task.id] = result
        report.measured += 1
        report.simulated_seconds += result.simulated_seconds or 0.0
        done += 1
        bar.result(result)
        i = group_of[task.id]
        remaining[i] -= 1
        if remaining[i] == 0:
            finish(i)
        if on_result is not None:
            on_result(task, result, done, len(plan.tasks))

    def retried(task: Task, reason: str) -> None:
        report.retries += 1
        bar.retry()

    try:
        if todo:
            engine.run(plan.payload, todo, arrived, retried)
    finally:
        bar.close()
    report.groups = [_report(g, results, stored.get(i, False), i in skipped) for i, g in enumerate(plan.groups)]
    if all(i in skipped or stored.get(i) for i in range(len(plan.groups))) or not results:
        journal.remove()
    report.seconds = time.perf_counter() - t0
    return report

"""A sweep as work: one task per candidate (case x target x placement x config), grouped by tuning-cache entry.

Planning runs in the parent: it imports every kernel, builds and places each case's arguments once per
target and placement, and computes the persistent-cache key of each group with the autotuner's own function
(`tuning.autotuner.entry_key_for`), so what the sweep stores is what a later launch looks up. A task is small
(ids, a config index, the resolved grid); what tasks share (cases, target descriptions as TOML, placements)
travels once per worker in the `Payload`. Task ids hash the entry key and the config, so they are stable
across runs and machines: the journal resumes by them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from triton_nmp.target import TargetSpec, active_target, set_active_target
from triton_nmp.tuning.cache import Candidate, Entry, EntryKey
from triton_nmp.tuning.configs import config_identity, space_hash

from .spec import KernelCase, PlacementSpec, Sweep, digest

__all__ = ["Task", "TaskResult", "Payload", "Group", "Plan", "make_plan", "target_active"]


@dataclass(frozen=True)
class Task:
    """One candidate to measure. `kind` selects the worker's handler ("kernel"; others register more)."""

    id: str
    case: str
    target: str
    placement: str
    index: int
    grid: tuple[int, ...] = ()
    kind: str = "kernel"


@dataclass
class TaskResult:
    """What a worker sent back for a task (see `measure.Measurement`); `attempts` counts dispatches."""

    task: str
    simulated_seconds: float | None = None
    predicted_seconds: float | None = None
    pruned: str | None = None
    error: str | None = None
    host_seconds: float = 0.0
    worker: str = ""
    attempts: int = 1

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskResult:
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__ if k in data})


@dataclass
class Payload:
    """What a worker needs besides the task: cases by identity, targets as TOML by hash, placements by label."""

    id: str
    cases: dict[str, Any]
    targets: dict[str, str]
    placements: dict[str, PlacementSpec]
    predict: bool = True


@dataclass
class Group:
    """The tasks of one tuning-cache entry (one case on one target under one placement)."""

    key: EntryKey
    case: KernelCase
    target: TargetSpec
    placement: PlacementSpec
    tasks: list[Task]
    args: dict[str, Any] = field(default_factory=dict)

    def entry(self, results: dict[str, TaskResult]) -> Entry | None:
        """The cache entry of the finished group (None when no candidate produced a time)."""
        candidates: list[Candidate] = []
        pruned: list[dict[str, Any]] = []
        host = 0.0
        for task in self.tasks:
            r = results[task.id]
            record = self.case.configs[task.index]
            host += r.host_seconds or 0.0
            if r.pruned is not None:
                pruned.append({"config": record, "reason": r.pruned})
                continue
            candidates.append(Candidate(record, True, r.simulated_seconds, r.predicted_seconds,
                                        list(task.grid) or None, r.error))
        timed = [i for i, c in enumerate(candidates) if c.simulated_seconds is not None]
        if not timed:
            return None
        winner = min(timed, key=lambda i: (candidates[i].simulated_seconds, i))  # ties: the earlier config
        import time

        return Entry(self.key, candidates, winner, pruned, self.args, time.time(), host)

    def complete_in(self, entry: Entry | None) -> bool:
        """Whether a stored entry already has every candidate of this group measured (or pruned)."""
        if entry is None:
            return False
        have = {config_identity(c.config) for c in entry.candidates if c.simulated}
        have |= {config_identity(p.get("config", {})) for p in entry.pruned}
        return all(config_identity(self.case.configs[t.index]) in have for t in self.tasks)


@dataclass
class Plan:
    groups: list[Group]
    payload: Payload

    @property
    def tasks(self) -> list[Task]:
        return [t for g in self.groups for t in g.tasks]

    @property
    def id(self) -> str:
        return digest([g.key.digest() for g in self.groups] + [len(g.tasks) for g in self.groups])


@contextlib.contextmanager
def target_active(spec: TargetSpec) -> Iterator[TargetSpec]:
    """Make `spec` the active target for the block (planning and workers switch targets per task)."""
    previous = set_active_target(spec)
    try:
        yield spec
    finally:
        set_active_target(previous)


def _args_summary(named: dict[str, Any]) -> dict[str, Any]:
    from triton_nmp.tuning.entries import arg_summary

    return arg_summary(named)


def make_plan(sweep: Sweep, *, predict: bool = True) -> Plan:
    """Expand `sweep` into groups of tasks (see the module docstring)."""
    from triton_nmp.tuning.entries import entry_key_for, placement_keys

    specs = [TargetSpec.load(t) for t in sweep.targets] or [active_target()]
    groups: list[Group] = []
    cases: dict[str, KernelCase] = {}
    for case in sweep.cases:
        cid = case.identity()
        cases[cid] = case
        fn = case.fn()
        space = space_hash(case.triton_configs())
        for spec in specs:
            with target_active(spec):
                for placement in sweep.placements:
                    named = case.build_args()
                    placement.apply(named)
                    key = entry_key_for(fn, case.key, space, named, placement_keys(named))
                    tasks = [Task(digest([key.digest(), config_identity(record)]), cid, spec.hash(),
                                  placement.label(), i, tuple(case.grid_for(i, named)))
                             for i, record in enumerate(case.configs)]
                    groups.append(Group(key, case, spec, placement, tasks, _args_summary(named)))
    payload = Payload("", cases, {s.hash(): s.to_toml() for s in specs},
                      {p.label(): p for p in sweep.placements}, predict)
    payload.id = digest([sorted(cases), sorted(payload.targets), sorted(payload.placements), predict])
    return Plan(groups, payload)

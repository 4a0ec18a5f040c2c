"""The layout axis of tuning: the autotuner searches config x mapping x layout.

Which arguments: a tensor argument whose layout is still open, i.e. host data under the default
"auto" placement policy or a tensor given `place(t, "auto")`, not used by any launch yet. A tensor
already in the banks keeps its layout (tuning never moves placed data); its layout is part of the
tuning key instead (`Placement.signature`).

Candidates: per legal config, the layouts the auto policy itself would choose from that config's
predicted footprint under its two reference mappings (`auto_layout.layouts_per_reference`: footprint
-aligned chunks, "blocked", replication of small read-only arguments) and the default interleaving:
at most three per config. The cost model ranks every (config, layout) pair with the arguments
trial-placed (`placement.trial`: nothing moves, nothing is charged) and the tuner simulates as many
pairs as it simulates configs without the layout axis (its `top_k` of the legal configs), each with
the arguments trial-placed in the pair's layouts (with a sweep engine configured, each layout's
configs go to its workers as one batch, the layout passed as the case's placement).

Applying the winner: its layouts are assigned to the open arguments before the launch, with the
charge the auto policy's first use has (a host write of every argument the kernel reads, on the
simulated clock and in the profile, logged as "autotuner layout search" in `placement.decisions()`).

Keys and entries: an open argument keys as "auto"; the entry of that key records every candidate's
layouts (`Candidate.layouts`) and the winner's are applied again on a later hit (charged the same
way). Every layout with a simulated candidate also gets an entry keyed by that concrete layout, which
is what the next launch (its arguments now laid out) finds, and what the model-level placement pass
reads as the tuned cost of a kernel under a layout (`tuned_seconds`).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import triton

from .configs import jsonable

__all__ = ["LayoutOption", "open_tensors", "layout_options", "search", "apply_record", "concrete_placements",
           "launching", "current_launch", "tuned_seconds"]


@dataclass(frozen=True)
class LayoutOption:
    """One candidate layout of the open arguments: {argument name: Placement} and which of them the
    kernel reads (their host data is written into the banks when the option is applied)."""

    label: str
    placements: tuple[tuple[str, Any], ...]
    read: frozenset[str]

    def record(self) -> dict[str, dict[str, Any]]:
        """JSON form stored in `Candidate.layouts`."""
        return {n: {"layout": jsonable(pl.layout_signature()), "read": n in self.read} for n, pl in self.placements}

    def signature(self) -> tuple:
        return tuple((n, pl.layout_signature()) for n, pl in self.placements)


def open_tensors(named: dict[str, Any]) -> dict[str, Any]:
    """The tensor arguments whose layout is still open (module docstring), by argument name."""
    from triton_nmp.placement import default_policy, extent_bytes, lookup

    out = {}
    auto_default = default_policy() == "auto"
    for name, v in named.items():
        if not (hasattr(v, "data_ptr") and hasattr(v, "dtype")) or v.device.type != "cpu" or v.numel() == 0:
            continue
        pl = lookup(v.data_ptr(), extent_bytes(v))
        if (pl is None and auto_default) or (pl is not None and pl.policy == "auto"):
            out[name] = v
    return out


def _default(name: str, t: Any) -> Any:
    from triton_nmp.placement import DEFAULT_GRANULARITY, Placement, extent_bytes

    return Placement("interleaved", None, DEFAULT_GRANULARITY, extent_bytes(t), t.data_ptr(), chosen=True)


def layout_options(fn: Any, nargs: dict[str, Any], kwargs: dict[str, Any], config: triton.Config,
                   opened: dict[str, Any]) -> list[LayoutOption]:
    """The candidate layouts of the open arguments for one config (module docstring); the default
    interleaving first. Only the default when the footprint is not static."""
    import numpy as np

    from triton_nmp.abi import KIND_DMA_LOAD, KIND_GATHER, KIND_SCATTER
    from triton_nmp.auto_layout import layouts_per_reference
    from triton_nmp.costmodel import predicted_launch
    from triton_nmp.errors import NMPError
    from triton_nmp.target import active_target

    from .context import kernel_meta, resolve_grid, unwrap_jit

    names = tuple(sorted(opened))
    default = LayoutOption("default", tuple((n, _default(n, opened[n])) for n in names), frozenset(names))
    spec = active_target()
    try:
        meta = kernel_meta(fn, nargs, kwargs, config)
        grid = resolve_grid(kwargs.get("grid"), meta)
        launch = predicted_launch(unwrap_jit(fn), {k: v for k, v in meta.items() if k not in config.kwargs},
                                  config, grid, spec)
    except (NMPError, ValueError, TypeError):
        return [default]
    if not launch.verdict.legal or not launch.trace.exact:
        return [default]
    trace = np.asarray(launch.trace.trace, dtype=np.int64)
    index = {a.name: i for i, a in enumerate(launch.func.args)}
    todo = {index[n]: (b.data_ptr, b.nbytes) for n in names
            if n in index and (b := launch.buffers[index[n]]) is not None}
    fixed = [None if i in todo else b for i, b in enumerate(launch.buffers)]
    n = launch.grid[0] * launch.grid[1] * launch.grid[2]
    try:
        per_ref, _ = layouts_per_reference(trace, n, fixed, todo, spec)
    except NMPError:
        return [default]
    dma = trace[trace[:, 0] <= KIND_SCATTER]
    read = frozenset(nm for nm in names if nm in index and np.isin(
        dma[dma[:, 2] == index[nm]][:, 0], (KIND_DMA_LOAD, KIND_GATHER)).any())
    default = LayoutOption("default", default.placements, read)
    out = [default]
    seen = {default.signature()}
    for ref, choice in per_ref.items():
        by_name = {nm: choice[index[nm]].placement for nm in names if nm in index and index[nm] in choice}
        pls = tuple((nm, _chosen(by_name[nm]) if nm in by_name else _default(nm, opened[nm])) for nm in names)
        opt = LayoutOption(f"auto/{ref}", pls, read)
        if opt.signature() not in seen:
            seen.add(opt.signature())
            out.append(opt)
    return out


def _chosen(pl: Any) -> Any:
    import dataclasses

    return dataclasses.replace(pl, chosen=True)


def _trial(opt: LayoutOption, opened: dict[str, Any]) -> contextlib.AbstractContextManager:
    from triton_nmp.placement import trial

    return trial({opened[n]: pl for n, pl in opt.placements})


def concrete_placements(placements: dict[str, Any], opt: LayoutOption) -> dict[str, Any]:
    """The key placements with the open arguments in `opt`'s layouts."""
    return {**placements, **{n: jsonable(pl.layout_signature()) for n, pl in opt.placements}}


def apply_record(kernel: str, opened: dict[str, Any], record: dict[str, dict[str, Any]], why: str) -> None:
    """Lay the open arguments out as a stored candidate's layouts say, charged (module docstring)."""
    from triton_nmp.placement import Placement, assign, extent_bytes

    for name, t in opened.items():
        rec = record.get(name)
        if rec is None:
            continue
        policy, bank, gran = rec["layout"]
        pl = Placement(policy, bank, gran, extent_bytes(t), t.data_ptr(), chosen=True)
        assign(t, pl, copy=bool(rec.get("read", True)), why=f"kernel '{kernel}': autotuner layout search: {why}")


def search(tuner: Any, args: tuple, kwargs: dict, named: dict[str, Any], placements: dict[str, Any],
           opened: dict[str, Any]) -> tuple[triton.Config, dict[str, dict[str, Any]], list[Any]]:
    """Tune `tuner` (an `NMPAutotuner`) over its legal configs x the open arguments' candidate layouts:
    rank every pair by the cost model, simulate the best `top_k`, apply the winner's layouts (charged).
    Returns (winning config, its layouts record, the entries to store: the "auto" key's and one per
    simulated layout)."""
    from .cache import Entry
    from .configs import config_label, config_record
    from .perfmodel import PerfModel, top_k_count
    from .prune import NMPTuningError

    t0 = time.time()
    nargs = dict(tuner.nargs)
    legal = tuner._legal_configs(kwargs)
    pairs = [(c, opt) for c in legal for opt in layout_options(tuner.fn, nargs, kwargs, c, opened)]
    predicted: dict[int, float] = {}  # pair index -> seconds (Configs compare by value: pairs go by index)
    model = tuner.perf_model
    if model is not None:
        for i, (c, opt) in enumerate(pairs):
            with _trial(opt, opened):
                if isinstance(model, PerfModel):
                    predicted[i] = model.predict(tuner.fn, nargs, kwargs, c)
                else:
                    predicted[i] = float(model(**nargs, **kwargs, **c.all_kwargs()))
    chosen = list(range(len(pairs)))
    if any(math.isfinite(t) for t in predicted.values()):
        chosen = sorted(chosen, key=lambda i: predicted[i])[:top_k_count(tuner.configs_top_k, len(legal))]
    tuner._to_bench = len(chosen)
    tuner._pooled = {}
    timings: dict[int, Any] = {}
    if not chosen:
        raise NMPTuningError(f"layout search of '{tuner.base_fn.__name__}': no (config, layout) candidate")
    by_layout: dict[LayoutOption, list[int]] = {}
    for i in chosen if len(chosen) > 1 else ():  # one candidate left: nothing to measure (as Triton does)
        by_layout.setdefault(pairs[i][1], []).append(i)
    for opt, group in by_layout.items():
        with _trial(opt, opened):  # a configured sweep engine measures each layout's configs as one batch
            tuner._pooled = tuner._measure_on_engine([pairs[i][0] for i in group], kwargs)
            for i in group:
                timings[i] = tuner._bench(*args, config=pairs[i][0], **kwargs)
    tuner._pooled = {}
    win = min(timings, key=lambda i: (timings[i], i)) if timings else chosen[0]
    best, best_opt = pairs[win]
    tuner.bench_time = time.time() - t0
    tuner.configs_timings = {pairs[i][0]: timings[i] for i in chosen if pairs[i][1] == best_opt}
    tuner._predictions = {c: predicted[i] for i, (c, opt) in enumerate(pairs) if opt == best_opt and i in predicted}

    def cand(i: int, layouts: bool) -> Any:
        c, opt = pairs[i]
        return tuner._candidate(c, nargs, kwargs, timings.get(i), predicted.get(i), opt.record() if layouts else None)

    entries: list[Any] = []
    if tuner.tuning_cache is not None:
        from .entries import arg_summary

        pruned = [{"config": config_record(p.config), "reason": p.reason} for p in tuner._pruned]
        summary = arg_summary(named)
        entries.append(Entry(tuner.entry_key(named, placements), [cand(i, True) for i in range(len(pairs))], win,
                             pruned, summary, time.time(), tuner.bench_time))
        for opt in dict.fromkeys(pairs[i][1] for i in timings):  # one entry per simulated layout, keyed by it
            mine = [i for i, p in enumerate(pairs) if p[1] == opt]
            best_here = min((i for i in mine if i in timings), key=lambda i: (timings[i], i))
            entries.append(Entry(tuner.entry_key(named, concrete_placements(placements, opt)),
                                 [cand(i, False) for i in mine], mine.index(best_here), pruned, summary, time.time(),
                                 tuner.bench_time))
    how = (f"the fastest of {len(timings)} simulated of {len(pairs)}" if timings
           else f"the cost model's best of {len(pairs)}")
    why = f"{best_opt.label} with {config_label(best)}, {how} (config x layout) candidates"
    apply_record(tuner.base_fn.__name__, opened, best_opt.record(), why)
    return best, best_opt.record(), entries


# ------------------------------------------------------------------------ the placement pass's view

_current = threading.local()


@contextlib.contextmanager
def launching(tuner: Any, named: dict[str, Any]) -> Iterator[None]:
    """Mark the launches run inside as the autotuner's (the placement pass's capture reads it)."""
    prev = getattr(_current, "value", None)
    _current.value = (tuner, named)
    try:
        yield
    finally:
        _current.value = prev


def current_launch() -> tuple[Any, dict[str, Any]] | None:
    """(autotuner, named arguments) of the tuned launch running on this thread, else None."""
    return getattr(_current, "value", None)


def tuned_seconds(tuner: Any, named: dict[str, Any], layouts: dict[str, tuple[Any, ...]]) -> tuple[float, str] | None:
    """(simulated seconds, config label) of the tuned winner of `tuner`'s launch with arguments `named`
    when the arguments named in `layouts` are in those layouts ((policy, bank, granularity)); None
    when the persistent cache holds no simulated entry for that key."""
    from .configs import config_label
    from .entries import placement_keys

    cache = getattr(tuner, "tuning_cache", None)
    if cache is None:
        return None
    placements = {**placement_keys(named), **{n: jsonable(v) for n, v in layouts.items()}}
    try:
        entry = cache.lookup(tuner.entry_key(named, placements))
    except Exception:  # a key that cannot be built (e.g. a foreign tuner): no tuned cost
        return None
    if entry is None or not entry.best.simulated or entry.best.simulated_seconds is None:
        return None
    from .configs import config_from_record

    return entry.best.simulated_seconds, config_label(config_from_record(entry.best.config))

"""A stock `triton.autotune` on nmp: the `prune_configs_by` hooks it is given, and what they decide.

`prune_configs_by(...)` returns Triton's dict: `early_config_prune` (`prune_illegal`, or `CachedPrune`
with a persistent cache), `perf_model` (the cost model, `perfmodel.PerfModel`) and `top_k`. For a stock
autotuner the pruning hook also resolves the launch where it can (`resolve_stock_launch`): a
persistent-cache hit leaves Triton one config (nothing is benchmarked); with a sweep engine configured
the cost model's top-k are measured on it, the entry is stored, and the winner is returned. An
autotuner that reads the cache and the engine itself (`NMPAutotuner`, which says so with a true
`reads_tuning_cache`) gets the legal configs only.
"""

from __future__ import annotations

import math
import time
from typing import Any

import triton

from .cache import Candidate, Entry
from .configs import config_identity, config_record, space_hash
from .context import find_autotuner, warn_once
from .entries import arg_summary, entry_key_for, placement_keys, resolve_cache
from .perfmodel import PerfModel, top_k_count
from .prune import NMPTuningError, prune_with_reasons

__all__ = ["CachedPrune", "prune_configs_by", "prune_illegal", "resolve_stock_launch"]


def prune_configs_by(top_k: int | float = 0.1, model: Any = None, cache: Any = False) -> dict[str, Any]:
    """`prune_configs_by` for `triton.autotune`: legality pruning, then the cost model keeps the best
    `top_k` configs (a fraction <= 1.0 of the legal ones, at least one, or a count) for measuring.

    `model`: None for the calibrated model of the active target, or a target / cost model / callable
    `(kernel, named_args, config, grid) -> seconds`. `cache` (True, a directory or a `TuningCache`): a stock
    `triton.autotune` also reads the persistent tuning cache (entries of `triton_nmp.autotune` and of
    `triton-nmp tune` sweeps; a hit benchmarks nothing) and stores what it measures on a sweep engine.
    """
    if isinstance(top_k, bool) or not isinstance(top_k, (int, float)):
        raise TypeError(f"top_k must be an int count or a float fraction, not {top_k!r}")
    if (isinstance(top_k, float) and not 0.0 < top_k <= 1.0) or (isinstance(top_k, int) and top_k < 1):
        raise ValueError(f"top_k must be a fraction in (0, 1] or a count >= 1, not {top_k!r}")
    if cache is False or cache is None:
        prune = prune_illegal
    else:
        prune = CachedPrune(resolve_cache(cache))
    return {"early_config_prune": prune, "perf_model": PerfModel(model), "top_k": top_k}


def prune_illegal(configs: list[triton.Config], named_args: dict[str, Any], **kwargs: Any) -> list[triton.Config]:
    """`early_config_prune` for `triton.autotune`: the configs that compile and fit the scratchpad.

    Finds the kernel from the calling Autotuner (see `context`); the reasons for the others are in
    `last_pruned(kernel)`. For a stock `triton.autotune` with a sweep engine configured
    (`triton_nmp.sweep.set_engine`), the remaining candidates are measured on the engine here and only the
    winner is returned, so Triton benchmarks nothing.
    """
    return _prune_for_stock_tuner(configs, named_args, kwargs, None)


def _prune_for_stock_tuner(configs: list[triton.Config], named_args: dict[str, Any], kwargs: dict[str, Any],
                           cache: Any) -> list[triton.Config]:
    tuner = find_autotuner(named_args=named_args)
    if tuner is None:
        raise NMPTuningError("prune_illegal must be called by triton.autotune's early_config_prune hook "
                             "(it finds the kernel from the autotuner); call prune_with_reasons(kernel, ...) "
                             "directly otherwise")
    legal, pruned = prune_with_reasons(tuner.fn, configs, named_args, kwargs)
    if not getattr(tuner, "reads_tuning_cache", False):  # a stock triton.autotune: the cache and the engine decide here
        chosen = resolve_stock_launch(tuner, legal, pruned, named_args, kwargs, cache)
        if chosen is not None:
            return [chosen]  # one config left: Triton launches it without benchmarking
    return legal


class CachedPrune:
    """`early_config_prune` of `prune_configs_by(cache=...)`: `prune_illegal` that also reads the persistent
    tuning cache for a stock `triton.autotune` (a hit leaves one config) and stores what it measures on a
    configured sweep engine."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache

    def __call__(self, configs: list[triton.Config], named_args: dict[str, Any], **kwargs: Any) -> list[triton.Config]:
        return _prune_for_stock_tuner(configs, named_args, kwargs, self.cache)


def resolve_stock_launch(tuner: Any, legal: list[triton.Config], pruned: list[Any], named_args: dict[str, Any],
                         kwargs: dict[str, Any], cache: Any) -> triton.Config | None:
    """For a stock `triton.autotune` using `prune_configs_by(...)`: the config to launch without benchmarking
    (a hit in `cache`, or measured on the configured engine and stored in `cache`), else None (Triton
    benchmarks as usual). `cache` None: no cache (plain `prune_configs_by()`)."""
    from triton_nmp.sweep.configured import configured_engine
    from triton_nmp.sweep.integrate import measure_on_engine

    engine = configured_engine()
    if cache is None and engine is None:
        return None  # plain `prune_configs_by()` and no engine: Triton benchmarks as usual
    named = {k: v for k, v in {**named_args, **kwargs}.items() if k in tuner.arg_names}
    key = entry_key_for(tuner.fn, tuner.keys, space_hash(tuner.configs), named, placement_keys(named))
    by_id = {config_identity(c): c for c in tuner.configs}
    entry = cache.lookup(key) if cache is not None else None
    if entry is not None and config_identity(entry.best.config) in by_id:
        return by_id[config_identity(entry.best.config)]
    if engine is None or len(legal) < 2:
        return None
    configs, predicted = legal, {}
    if isinstance(tuner.perf_model, PerfModel):
        top_k = top_k_count(tuner.configs_top_k, len(legal))
        predicted = {c: tuner.perf_model.predict(tuner.fn, named_args, kwargs, c) for c in legal}
        configs = sorted(legal, key=lambda c: predicted[c])[:top_k]
        if len(configs) == 1:
            return None  # Triton launches it without benchmarking anyway
    results = measure_on_engine(engine, tuner, configs, named_args, kwargs)
    if results is None:
        return None
    def candidate(c: triton.Config) -> Candidate:
        r, p = results.get(c), predicted.get(c)
        return Candidate(config_record(c), r is not None, r.simulated_seconds if r and r.error is None else None,
                         p if p is not None and math.isfinite(p) else None, None, r.error if r else None)

    candidates = [candidate(c) for c in legal if c in results or c in predicted]
    timed = [i for i, c in enumerate(candidates) if c.simulated_seconds is not None]
    if not timed:
        return None
    winner = min(timed, key=lambda i: (candidates[i].simulated_seconds, i))
    entry = Entry(key, candidates, winner, [{"config": config_record(p.config), "reason": p.reason} for p in pruned],
                  arg_summary(named), time.time(), sum(r.host_seconds for r in results.values()))
    if cache is not None:
        try:
            cache.store(entry)
        except OSError as exc:
            warn_once(f"store:{exc}", f"could not write the tuning cache ({exc}); the result is kept in memory only")
    return by_id[config_identity(entry.best.config)]

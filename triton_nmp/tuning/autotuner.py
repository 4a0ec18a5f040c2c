"""`triton_nmp.autotune`: Triton's autotuner with legality pruning, the cost model, placement-aware
keys and the persistent cache.

`NMPAutotuner` subclasses `triton.runtime.autotuner.Autotuner` and keeps its behaviour (hooks,
`reset_to_zero`, `restore_value`, `cache_results`, listener, `TRITON_PRINT_AUTOTUNING`), adding:

- the tuning key is extended with the bank placement of every tensor argument: Triton's in-memory
  cache is kept per placement signature, so a tensor placed differently re-tunes;
- on an in-memory miss the persistent cache (`cache.TuningCache`) is consulted and a hit selects the
  config with no compilation or simulation; a real miss tunes through Triton's own `run` and stores
  every candidate (predicted and measured) with the winner;
- predictions are made for every legal config (not only when pruning is needed), so the stored
  (predicted, simulated) pairs can recalibrate the model;
- a config the nmp compiler refuses while benchmarking times as inf, like Triton's OutOfResources;
- a tqdm progress bar on stderr when more than `PROGRESS_MIN_CONFIGS` configs are measured;
- with a sweep engine configured (`triton_nmp.sweep.set_engine`), the candidates are measured as one batch
  on its workers (`triton_nmp.sweep.integrate`), and Triton's selection reads those times;
- tensor arguments whose layout is still open (auto placement, not used yet) make the layout a search
  axis: config x mapping x layout (`layouts`), the winner's layouts applied, charged, before the launch.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
import warnings
from dataclasses import dataclass
from typing import Any

import triton
from triton import knobs
from triton.runtime.autotuner import Autotuner
from triton.runtime.errors import AutotunerError

from triton_nmp import relayout
from triton_nmp.errors import NMPCompilationError

from .cache import Candidate, Entry, EntryKey
from .configs import config_identity, config_record, space_hash
from .context import kernel_meta, resolve_grid, unwrap_jit, user_stacklevel
from .entries import arg_summary, entry_key_for, median_seconds, placement_keys, resolve_cache
from .layouts import apply_record, launching, open_tensors, search
from .perfmodel import PerfModel, top_k_count
from .prune import PrunedConfig, prune_with_reasons
from .stock import CachedPrune, prune_configs_by, prune_illegal

__all__ = ["NMPAutotuner", "Lookup", "autotune", "entry_key_for", "placement_keys", "PROGRESS_MIN_CONFIGS"]

PROGRESS_MIN_CONFIGS = 4  # a bar for more than this many measured configs


@dataclass(frozen=True)
class Lookup:
    """How the last launch found its config: "memory", "disk" (persistent cache) or "tuned";
    `seconds` is the host time the lookup took (before the launch itself)."""

    source: str
    seconds: float
    entry_id: str | None = None
    # the layouts the launch applied to arguments whose layout was open ({name: {"layout", "read"}}), else None
    layouts: dict | None = None


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple((k, _freeze(v)) for k, v in value.items())
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


# Patched Triton (upstream_patches/triton/0002) appends the backend's part to the in-memory key itself.
_BACKEND_KEY_HOOK = hasattr(Autotuner, "_use_driver_cache")


class NMPAutotuner(Autotuner):
    """Triton's Autotuner plus the persistent cache and placement-aware keys (module docstring)."""

    #: its `run` reads the persistent cache and measures on the sweep engine itself, so the stock-autotuner
    #: hooks (`stock.prune_illegal`) only prune for it
    reads_tuning_cache = True

    def __init__(self, fn: Any, arg_names: list[str], configs: list[triton.Config], key: list[str],
                 reset_to_zero: list[str] | None = None, restore_value: list[str] | None = None, *,
                 cache: Any = True, progress: bool | None = None, layouts: bool = True, **kwargs: Any) -> None:
        super().__init__(fn, arg_names, configs, key, reset_to_zero, restore_value, **kwargs)
        self.tuning_cache = resolve_cache(cache)
        self.search_layouts = layouts
        self._open_choice: dict[Any, dict | None] = {}  # (placement key, memory key) -> layouts applied
        self.progress = progress
        self.last_lookup: Lookup | None = None
        self._caches: dict[Any, dict] = {}
        self._space: tuple[tuple[int, int], str, dict] | None = None
        self._predictions: dict[triton.Config, float] = {}
        self._pruned: list[PrunedConfig] = []
        self._bench_errors: dict[triton.Config, str] = {}
        self._to_bench = 0
        self._pooled: dict[triton.Config, Any] = {}
        self._bar: Any = None

    # -------------------------------------------------------------------------------- keys

    def _memory_key(self, args: tuple, kwargs: dict) -> tuple:
        """The key Triton's `run` computes: tuning-key values, then the dtype of every argument."""
        named = {k: v for k, v in {**dict(zip(self.arg_names, args)), **kwargs}.items() if k in self.arg_names}
        key = [named[k] for k in self.keys if k in named]
        key += [str(v.dtype) for v in named.values() if hasattr(v, "dtype")]
        if _BACKEND_KEY_HOOK:  # Triton with upstream_patches/triton/0002: the backend extends the key too
            from triton.runtime.driver import driver

            get_hooks = getattr(driver.active, "get_autotune_hooks", None)
            hooks = get_hooks() if get_hooks is not None else None
            extra = getattr(hooks, "tuning_key_extra", None)
            if extra is not None:
                key.extend(extra(self, named))
        return tuple(key)

    def _space_info(self) -> tuple[str, dict[str, triton.Config]]:
        """(hash of the config list, {identity: config}); recomputed only if `configs` is replaced."""
        stamp = (id(self.configs), len(self.configs))
        if self._space is None or self._space[0] != stamp:
            self._space = (stamp, space_hash(self.configs), {config_identity(c): c for c in self.configs})
        return self._space[1], self._space[2]

    def entry_key(self, named: dict[str, Any], placements: dict[str, Any]) -> EntryKey:
        """The persistent-cache key of a launch with arguments `named` (see `cache.EntryKey`)."""
        return entry_key_for(self.fn, self.keys, self._space_info()[0], named, placements)

    # -------------------------------------------------------------------------------- run

    def run(self, *args: Any, **kwargs: Any) -> Any:
        if len(self.configs) <= 1:
            return super().run(*args, **kwargs)
        t0 = time.perf_counter()
        named = {k: v for k, v in {**dict(zip(self.arg_names, args)), **kwargs}.items() if k in self.arg_names}
        placements = placement_keys(named)
        pkey = _freeze(placements)
        self.cache = self._caches.setdefault(pkey, {})
        mkey = self._memory_key(args, kwargs)
        opened = open_tensors(named) if self.search_layouts else {}
        ekey: EntryKey | None = None
        source = "memory"
        layouts = self._open_choice.get((pkey, mkey))
        if mkey not in self.cache:
            source = "tuned"
            if self.tuning_cache is not None:
                ekey = self.entry_key(named, placements)
                entry = self._from_disk(ekey, mkey)
                if entry is not None:
                    source, layouts = "disk", entry.best.layouts
        self.last_lookup = Lookup(source, time.perf_counter() - t0, ekey.digest() if ekey else None)
        with launching(self, named):
            if source != "tuned":
                if opened and layouts:
                    apply_record(unwrap_jit(self.fn).__name__, opened, layouts, f"as tuned ({source})")
                    self.last_lookup = dataclasses.replace(self.last_lookup, layouts=layouts)
                    self._settle(named, args, kwargs, self.cache[mkey])
                return super().run(*args, **kwargs)
            self.configs_timings = None
            self._predictions, self._pruned, self._bench_errors, self._to_bench = {}, [], {}, 0
            self._pooled = {}
            if opened:
                return self._tune_layouts(args, kwargs, named, placements, opened, pkey, mkey)
            try:
                ret = super().run(*args, **kwargs)
            finally:
                self._close_bar()
            if mkey in self.cache:
                if ekey is not None:
                    self._store(ekey, named, args, kwargs, self.cache[mkey])
                self._settle(named, args, kwargs, self.cache[mkey], ekey)
            return ret

    def _tune_layouts(self, args: tuple, kwargs: dict, named: dict, placements: dict, opened: dict, pkey: Any,
                      mkey: tuple) -> Any:
        """The layout search (`layouts.search`), then the launch with the winner, its layouts applied."""
        self.nargs = dict(zip(self.arg_names, args))
        try:
            config, record, entries = search(self, args, kwargs, named, placements, opened)
        finally:
            self.nargs = None
            self._close_bar()
        self.cache[mkey] = config
        self._open_choice[(pkey, mkey)] = record
        self.last_lookup = dataclasses.replace(self.last_lookup, layouts=record)
        for entry in entries:
            self._write(entry)
        if knobs.autotuning.listener is not None:
            knobs.autotuning.listener(fn=unwrap_jit(self.fn), key=mkey, best_config=config,
                                      configs_timings=self.configs_timings, duration=self.bench_time, cache_hit=False)
        self._settle(named, args, kwargs, config)
        return super().run(*args, **kwargs)

    def _settle(self, named: dict, args: tuple, kwargs: dict, config: triton.Config,
                ekey: EntryKey | None = None) -> None:
        """After a launch laid arguments out (auto placement, the layout search): the in-memory cache of
        their new placement key holds the config too, and with `ekey` the persistent cache gets the
        entry under the new key as well, so the next launch finds it."""
        placements = placement_keys(named)
        cache = self._caches.setdefault(_freeze(placements), {})
        if cache is self.cache and ekey is None:
            return
        cache[self._memory_key(args, kwargs)] = config
        self.cache = cache
        changed = [n for n in placements if placements[n] != (ekey.placements.get(n) if ekey else None)]
        if ekey is not None and self.tuning_cache is not None and changed and all(
                (ekey.placements.get(n) or [None])[0] == "auto" for n in changed):  # laid out by this launch
            self._store(self.entry_key(named, placements), named, args, kwargs, config)

    def _close_bar(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _from_disk(self, ekey: EntryKey, mkey: tuple) -> Entry | None:
        entry = self.tuning_cache.lookup(ekey) if self.tuning_cache is not None else None
        if entry is None:
            return None
        live = self._space_info()[1]
        config = live.get(config_identity(entry.best.config))
        if config is None:
            return None
        self.cache[mkey] = config
        self.configs_timings = {live[i]: [c.simulated_seconds * 1e3] * 3 for c in entry.candidates
                                if c.simulated and c.simulated_seconds is not None and c.layouts == entry.best.layouts
                                and (i := config_identity(c.config)) in live}
        if knobs.autotuning.listener is not None:
            knobs.autotuning.listener(fn=unwrap_jit(self.fn), key=mkey, best_config=config,
                                      configs_timings=self.configs_timings, duration=None, cache_hit=True)
        return entry

    def _candidate(self, config: triton.Config, nargs: dict, kwargs: dict, timing: Any, predicted: float | None,
                   layouts: dict | None = None) -> Candidate:
        """The cache record of one measured (`timing`) or only predicted candidate."""
        try:
            grid = list(resolve_grid(kwargs.get("grid"), kernel_meta(self.fn, nargs, kwargs, config)))
        except Exception:  # a grid function that fails for a config it never launches
            grid = None
        return Candidate(config_record(config), timing is not None,
                         median_seconds(timing) if timing is not None else None, predicted, grid,
                         self._bench_errors.get(config), layouts)

    def _store(self, ekey: EntryKey, named: dict, args: tuple, kwargs: dict, winner: triton.Config) -> None:
        timings = self.configs_timings or {}
        nargs = dict(zip(self.arg_names, args))
        order = [c for c in self.configs if c in self._predictions or c in timings or c == winner]
        candidates = [self._candidate(c, nargs, kwargs, timings.get(c), self._predictions.get(c)) for c in order]
        entry = Entry(ekey, candidates, order.index(winner),
                      [{"config": config_record(p.config), "reason": p.reason} for p in self._pruned],
                      arg_summary(named), time.time(), getattr(self, "bench_time", None) if timings else None)
        self._write(entry)

    def _write(self, entry: Entry) -> None:
        try:
            self.tuning_cache.store(entry)
        except OSError as exc:
            warnings.warn(f"could not write the tuning cache ({exc}); the result is kept in memory only",
                          stacklevel=user_stacklevel())

    # ----------------------------------------------------------------------- pruning, benchmarking

    def _legal_configs(self, kwargs: dict) -> list[triton.Config]:
        """The configs left by legality pruning (ours, with reasons in `_pruned`, or the user's hook)."""
        configs = self.configs
        if self.early_config_prune is prune_illegal or isinstance(self.early_config_prune, CachedPrune):
            configs, self._pruned = prune_with_reasons(self.fn, self.configs, self.nargs, kwargs)
        elif self.early_config_prune:
            configs = self.early_config_prune(self.configs, self.nargs, **kwargs)
            if not configs:
                raise AutotunerError("No valid autotuner configs after pruning. "
                                     "`early_config_prune` should return at least one config.")
        return configs

    def prune_configs(self, kwargs: dict) -> list[triton.Config]:
        configs = self._legal_configs(kwargs)
        if self.perf_model and len(configs) > 1:
            top_k = top_k_count(self.configs_top_k, len(configs))
            if isinstance(self.perf_model, PerfModel):
                # ours predicts every legal config, even when all are measured: the stored
                # (predicted, simulated) pairs are what recalibrates the model
                predicted = {c: self.perf_model.predict(self.fn, self.nargs, kwargs, c) for c in configs}
            elif len(configs) > top_k:  # a user's model is called exactly when Triton would call it
                predicted = {c: self.perf_model(**self.nargs, **kwargs, **c.all_kwargs()) for c in configs}
            else:
                predicted = {}
            self._predictions = predicted
            if len(configs) > top_k:
                if not any(math.isfinite(t) for t in predicted.values()):
                    warnings.warn(f"no config of '{unwrap_jit(self.fn).__name__}' could be predicted: "
                                  f"measuring all {len(configs)}", stacklevel=user_stacklevel())
                else:
                    configs = sorted(configs, key=lambda c: predicted[c])[:top_k]
        self._to_bench = len(configs)
        self._pooled = self._measure_on_engine(configs, kwargs)
        return configs

    def _measure_on_engine(self, configs: list[triton.Config], kwargs: dict) -> dict[triton.Config, Any]:
        """With a sweep engine configured (`triton_nmp.sweep.set_engine`), the candidates as one batch on its
        workers; `_bench` then serves their times. Empty: benchmark in process as usual."""
        from triton_nmp.sweep.configured import configured_engine

        engine = configured_engine()
        if engine is None or len(configs) < 2:
            return {}
        from triton_nmp.sweep.integrate import measure_on_engine

        bar = self._progress_bar()
        results = measure_on_engine(engine, self, configs, self.nargs, kwargs,
                                    on_result=(lambda c, r: bar.update(1)) if bar is not None else None)
        if bar is not None:
            bar.close()
            self._bar = None
        return results or {}

    def _bench(self, *args: Any, config: triton.Config, **meta: Any) -> Any:
        pooled = self._pooled.get(config)
        if pooled is not None:  # measured on the sweep engine
            from triton_nmp.sweep.integrate import timing_of

            if pooled.error or pooled.pruned:
                self._bench_errors[config] = (pooled.error or pooled.pruned)[:500]
            return timing_of(pooled)
        bar = self._progress_bar()
        try:
            with relayout.suspended():  # the tuner's repetitions are not the workload (`triton_nmp.relayout`)
                result = super()._bench(*args, config=config, **meta)
            if all(math.isinf(r) for r in result) and config not in self._bench_errors:
                # Triton's autotuner swallowed an OutOfResources (e.g. scratchpad overflow): keep the reason.
                self._bench_errors[config] = self._refusal_reason(config, meta)
            return result
        except NMPCompilationError as exc:  # nmp's OutOfResources: this config cannot run
            self._bench_errors[config] = str(exc).splitlines()[0][:500]
            if knobs.autotuning.print:
                print(f"Autotuning failed with {exc}")
            return [math.inf, math.inf, math.inf]
        finally:
            if bar is not None:
                bar.update(1)

    def _refusal_reason(self, config: triton.Config, meta: dict) -> str:
        from triton_nmp.legality import check_config

        try:
            args = {k: v for k, v in {**(self.nargs or {}), **meta}.items() if k not in ("grid", "warmup")}
            return check_config(unwrap_jit(self.fn), args, config).reason[:500]
        except Exception as exc:  # the reason is diagnostic only; never fail tuning over it
            return f"out of resources ({type(exc).__name__})"

    def _progress_bar(self) -> Any:
        if self._bar is not None:
            return self._bar
        show = self.progress if self.progress is not None else self._to_bench > PROGRESS_MIN_CONFIGS
        if not show or self._to_bench == 0:
            return None
        try:
            from tqdm import tqdm
        except ImportError:
            return None
        self._bar = tqdm(total=self._to_bench, desc=f"tuning {unwrap_jit(self.fn).__name__}", unit="config",
                         file=sys.stderr, leave=False, dynamic_ncols=True)
        return self._bar


def autotune(configs: list[triton.Config], key: list[str], *, top_k: int | float = 0.1, cache: Any = True,
             progress: bool | None = None, model: Any = None, layouts: bool = True, **triton_autotune_kwargs: Any):
    """Like `triton.autotune`, with `prune_configs_by=prune_configs_by(top_k, model)` (override it
    by passing your own) and the persistent tuning cache.

    `cache`: True (default directory, see `cache.default_cache_dir`), False, a directory or a
    `TuningCache`. `progress`: None shows a bar when more than a handful of configs are measured,
    True always, False never. `layouts`: search the layouts of tensor arguments still open (auto placement,
    not used yet) with the configs (`tuning.layouts`); False leaves them to the auto policy at the launch.
    Other keyword arguments go to Triton's Autotuner unchanged.
    """
    pruning = triton_autotune_kwargs.pop("prune_configs_by", None)
    if pruning is None:
        pruning = prune_configs_by(top_k, model)

    def decorator(fn: Any) -> NMPAutotuner:
        return NMPAutotuner(fn, fn.arg_names, configs, key, cache=cache, progress=progress, layouts=layouts,
                            prune_configs_by=pruning, **triton_autotune_kwargs)

    return decorator

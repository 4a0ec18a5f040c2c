"""Tuning for nmp inside Triton's autotuner.

    configs = triton_nmp.config_space(tiles={"BLOCK": (256, 1024, 4096)})
    @triton_nmp.autotune(configs, key=["n"])           # or triton.autotune(configs, key,
    @triton.jit                                         #   prune_configs_by=triton_nmp.prune_configs_by())
    def kernel(...): ...

Modules, one job each: `space` (search spaces), `configs` (configs as JSON records), `context`
(which kernel and arguments a Triton hook is about), `prune` (legality pruning with reasons),
`perfmodel` (the cost model as Triton's perf_model), `cache` (the persistent cache on disk),
`entries` (a launch's cache key and summary), `stock` (`prune_configs_by` for a stock
`triton.autotune`: pruning, the cost model, the cache and the sweep engine), `autotuner` (the
Autotuner subclass and decorator), `export` (the cache as a table). `stock` and `autotuner` may use
the sweep engine (`triton_nmp.sweep`); the sweep uses the modules below them, never these two.
"""

from __future__ import annotations

from .autotuner import Lookup, NMPAutotuner, autotune
from .cache import Candidate, Entry, EntryKey, TuningCache, TuningCacheWarning, default_cache_dir
from .configs import config_from_record, config_label, config_record
from .export import export_table, table_rows
from .perfmodel import PerfModel
from .prune import NMPTuningError, PrunedConfig, last_pruned, prune_with_reasons
from .space import config_space
from .stock import prune_configs_by, prune_illegal

__all__ = [
    "Candidate",
    "Entry",
    "EntryKey",
    "Lookup",
    "NMPAutotuner",
    "NMPTuningError",
    "PerfModel",
    "PrunedConfig",
    "TuningCache",
    "TuningCacheWarning",
    "autotune",
    "config_from_record",
    "config_label",
    "config_record",
    "config_space",
    "default_cache_dir",
    "export_table",
    "last_pruned",
    "prune_configs_by",
    "prune_illegal",
    "prune_with_reasons",
    "table_rows",
]

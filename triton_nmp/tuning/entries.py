"""The persistent-cache entry of a launch: its key (`entry_key_for`) and what an entry records about it.

The one place that defines how a launch is keyed and summarised, shared by `NMPAutotuner`, the
`prune_configs_by` hooks of a stock `triton.autotune` (`stock`) and the sweep runner
(`triton_nmp.sweep`), so all of them read and write the same entries. Imports nothing that tunes or
measures, so every layer above may use it.
"""

from __future__ import annotations

import math
import os
from typing import Any

from .cache import EntryKey, TuningCache
from .configs import jsonable
from .context import unwrap_jit

try:  # imported here, not per launch: the launcher needs it anyway, and lookups must stay fast
    from triton_nmp.placement import placement_signature
except ImportError:  # placement not available yet: keys carry no placement
    placement_signature = None

__all__ = ["arg_summary", "entry_key_for", "median_seconds", "placement_keys", "resolve_cache"]


def placement_keys(named: dict[str, Any]) -> dict[str, Any]:
    """{tensor argument name: placement signature}; empty while placement is unavailable."""
    tensors = {k: v for k, v in named.items() if hasattr(v, "data_ptr") and hasattr(v, "dtype")}
    if not tensors or placement_signature is None:
        return {}
    return dict(zip(tensors, (jsonable(s) for s in placement_signature(*tensors.values()))))


def arg_summary(named: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in named.items():
        if hasattr(v, "data_ptr") and hasattr(v, "shape"):
            out[k] = {"shape": list(v.shape), "stride": list(v.stride()), "dtype": str(v.dtype)}
        else:
            out[k] = jsonable(v)
    return out


def median_seconds(timing: Any) -> float | None:
    """Triton's timings are [median, p20, p80] in ms (or a float from a custom do_bench)."""
    ms = timing[0] if isinstance(timing, (list, tuple)) else timing
    try:
        ms = float(ms)
    except (TypeError, ValueError):
        return None
    return ms / 1e3 if math.isfinite(ms) else None


def resolve_cache(cache: Any) -> TuningCache | None:
    if cache is True:
        return TuningCache()
    if cache is False or cache is None:
        return None
    if isinstance(cache, TuningCache):
        return cache
    if isinstance(cache, (str, os.PathLike)):
        return TuningCache(cache)
    raise TypeError(f"cache must be a bool, a directory or a TuningCache, not {type(cache).__name__}")


def entry_key_for(fn: Any, keys: list[str], space: str, named: dict[str, Any],
                  placements: dict[str, Any]) -> EntryKey:
    """The persistent-cache key of a launch of `fn` (tuning key names `keys`, config list hash `space`)
    with arguments `named` on the active target; the one place that defines it, shared with the sweep
    runner (`triton_nmp.sweep`) and the `prune_configs_by` hooks so their entries are the autotuner's."""
    import triton_nmp
    from triton_nmp.target import active_target

    jit = unwrap_jit(fn)
    spec = active_target()
    return EntryKey(
        kernel=jit.__name__, source_hash=jit.cache_key,
        key={k: jsonable(named[k]) for k in keys if k in named},
        dtypes={k: str(v.dtype) for k, v in named.items() if hasattr(v, "dtype")},
        target=spec.name, target_hash=spec.hash(), placements=placements, space=space,
        version=triton_nmp.__version__,
    )

"""Legality pruning: drop configs that cannot compile or overflow the scratchpad, before any run.

On nmp a tile that does not fit the scratchpad is a compile error, not a slow run, and compiling a
config through LLVM costs far more than the legality query (TTIR once per specialisation, then the
nmpir lowering and scratchpad plan per config). Reasons are kept per kernel (`last_pruned`) so a
user who wonders why a config was never measured can print them. The hooks a stock `triton.autotune`
calls (`prune_illegal`, `prune_configs_by`) are in `stock`.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Sequence
from typing import Any, NamedTuple

import triton

from triton_nmp.errors import NMPError
from triton_nmp.legality import check_config

from .configs import config_label
from .context import kernel_meta, unwrap_jit, user_stacklevel

__all__ = ["NMPTuningError", "PrunedConfig", "prune_with_reasons", "last_pruned"]

_SHOWN_REASONS = 5


class NMPTuningError(NMPError):
    """Tuning cannot proceed: no legal config, or a tuning hook used where it cannot work."""


class PrunedConfig(NamedTuple):
    config: triton.Config
    reason: str


_LAST: weakref.WeakKeyDictionary[Any, list[PrunedConfig]] = weakref.WeakKeyDictionary()
_WARNED: weakref.WeakSet[Any] = weakref.WeakSet()


def last_pruned(kernel: Any) -> list[PrunedConfig]:
    """(config, reason) of every config the last legality pruning of `kernel` removed.

    `kernel` is the @jit function or its autotune/heuristics wrapper; empty if nothing was pruned
    (or the kernel was never tuned).
    """
    return list(_LAST.get(unwrap_jit(kernel), []))


def prune_with_reasons(fn: Any, configs: Sequence[triton.Config], named_args: dict[str, Any],
                       kwargs: dict[str, Any]) -> tuple[list[triton.Config], list[PrunedConfig]]:
    """(legal configs, pruned configs with reasons) of `fn` (a @jit function or a wrapper of one)
    for a launch with `named_args` (positional) and `kwargs` (keyword arguments, grid, warmup).

    A config whose legality cannot be decided (e.g. an argument type the query does not know) is
    kept with a warning: the benchmark will tell. Raises `NMPTuningError` when nothing is legal.
    """
    jit = unwrap_jit(fn)
    kept: list[triton.Config] = []
    pruned: list[PrunedConfig] = []
    for config in configs:
        try:
            verdict = check_config(jit, kernel_meta(fn, named_args, kwargs, config), config)
        except NMPError as exc:
            if jit not in _WARNED:
                _WARNED.add(jit)
                warnings.warn(f"legality of configs of '{jit.__name__}' is unknown, measuring them all: {exc}",
                              stacklevel=user_stacklevel())
            kept.append(config)
            continue
        if verdict.legal:
            kept.append(config)
        else:
            pruned.append(PrunedConfig(config, verdict.reason))
    _LAST[jit] = pruned
    if not kept:
        lines = [f"  {config_label(p.config)}: {p.reason}" for p in pruned[:_SHOWN_REASONS]]
        if len(pruned) > _SHOWN_REASONS:
            lines.append(f"  ... and {len(pruned) - _SHOWN_REASONS} more (triton_nmp.last_pruned(kernel))")
        raise NMPTuningError(f"no legal config for kernel '{jit.__name__}' among {len(pruned)} on this launch:\n"
                             + "\n".join(lines)
                             + "\nAdd configs with smaller tiles or fewer num_stages.")
    return kept, pruned

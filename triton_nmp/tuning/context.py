"""Who is being tuned, with which arguments: the glue between Triton's hook signatures and nmp's queries.

Triton 3.9 calls `early_config_prune(configs, named_args, **kwargs)` and
`perf_model(**named_args, **kwargs, **config.all_kwargs())` without saying which kernel is tuned,
but the legality query and the cost model need the kernel. `triton_nmp.autotune` passes it
explicitly; for a stock `triton.autotune` the hooks find the calling `Autotuner` on the stack (it is
`self` in `Autotuner.prune_configs`, which holds `named_args` as `self.nargs`). The upstream patch
in `upstream_patches/` gives backends a proper hook and makes that search unnecessary.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

import triton
from triton.runtime.autotuner import Autotuner, Heuristics
from triton.runtime.jit import JITFunction

__all__ = ["LAUNCH_KWARGS", "find_autotuner", "unwrap_jit", "kernel_meta", "resolve_grid", "user_stacklevel",
           "warn_once"]

#: keys KernelInterface.__getitem__ and the autotuner add to kwargs that are not kernel arguments.
LAUNCH_KWARGS = frozenset({"grid", "warmup"})
_MAX_FRAMES = 12
_INTERNAL = tuple(os.path.dirname(m.__file__) + os.sep for m in (triton, sys.modules["triton_nmp"]))


def user_stacklevel() -> int:
    """`stacklevel` for a warning raised by the caller that points at the first frame outside Triton
    and triton-nmp (the user's launch), however deep the tuner's call chain is."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL):
        frame = frame.f_back
        level += 1
    return level


_warned: set[str] = set()


def warn_once(key: str, message: str) -> None:
    """Warn with `message` (at the user's frame) the first time `key` comes up in this process."""
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, stacklevel=user_stacklevel())


def unwrap_jit(fn: Any) -> JITFunction:
    """The JITFunction under Autotuner/Heuristics wrappers."""
    seen = 0
    while not isinstance(fn, JITFunction):
        fn = getattr(fn, "fn", None)
        seen += 1
        if fn is None or seen > 16:
            raise TypeError("expected a @triton.jit function (possibly wrapped by autotune/heuristics)")
    return fn


def _heuristics(fn: Any) -> list[Heuristics]:
    out = []
    while not isinstance(fn, JITFunction) and fn is not None:
        if isinstance(fn, Heuristics):
            out.append(fn)
        fn = getattr(fn, "fn", None)
    return out


def find_autotuner(named_args: dict | None = None, values: dict | None = None) -> Autotuner | None:
    """The Autotuner whose `prune_configs` is running up the stack.

    `named_args` matches by identity (early_config_prune receives `self.nargs` itself); `values`
    (perf_model's keyword arguments) matches when every positional argument is the same object.
    """
    frame = sys._getframe(1)
    for _ in range(_MAX_FRAMES):
        if frame is None:
            break
        candidate = frame.f_locals.get("self")
        nargs = getattr(candidate, "nargs", None) if isinstance(candidate, Autotuner) else None
        if nargs is not None:
            if named_args is not None and nargs is named_args:
                return candidate
            if values is not None and all(k in values and values[k] is v for k, v in nargs.items()):
                return candidate
        frame = frame.f_back
    return None


def kernel_meta(fn: Any, named_args: dict, kwargs: dict, config: triton.Config | None = None) -> dict[str, Any]:
    """Every kernel parameter's value for one config: positional and keyword arguments, the config's
    kwargs, values computed by `triton.heuristics` wrappers, then parameter defaults."""
    jit = unwrap_jit(fn)
    meta = {**named_args, **{k: v for k, v in kwargs.items() if k not in LAUNCH_KWARGS}}
    if config is not None:
        meta.update(config.kwargs)
    for heur in reversed(_heuristics(fn)):
        for name, rule in heur.values.items():
            meta[name] = rule(dict(meta))
    for p in jit.params:
        if p.name not in meta and p.has_default:
            meta[p.name] = p.default
    return meta


def resolve_grid(grid: Any, meta: dict[str, Any]) -> tuple[int, int, int]:
    """The launch grid as three ints; a callable grid is evaluated on `meta` like Triton does."""
    if grid is None:
        raise ValueError("no launch grid: launch the kernel as kernel[grid](...)")
    g = grid(meta) if callable(grid) else grid
    if not isinstance(g, (tuple, list)):
        g = (g,)
    dims = [int(x) for x in g][:3]
    return tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]

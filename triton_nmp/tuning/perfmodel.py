"""The cost model as Triton's `perf_model` (`prune_configs_by`, in `stock`, hands it to `triton.autotune`).

Triton calls `perf_model(**named_args, **kwargs, **config.all_kwargs())`: the config arrives
flattened into keyword arguments and the grid as the `grid` keyword (a tuple or a function of the
meta-parameters). The cost model wants `(kernel, named_args, config, grid)`, so the adapter finds
the Autotuner (for the kernel and its config list), matches the config back and evaluates the grid.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import triton

from .configs import config_label
from .context import find_autotuner, kernel_meta, resolve_grid, unwrap_jit, user_stacklevel
from .prune import NMPTuningError

__all__ = ["PerfModel", "top_k_count"]

Predictor = Callable[[Any, dict, triton.Config, tuple], Any]


def _default_predict(kernel: Any, named_args: dict, config: triton.Config, grid: tuple) -> Any:
    import triton_nmp.costmodel as costmodel  # looked up per call: tests and tools may swap it

    return costmodel.predict_seconds(kernel, named_args, config, grid)


def _load_predictor(model: Any) -> Predictor:
    """A predictor from what the user gave: None (the calibrated model of the active target), a target
    (preset name, TOML path or TargetSpec), a CostModel-like object, or a callable."""
    if model is None:
        return _default_predict
    from triton_nmp.target import TargetSpec

    if isinstance(model, (str, os.PathLike, TargetSpec)):
        from triton_nmp.costmodel import CostModel

        spec = model if isinstance(model, TargetSpec) else TargetSpec.load(model)
        model = CostModel.load(spec) if hasattr(CostModel, "load") else CostModel(spec)
    for attr in ("predict_seconds", "predict"):
        method = getattr(model, attr, None)
        if callable(method):
            return method
    if callable(model):
        return model
    raise TypeError(f"model must be a cost model, a target or a callable, not {type(model).__name__}")


@dataclass
class PerfModel:
    """Predicted seconds of a config; callable with Triton's `perf_model` convention.

    Returns math.inf when the model cannot evaluate a config or fails (warned once per kernel), so a
    broken prediction never aborts tuning: the autotuner then measures instead.
    """

    model: Any = None
    _predictor: Predictor | None = field(default=None, init=False, repr=False)
    _warned: set = field(default_factory=set, init=False, repr=False)

    def predict(self, fn: Any, named_args: dict[str, Any], kwargs: dict[str, Any], config: triton.Config) -> float:
        """Seconds for `config` of kernel `fn` launched with `named_args` and `kwargs` (incl. grid)."""
        jit = unwrap_jit(fn)
        try:
            if self._predictor is None:
                self._predictor = _load_predictor(self.model)
            meta = kernel_meta(fn, named_args, kwargs, config)
            grid = resolve_grid(kwargs.get("grid"), meta)
            args = {k: v for k, v in meta.items() if k not in config.kwargs}
            value = self._predictor(jit, args, config, grid)
            seconds = float(getattr(value, "seconds", value))
        except Exception as exc:  # a model failure must not abort tuning
            if jit.__name__ not in self._warned:
                self._warned.add(jit.__name__)
                warnings.warn(f"cost model failed for '{jit.__name__}' ({config_label(config)}): "
                              f"{type(exc).__name__}: {exc}; such configs rank last", stacklevel=user_stacklevel())
            return math.inf
        return seconds if not math.isnan(seconds) else math.inf

    def __call__(self, **values: Any) -> float:
        tuner = find_autotuner(values=values)
        if tuner is None:
            raise NMPTuningError("this perf_model must be called by triton.autotune (it finds the kernel and "
                                 "config from the autotuner); call PerfModel.predict(kernel, ...) directly otherwise")
        config = next((c for c in tuner.configs
                       if all(k in values and values[k] == v for k, v in c.all_kwargs().items())), None)
        if config is None:
            raise NMPTuningError("perf_model: the keyword arguments match none of the autotuner's configs")
        nargs = tuner.nargs
        own = config.all_kwargs()
        kwargs = {k: v for k, v in values.items() if k not in nargs and k not in own}
        return self.predict(tuner.fn, nargs, kwargs, config)


def top_k_count(top_k: int | float, n: int) -> int:
    """How many of `n` candidates `top_k` keeps: a fraction <= 1.0 of them (at least one) or a count."""
    if isinstance(top_k, float) and top_k <= 1.0:
        return max(1, int(n * top_k))
    if not isinstance(top_k, int):
        raise TypeError("Error while pruning configs, top_k must be either 1) a float <= 1.0 or 2) an int")
    return top_k

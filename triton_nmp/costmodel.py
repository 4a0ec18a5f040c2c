"""Calibrated cost model: rank autotuning configs without running them.

For one config the model (1) lowers the kernel to nmpir through the legality query (no LLVM),
(2) predicts the launch's execution trace statically (`backend.trace_predict`: DMA descriptors with
byte offsets, strides and sizes, compute ops by unit and dtype, multi-buffering flags, per program),
(3) charges it with the timing model's formulas for the arguments' actual placements and the
config's program-to-PU mapping (bank locality, NoC hops, contention per wave, overlap), and
(4) applies calibrated coefficients. When the trace depends on loaded data, it falls back to an
analytical estimate from the nmpir op counts of one program with loop trip counts taken from the
kernel's scalar arguments where they are known; this path has its own coefficients.

Coefficients are fitted per target description by `calibrate()` (`triton-nmp calibrate`) from
simulated measurements: log(simulated) = a + b * log(predicted), least squares, separately for the
exact and the fallback path, and stored as JSON in the user's cache directory.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from triton_nmp.atomic_file import replace_file
from triton_nmp.target import TargetSpec, active_target

_MODEL_VERSION = 1


def calibration_dir() -> Path:
    root = os.environ.get("TRITON_NMP_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "triton-nmp")
    return Path(root) / "calibration"


@dataclass
class PathFit:
    """log(simulated) = a + b * log(predicted) for one prediction path."""

    a: float = 0.0
    b: float = 1.0
    samples: int = 0
    r2: float = float("nan")
    kendall_tau: float = float("nan")
    median_abs_error: float = float("nan")

    def apply(self, predicted: float) -> float:
        if predicted <= 0 or not math.isfinite(predicted):
            return predicted
        return math.exp(self.a + self.b * math.log(predicted))


@dataclass
class Calibration:
    target: str
    target_hash: str
    exact: PathFit = field(default_factory=PathFit)
    fallback: PathFit = field(default_factory=PathFit)
    version: int = _MODEL_VERSION
    created: float = 0.0

    @classmethod
    def path_for(cls, spec: TargetSpec) -> Path:
        return calibration_dir() / f"{spec.name}-{spec.hash()[:16]}.json"

    @classmethod
    def load(cls, spec: TargetSpec) -> Calibration:
        """The stored calibration for `spec`, or identity coefficients when there is none (or it is corrupt)."""
        p = cls.path_for(spec)
        default = cls(spec.name, spec.hash())
        if not p.exists():
            return default
        try:
            raw = json.loads(p.read_text())
            if raw.get("version") != _MODEL_VERSION or raw.get("target_hash") != spec.hash():
                return default
            return cls(raw["target"], raw["target_hash"], PathFit(**raw["exact"]), PathFit(**raw["fallback"]),
                       raw["version"], raw.get("created", 0.0))
        except (OSError, ValueError, KeyError, TypeError):
            import warnings

            warnings.warn(f"ignoring corrupt cost-model calibration {p}; run `triton-nmp calibrate`", stacklevel=2)
            return default

    def save(self) -> Path:
        spec_path = calibration_dir() / f"{self.target}-{self.target_hash[:16]}.json"
        replace_file(spec_path, lambda f: f.write(json.dumps(asdict(self), indent=1)))
        return spec_path


@dataclass
class Prediction:
    seconds: float  # calibrated
    raw_seconds: float  # before calibration
    exact: bool  # the trace was predicted exactly (no data dependence)
    legal: bool = True
    reason: str = ""
    dma_cycles: float = 0.0
    compute_cycles: float = 0.0
    bytes_local: int = 0
    bytes_remote: int = 0


def _span(t) -> int:
    if t.numel() == 0:
        return 0
    return (1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))) * t.element_size()


def _grid_of(grid: Any, meta: dict) -> tuple[int, int, int]:
    g = grid(meta) if callable(grid) else grid
    g = tuple(int(x) for x in (g if isinstance(g, (tuple, list)) else (g,)))
    return tuple(list(g) + [1] * (3 - len(g)))[:3]


def _fallback_seconds(func, scalars: dict, spec: TargetSpec, n_programs: int) -> float:
    """Rough per-program estimate from op counts (loops run their statically known trip count, else once)."""
    from triton_nmp.backend.ops import Operands

    def ops_cost(ops, mult: float) -> float:
        cyc = 0.0
        for op in ops:
            if op.name in ("nmp.dma_load", "nmp.dma_store", "nmp.gather", "nmp.scatter"):
                t = op.results[0].type if op.results else Operands(op).value.type
                nbytes = t.nbytes
                per = spec.dma_setup_cycles + nbytes / spec.bank_bytes_per_cycle
                if op.name in ("nmp.gather", "nmp.scatter"):
                    per = t.numel * (spec.dma_setup_cycles / spec.dma_max_in_flight + spec.dma_granule_bytes
                                     / spec.bank_bytes_per_cycle)
                cyc += mult * per
            elif op.name in ("nmp.vec", "nmp.reduce"):
                cyc += mult * op.operands[0].type.numel / spec.vector_fp32_lanes
            elif op.name == "nmp.matmul":
                a, b = Operands(op).a.type, Operands(op).b.type
                dtype = {"f16": "fp16", "bf16": "bf16", "i8": "int8"}.get(a.elem, "fp32")
                cyc += mult * a.shape[-2] * a.shape[-1] * b.shape[-1] / spec.peak_macs_per_cycle(dtype)
            for r in op.regions:
                trips = 1.0
                if op.name == "scf.for":
                    trips = _static_trips(op, scalars)
                cyc += ops_cost(r.blocks[0].ops, mult * trips)
        return cyc

    per_program = ops_cost(func.body.ops, 1.0)
    waves = math.ceil(n_programs / spec.num_pus)
    return spec.cycles_to_seconds(per_program * waves) + spec.launch_overhead_us * 1e-6


def _static_trips(op, scalars: dict) -> float:
    def value(v):
        owner = v.owner
        if getattr(owner, "name", "") == "arith.constant":
            return owner.attrs["value"]
        if v.name in scalars:
            return scalars[v.name]
        return None

    lb, ub, step = (value(o) for o in op.operands[:3])
    if None in (lb, ub, step) or not step:
        return 4.0
    return max(0.0, math.ceil((ub - lb) / step))


@dataclass
class PredictedLaunch:
    """One config's launch before anything runs: the legality verdict, the nmpir function, its
    options, the grid, the scalars, one `ArgBuffer` per pointer argument (None otherwise, placements
    as registered now) and the statically predicted trace (`backend.trace_predict`)."""

    verdict: Any
    func: Any = None
    options: Any = None
    grid: tuple[int, int, int] = (1, 1, 1)
    scalars: dict = field(default_factory=dict)
    buffers: list = field(default_factory=list)
    trace: Any = None


def predicted_launch(kernel, named_args: dict, config: Any, grid: Any, spec: TargetSpec) -> PredictedLaunch:
    """Lower `config` (no LLVM) and predict its launch's trace: what the cost model charges and what the
    autotuner's layout search reads the arguments' footprints from."""
    from triton_nmp.backend.trace_predict import predict_trace
    from triton_nmp.legality import lower_config
    from triton_nmp.placement import placement_of
    from triton_nmp.simulator.timing import ArgBuffer

    verdict, module, options = lower_config(kernel, named_args, config, spec)
    if not verdict.legal:
        return PredictedLaunch(verdict)
    kwargs = dict(getattr(config, "kwargs", config) or {})
    meta = {**named_args, **kwargs}
    g = _grid_of(grid, meta)
    func = module.kernel
    scalars, spans, buffers = {}, {}, []
    for a in func.args:
        v = meta.get(a.name)
        if a.type.is_ptr:
            if hasattr(v, "data_ptr"):
                spans[a.name] = _span(v)
                ptr = int(v.data_ptr())
                buffers.append(ArgBuffer(a.name, ptr, spans[a.name], placement_of(ptr, spans[a.name])))
            else:
                buffers.append(None)
        else:
            if isinstance(v, (int, float, bool)):
                scalars[a.name] = v
            buffers.append(None)
    return PredictedLaunch(verdict, func, options, g, scalars, buffers, predict_trace(func, scalars, spans, g))


class CostModel:
    """Predicts the simulated time of a config; one instance per target (holds its calibration)."""

    def __init__(self, spec: TargetSpec | None = None, calibration: Calibration | None = None):
        self.spec = spec or active_target()
        self.calibration = calibration or Calibration.load(self.spec)

    def predict_raw(self, kernel, named_args: dict, config: Any, grid: Any) -> Prediction:
        from triton_nmp.simulator.timing import simulate_timing

        launch = predicted_launch(kernel, named_args, config, grid, self.spec)
        if not launch.verdict.legal:
            return Prediction(math.inf, math.inf, False, False, launch.verdict.reason)
        pred, g = launch.trace, launch.grid
        if not pred.exact:
            raw = _fallback_seconds(launch.func, launch.scalars, self.spec, g[0] * g[1] * g[2])
            return Prediction(raw, raw, False, True, pred.reason)
        timing = simulate_timing(pred.trace, g, launch.buffers, self.spec, mapping=launch.options.pu_mapping,
                                 kernel=launch.func.name)
        return Prediction(timing.seconds, timing.seconds, True, True, "", float(timing.dma_cycles),
                          float(timing.compute_cycles), int(timing.bytes_local), int(timing.bytes_remote))

    def predict(self, kernel, named_args: dict, config: Any, grid: Any) -> Prediction:
        p = self.predict_raw(kernel, named_args, config, grid)
        fit = self.calibration.exact if p.exact else self.calibration.fallback
        p.seconds = fit.apply(p.raw_seconds)
        return p


_MODELS: dict[str, CostModel] = {}


def model_for(spec: TargetSpec | None = None) -> CostModel:
    spec = spec or active_target()
    key = spec.hash()
    if key not in _MODELS:
        _MODELS[key] = CostModel(spec)
    return _MODELS[key]


def predict_seconds(kernel, named_args: dict, config: Any, grid: Any) -> float:
    """Calibrated predicted simulated seconds of `kernel` with `config` (math.inf when illegal)."""
    return model_for().predict(kernel, named_args, config, grid).seconds


# -- calibration ------------------------------------------------------------------------------------


def kendall_tau(x: list[float], y: list[float]) -> float:
    """Kendall's tau-b between two rankings (ties count as neither concordant nor discordant)."""
    n = len(x)
    conc = disc = tx = ty = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                tx += 1
            elif dy == 0:
                ty += 1
            elif dx == dy:
                conc += 1
            else:
                disc += 1
    denom = math.sqrt((conc + disc + tx) * (conc + disc + ty))
    return (conc - disc) / denom if denom else float("nan")


def fit_path(predicted: list[float], simulated: list[float]) -> PathFit:
    p = np.log(np.asarray(predicted, dtype=np.float64))
    s = np.log(np.asarray(simulated, dtype=np.float64))
    a, b = (float(np.mean(s - p)) if len(p) else 0.0), 1.0
    if len(p) >= 6 and np.ptp(p) > 0:
        slope, intercept = np.polyfit(p, s, 1)
        if slope > 0.2:  # a non-increasing fit from few or noisy points would invert the ranking
            a, b = float(intercept), float(slope)
    fitted = a + b * p
    ss_res = float(np.sum((s - fitted) ** 2))
    ss_tot = float(np.sum((s - s.mean()) ** 2)) if len(s) else 0.0
    r2 = 1 - ss_res / ss_tot if ss_tot > 0 else 1.0
    rel = np.abs(np.exp(fitted) / np.exp(s) - 1)
    return PathFit(float(a), float(b), len(p), float(r2), kendall_tau(list(fitted), list(s)),
                   float(np.median(rel)) if len(rel) else float("nan"))


@dataclass
class CalibrationPoint:
    case: str
    config: str
    predicted: float
    simulated: float
    exact: bool


def calibrate(points: list[CalibrationPoint], spec: TargetSpec | None = None, save: bool = True) -> Calibration:
    """Fit the model's coefficients from (predicted, simulated) pairs; store them for `spec`."""
    spec = spec or active_target()
    cal = Calibration(spec.name, spec.hash(), created=time.time())
    ex = [p for p in points if p.exact and p.simulated > 0 and math.isfinite(p.predicted)]
    fb = [p for p in points if not p.exact and p.simulated > 0 and math.isfinite(p.predicted)]
    if ex:
        cal.exact = fit_path([p.predicted for p in ex], [p.simulated for p in ex])
    if fb:
        cal.fallback = fit_path([p.predicted for p in fb], [p.simulated for p in fb])
    if save:
        cal.save()
    _MODELS.pop(spec.hash(), None)
    return cal

"""Calibration of a target's free parameters against measured kernel times (`triton-nmp calibrate-target`).

A target's `[fit]` table names the fields its sources leave open and the range each source allows
(e.g. `issue.dma_overlap` in [0, 1]). Given a table of measured rows (`triton_nmp.prim.load_table`),
every row's workload is executed once (traces captured), then the free fields are fitted by bounded
coordinate search minimising the mean absolute relative error over the *fit* rows only; the *test*
rows, never seen by the fit, report how well the fitted mechanism predicts. A fitted value can
never leave its declared range (the search only visits values inside it).

Re-timing a captured trace for a candidate costs milliseconds (`WorkloadRun.seconds`), so a fit of
four fields is a few hundred re-timings, not re-executions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from triton_nmp.errors import NMPError
from triton_nmp.prim import MeasuredRow, WorkloadRun, run_workload
from triton_nmp.target import TargetSpec

__all__ = ["CalibrationError", "FitResult", "fit_target", "split_rows"]

_GRID = 11  # values tried per field and sweep; each sweep narrows the range around the best
_SWEEPS = 4


class CalibrationError(NMPError):
    """A calibration that cannot be set up (no free fields, no fit rows, unknown field)."""


@dataclass
class FitResult:
    """Fitted values and per-row errors (simulated / measured - 1) on fit and test rows."""

    spec: TargetSpec
    fitted: dict[str, tuple[float, float, float, float]]  # path -> (initial, fitted, low, high)
    fit_rows: list[tuple[MeasuredRow, float]] = field(default_factory=list)
    test_rows: list[tuple[MeasuredRow, float]] = field(default_factory=list)

    @staticmethod
    def mae(rows: list[tuple[MeasuredRow, float]]) -> float:
        return sum(abs(e) for _, e in rows) / len(rows) if rows else float("nan")

    def table(self) -> str:
        lines = [f"{'field':<24}{'range':>18}{'initial':>10}{'fitted':>10}"]
        for path, (init, value, lo, hi) in self.fitted.items():
            lines.append(f"{path:<24}{f'[{lo:g}, {hi:g}]':>18}{init:>10.4g}{value:>10.4g}")
        lines.append("")
        lines.append(f"{'row':<34}{'set':>5}{'measured ms':>13}{'simulated ms':>14}{'error':>8}")
        for kind, rows in (("fit", self.fit_rows), ("test", self.test_rows)):
            for row, err in rows:
                lines.append(f"{row.label:<34}{kind:>5}{row.ms:>13.3f}{row.ms * (1 + err):>14.3f}{err:>+8.1%}")
        lines.append("")
        lines.append(f"mean absolute error: fit rows {self.mae(self.fit_rows):.1%}, "
                     f"test rows {self.mae(self.test_rows):.1%}")
        return "\n".join(lines)


def split_rows(rows: list[MeasuredRow], fit_dpus: set[int] | None) -> tuple[list[int], list[int]]:
    """Indices of fit and test rows: fit on the rows with `fit_dpus` DPU counts (default: the
    smallest count in the table), test on the others."""
    dpus = fit_dpus or {min(r.dpus for r in rows)}
    fit = [i for i, r in enumerate(rows) if r.dpus in dpus]
    if not fit:
        raise CalibrationError(f"no row has {sorted(dpus)} DPUs; the table has {sorted({r.dpus for r in rows})}")
    return fit, [i for i in range(len(rows)) if i not in fit]


def _with(spec: TargetSpec, attrs: dict[str, float]) -> TargetSpec:
    typed = {a: (round(v) if isinstance(getattr(spec, a), int) else v) for a, v in attrs.items()}
    return dataclasses.replace(spec, **typed)


def fit_target(spec: TargetSpec, rows: list[MeasuredRow], fit_idx: list[int], params: list[str] | None = None,
               runs: list[WorkloadRun] | None = None) -> FitResult:
    """Fit `params` (field paths of `spec.fit_ranges`; default all of them) on rows `fit_idx`.

    `runs` may pass already executed workloads (one per row, at the rows' sizes); otherwise each row
    is executed here on `spec`.
    """
    ranges = {path: (lo, hi) for path, lo, hi in spec.fit_ranges}
    if not ranges:
        raise CalibrationError(f"target {spec.name} declares no free fields; add a [fit] table of "
                               f"field = [low, high] to its TOML file")
    params = params or list(ranges)
    unknown = [p for p in params if p not in ranges]
    if unknown:
        raise CalibrationError(f"{', '.join(unknown)}: no range in target {spec.name}'s [fit] table "
                               f"(free fields: {', '.join(ranges)})")
    attr = {info.path: info.attr for info in TargetSpec.schema()}
    runs = runs or [run_workload(r.workload, r.dpus, r.elements, spec) for r in rows]

    def errors(candidate: TargetSpec, idx: list[int]) -> list[float]:
        return [runs[i].seconds(candidate) * 1e3 / rows[i].ms - 1 for i in idx]

    def loss(values: dict[str, float]) -> float:
        e = errors(_with(spec, values), fit_idx)
        return sum(abs(x) for x in e) / len(e)

    values = {attr[p]: float(getattr(spec, attr[p])) for p in params}
    window = {attr[p]: ranges[p] for p in params}
    best = loss(values)
    for _ in range(_SWEEPS):
        for p in params:
            a = attr[p]
            lo, hi = window[a]
            for k in range(_GRID):
                trial = dict(values, **{a: lo + (hi - lo) * k / (_GRID - 1)})
                cost = loss(trial)
                if cost < best - 1e-12:
                    best, values = cost, trial
            step = (hi - lo) / (_GRID - 1)
            full_lo, full_hi = ranges[p]
            window[a] = (max(full_lo, values[a] - step), min(full_hi, values[a] + step))
    fitted_spec = _with(spec, values)
    fitted = {p: (float(getattr(spec, attr[p])), float(getattr(fitted_spec, attr[p])), *ranges[p]) for p in params}
    for p, (_, v, lo, hi) in fitted.items():
        assert lo <= v <= hi, (p, v, lo, hi)  # the search visits only values inside the range
    test_idx = [i for i in range(len(rows)) if i not in fit_idx]
    return FitResult(fitted_spec, fitted, list(zip([rows[i] for i in fit_idx], errors(fitted_spec, fit_idx))),
                     list(zip([rows[i] for i in test_idx], errors(fitted_spec, test_idx))))

"""Compare a kernel's outputs with a reference: the torch oracle's expectation (with its per-element
error bound and undetermined elements, see values.py) or another implementation's outputs.

Integers and bools must be identical; floats within the bound (NaN equals NaN, +0 equals -0, an
infinity only equals itself). Undetermined elements are not compared but counted. Without a torch
expectation (its evaluator failed) two implementations are compared with a fallback tolerance of a
few ulps of the type relative to the output's largest magnitude, reported as such.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .dtypes import dt
from .evaluate import Expected
from .values import from_tensor

FALLBACK_RTOL = {"float16": 2.0 ** -8, "bfloat16": 2.0 ** -5, "float32": 2.0 ** -18, "float64": 2.0 ** -45}


@dataclass
class Verdict:
    ok: bool
    checked: int = 0
    undetermined: int = 0
    detail: str = ""


def _as_ref(t: torch.Tensor, dtype: str) -> torch.Tensor:
    return from_tensor(t, dt(dtype))


def _close(got: torch.Tensor, ref: torch.Tensor, err: torch.Tensor | None) -> torch.Tensor:
    g, r = got.double(), ref.double()
    same = (g == r) | (torch.isnan(g) & torch.isnan(r))
    if err is not None:
        finite = torch.isfinite(g) & torch.isfinite(r)
        same = same | (finite & ((g - r).abs() <= err * (1 + 1e-9)))
    return same


def compare(got: torch.Tensor, exp: Expected, other: torch.Tensor | None = None, label: str = "") -> Verdict:
    """`got` against the expectation; with `other`, `got` against another implementation's output
    using the expectation's bound and undetermined mask."""
    d = dt(exp.dtype)
    g = _as_ref(got, exp.dtype).reshape(exp.value.shape)
    r = exp.value if other is None else _as_ref(other, exp.dtype).reshape(exp.value.shape)
    unc = exp.unc if exp.unc is not None else torch.zeros(exp.value.shape, dtype=torch.bool)
    if d.is_float:
        err = exp.err
        if other is not None and err is not None:
            err = 2 * err  # both sides may be anywhere within the bound of the expectation
        same = _close(g, r, err)
    else:
        same = g == r
    bad = ~same & ~unc
    checked = int((~unc).sum())
    if bool(bad.any()):
        idx = bad.nonzero()[:4].tolist()
        pairs = []
        for i in idx:
            i = tuple(i)
            tol = "" if exp.err is None else f" (bound {float(exp.err[i]):.3g})"
            pairs.append(f"{list(i)}: got {g[i].item()!r} expected {r[i].item()!r}{tol}")
        return Verdict(False, checked, int(unc.sum()), f"{label}{int(bad.sum())} of {checked} differ: "
                       + "; ".join(pairs))
    return Verdict(True, checked, int(unc.sum()))


def compare_fallback(got: torch.Tensor, other: torch.Tensor, dtype: str, label: str = "") -> Verdict:
    d = dt(dtype)
    g, r = _as_ref(got, dtype), _as_ref(other, dtype)
    if d.is_float:
        scale = r.double().abs().nan_to_num(0, 0, 0).max().item() if r.numel() else 0.0
        same = _close(g, r, torch.full(r.shape, FALLBACK_RTOL[dtype] * (1 + scale), dtype=torch.float64))
    else:
        same = g == r
    if bool(same.all()):
        return Verdict(True, r.numel(), 0)
    idx = (~same).nonzero()[:4].tolist()
    pairs = [f"{i}: {g[tuple(i)].item()!r} vs {r[tuple(i)].item()!r}" for i in idx]
    return Verdict(False, r.numel(), 0, f"{label}{int((~same).sum())} of {r.numel()} differ (fallback tolerance): "
                   + "; ".join(pairs))


def compare_all(gots: list[torch.Tensor], exps: dict[int, Expected] | None, others: list[torch.Tensor] | None,
                dtypes: dict[int, str]) -> Verdict:
    """Every output; `exps` None -> fallback against `others`; `others` None -> against `exps`."""
    keys = sorted(dtypes)
    checked = undetermined = 0
    for pos, k in enumerate(keys):
        label = f"output {k}: "
        if exps is None:
            v = compare_fallback(gots[pos], others[pos], dtypes[k], label)
        else:
            v = compare(gots[pos], exps[k], None if others is None else others[pos], label)
        checked += v.checked
        undetermined += v.undetermined
        if not v.ok:
            return Verdict(False, checked, undetermined, v.detail)
    return Verdict(True, checked, undetermined)

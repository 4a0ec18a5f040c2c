"""Automatic-layout decisions kept on disk, so a warm process does not run the timing model again.

`auto_layout.choose_checked` runs the timing model twice per decision (the footprint-aligned layouts
against the default), the largest cost of a warm process's first step after simulating it. Its result
depends only on what the key here holds: the launch's predicted trace (hashed), the grid, every fixed
argument's layout, extent, size and position inside its placed range, the new arguments' sizes, the
target's full description, numpy's version, and the sources of this package and the simulator (auto
layout, placement, the timing model, the target's derived figures). Host addresses do not enter: the
timing model only reads positions relative to a placement's origin. Files live next to the kernel in Triton's cache
(`<name>.layouts-<key>.json`, a `side_cache` file), repeat their key (checked on load), and a file that cannot be
read is reported with a warning naming it and decided again. The re-layouts a launch offers
(`relayout.make_offers`: the timing model twice or more per launch site) are kept the same way
(`<name>.relayouts-<key>.json`), keyed also by every argument's layout flags, the movable arguments and the
mapping.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from triton_nmp.auto_layout import LayoutChoice, choose_checked
from triton_nmp.placement import Placement
from triton_nmp.side_cache import SideCache
from triton_nmp.source_hash import files_hash
from triton_nmp.target import TargetSpec

__all__ = ["choose_checked_cached", "offers_cached"]

_FILES = SideCache("layouts", "json", "layout", "decision", "choosing the launch's layouts again")
_OFFERS = SideCache("relayouts", "json", "re-layout", "offer", "pricing the launch's re-layouts again")


@functools.cache
def _sources_hash() -> str:
    """This package's and the simulator's sources (auto layout, placement, the timing model, the target's
    derived figures all live there) and numpy's version."""
    import triton_nmp.simulator as simulator

    return files_hash(np.__version__, Path(__file__).parent, Path(simulator.__file__).parent)


@functools.lru_cache(maxsize=16)
def _spec_hash(spec: TargetSpec) -> str:
    return hashlib.sha256(spec.to_toml().encode()).hexdigest()


def _key_text(trace: np.ndarray, grid: tuple[int, int, int], fixed: list[Any], auto: dict[int, tuple[int, int]],
              spec: TargetSpec) -> str:
    trace = np.ascontiguousarray(trace)
    fixed_desc = [None if a is None else
                  [a.name, int(a.base), int(a.nbytes),
                   None if a.placement is None else [*a.placement.layout_signature(), int(a.placement.extent)]]
                  for a in fixed]
    return json.dumps({
        "sources": _sources_hash(), "target": _spec_hash(spec), "grid": [int(g) for g in grid],
        "trace": [hashlib.sha256(trace.tobytes()).hexdigest(), list(trace.shape), str(trace.dtype)],
        "fixed": fixed_desc, "auto": sorted([int(i), int(v[1])] for i, v in auto.items()),
    }, sort_keys=True)


def _decode(data: dict, auto: dict[int, tuple[int, int]]) -> dict[int, LayoutChoice]:
    out: dict[int, LayoutChoice] = {}
    for i, c in data["choices"].items():
        a = int(i)
        if a not in auto:
            raise ValueError(f"a layout for argument {a}, which is not new in this launch")
        pl = Placement(str(c["policy"]), _int_or_none(c["bank"]), _int_or_none(c["granularity"]), int(c["extent"]),
                       auto[a][0])
        out[a] = LayoutChoice(pl, str(c["reason"]), bool(c["loaded"]), bool(c.get("spread", False)))
    return out


def _encode(choices: dict[int, LayoutChoice], key: str) -> str:
    return json.dumps({"key": key, "choices": {
        str(a): {"policy": c.placement.policy, "bank": _int_or_none(c.placement.bank),
                 "granularity": _int_or_none(c.placement.granularity), "extent": int(c.placement.extent),
                 "reason": c.reason, "loaded": bool(c.loaded), "spread": bool(c.spread)}
        for a, c in choices.items()}})


def _read(path: str) -> tuple[Any, dict]:
    with open(path) as f:
        data = json.load(f)
    return data.get("key"), data


def _int_or_none(v: Any) -> int | None:
    return None if v is None else int(v)


def choose_checked_cached(metadata: Any, trace: np.ndarray, grid: tuple[int, int, int], fixed: list[Any],
                          auto: dict[int, tuple[int, int]], spec: TargetSpec) -> dict[int, LayoutChoice]:
    """`auto_layout.choose_checked(trace, grid, fixed, auto, spec)`, read from disk when decided before."""
    where = _FILES.file(metadata, lambda: _key_text(trace, grid, fixed, auto, spec))
    if where is None:
        return choose_checked(trace, grid, fixed, auto, spec)
    choices = _FILES.load(where, _read, lambda data: _decode(data, auto))
    if choices is None:
        choices = choose_checked(trace, grid, fixed, auto, spec)
        _FILES.store(where, _encode(choices, where.key))
    return choices


def _offers_key_text(trace: np.ndarray, grid: tuple[int, int, int], args: list[Any],
                     movable: dict[int, tuple[int, int]], mapping: str, spec: TargetSpec) -> str:
    trace = np.ascontiguousarray(trace)
    args_desc = [None if a is None else
                 [a.name, int(a.base), int(a.nbytes), [*a.placement.layout_signature(), int(a.placement.extent),
                                                       bool(a.placement.chosen), bool(a.placement.provisional)]]
                 for a in args]
    return json.dumps({
        "sources": _sources_hash(), "target": _spec_hash(spec), "grid": [int(g) for g in grid],
        "trace": [hashlib.sha256(trace.tobytes()).hexdigest(), list(trace.shape), str(trace.dtype)],
        "args": args_desc, "movable": sorted([int(i), int(v[1])] for i, v in movable.items()),
        "mapping": mapping,
    }, sort_keys=True)


def _decode_offers(data: dict, movable: dict[int, tuple[int, int]]) -> list[Any]:
    from triton_nmp.relayout import Offer

    out = []
    for o in data["offers"]:
        a = int(o["arg"])
        if a not in movable:
            raise ValueError(f"an offer for argument {a}, which this launch may not move")
        pl = Placement(str(o["policy"]), _int_or_none(o["bank"]), _int_or_none(o["granularity"]), int(o["extent"]),
                       movable[a][0])
        out.append(Offer(a, pl, str(o["reason"]), float(o["cycles_now"]), float(o["cycles_then"]),
                         float(o["move_cycles"])))
    return out


def _encode_offers(offers: list[Any], key: str) -> str:
    return json.dumps({"key": key, "offers": [
        {"arg": o.arg, "policy": o.layout.policy, "bank": _int_or_none(o.layout.bank),
         "granularity": _int_or_none(o.layout.granularity), "extent": int(o.layout.extent), "reason": o.reason,
         "cycles_now": o.cycles_now, "cycles_then": o.cycles_then, "move_cycles": o.move_cycles} for o in offers]})


def offers_cached(metadata: Any, trace: np.ndarray, grid: tuple[int, int, int], args: list[Any],
                  movable: dict[int, tuple[int, int]], mapping: str, spec: TargetSpec) -> list[Any]:
    """`relayout.make_offers(trace, grid, args, movable, mapping, spec)`, read from disk when priced before."""
    from triton_nmp.relayout import make_offers

    where = _OFFERS.file(metadata, lambda: _offers_key_text(trace, grid, args, movable, mapping, spec))
    if where is None:
        return make_offers(trace, grid, args, movable, mapping, spec)
    offers = _OFFERS.load(where, _read, lambda data: _decode_offers(data, movable))
    if offers is None:
        offers = make_offers(trace, grid, args, movable, mapping, spec)
        _OFFERS.store(where, _encode_offers(offers, where.key))
    return offers

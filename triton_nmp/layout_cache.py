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
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from triton_nmp.auto_layout import LayoutChoice, choose_checked
from triton_nmp.placement import Placement
from triton_nmp.side_cache import SideCache
from triton_nmp.source_hash import files_hash
from triton_nmp.target import TargetSpec

__all__ = ["choose_checked_cached", "offers_cached"]

R = TypeVar("R")

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


def _launch_key(trace: np.ndarray, grid: tuple[int, int, int], spec: TargetSpec) -> dict[str, Any]:
    """What every decision of a launch depends on: the sources, the target, the grid and the footprint."""
    trace = np.ascontiguousarray(trace)
    return {"sources": _sources_hash(), "target": _spec_hash(spec), "grid": [int(g) for g in grid],
            "trace": [hashlib.sha256(trace.tobytes()).hexdigest(), list(trace.shape), str(trace.dtype)]}


def _key_text(trace: np.ndarray, grid: tuple[int, int, int], fixed: list[Any], auto: dict[int, tuple[int, int]],
              spec: TargetSpec) -> str:
    fixed_desc = [None if a is None else
                  [a.name, int(a.base), int(a.nbytes),
                   None if a.placement is None else [*a.placement.layout_signature(), int(a.placement.extent)]]
                  for a in fixed]
    return json.dumps({**_launch_key(trace, grid, spec), "fixed": fixed_desc,
                       "auto": sorted([int(i), int(v[1])] for i, v in auto.items())}, sort_keys=True)


def _layout_json(pl: Placement) -> dict[str, Any]:
    return {"policy": pl.policy, "bank": _int_or_none(pl.bank), "granularity": _int_or_none(pl.granularity),
            "extent": int(pl.extent)}


def _layout_from(d: dict, origin: int) -> Placement:
    return Placement(str(d["policy"]), _int_or_none(d["bank"]), _int_or_none(d["granularity"]), int(d["extent"]),
                     origin)


def _decode(data: dict, auto: dict[int, tuple[int, int]]) -> dict[int, LayoutChoice]:
    out: dict[int, LayoutChoice] = {}
    for i, c in data["choices"].items():
        a = int(i)
        if a not in auto:
            raise ValueError(f"a layout for argument {a}, which is not new in this launch")
        out[a] = LayoutChoice(_layout_from(c, auto[a][0]), str(c["reason"]), bool(c["loaded"]),
                              bool(c.get("spread", False)))
    return out


def _encode(choices: dict[int, LayoutChoice], key: str) -> str:
    return json.dumps({"key": key, "choices": {
        str(a): {**_layout_json(c.placement), "reason": c.reason, "loaded": bool(c.loaded), "spread": bool(c.spread)}
        for a, c in choices.items()}})


def _read(path: str) -> tuple[Any, dict]:
    with open(path) as f:
        data = json.load(f)
    return data.get("key"), data


def _int_or_none(v: Any) -> int | None:
    return None if v is None else int(v)


def _cached(side: SideCache, metadata: Any, key_text: Callable[[], str], decode: Callable[[dict], R],
            compute: Callable[[], R], encode: Callable[[R, str], str]) -> R:
    """`compute()`, read from `side`'s file for this kernel and key when stored before, else stored there."""
    where = side.file(metadata, key_text)
    if where is None:
        return compute()
    value = side.load(where, _read, decode)
    if value is None:
        value = compute()
        side.store(where, encode(value, where.key))
    return value


def choose_checked_cached(metadata: Any, trace: np.ndarray, grid: tuple[int, int, int], fixed: list[Any],
                          auto: dict[int, tuple[int, int]], spec: TargetSpec) -> dict[int, LayoutChoice]:
    """`auto_layout.choose_checked(trace, grid, fixed, auto, spec)`, read from disk when decided before."""
    return _cached(_FILES, metadata, lambda: _key_text(trace, grid, fixed, auto, spec),
                   lambda data: _decode(data, auto), lambda: choose_checked(trace, grid, fixed, auto, spec), _encode)


def _offers_key_text(trace: np.ndarray, grid: tuple[int, int, int], args: list[Any],
                     movable: dict[int, tuple[int, int]], mapping: str, spec: TargetSpec) -> str:
    args_desc = [None if a is None else
                 [a.name, int(a.base), int(a.nbytes), [*a.placement.layout_signature(), int(a.placement.extent),
                                                       bool(a.placement.chosen), bool(a.placement.provisional)]]
                 for a in args]
    return json.dumps({**_launch_key(trace, grid, spec), "args": args_desc,
                       "movable": sorted([int(i), int(v[1])] for i, v in movable.items()), "mapping": mapping},
                      sort_keys=True)


def _decode_offers(data: dict, movable: dict[int, tuple[int, int]]) -> list[Any]:
    from triton_nmp.relayout import Offer

    out = []
    for o in data["offers"]:
        a = int(o["arg"])
        if a not in movable:
            raise ValueError(f"an offer for argument {a}, which this launch may not move")
        out.append(Offer(a, _layout_from(o, movable[a][0]), str(o["reason"]), float(o["cycles_now"]),
                         float(o["cycles_then"]), float(o["move_cycles"])))
    return out


def _encode_offers(offers: list[Any], key: str) -> str:
    return json.dumps({"key": key, "offers": [
        {"arg": o.arg, **_layout_json(o.layout), "reason": o.reason, "cycles_now": o.cycles_now,
         "cycles_then": o.cycles_then, "move_cycles": o.move_cycles} for o in offers]})


def offers_cached(metadata: Any, trace: np.ndarray, grid: tuple[int, int, int], args: list[Any],
                  movable: dict[int, tuple[int, int]], mapping: str, spec: TargetSpec) -> list[Any]:
    """`relayout.make_offers(trace, grid, args, movable, mapping, spec)`, read from disk when priced before."""
    from triton_nmp.relayout import make_offers

    return _cached(_OFFERS, metadata, lambda: _offers_key_text(trace, grid, args, movable, mapping, spec),
                   lambda data: _decode_offers(data, movable),
                   lambda: make_offers(trace, grid, args, movable, mapping, spec), _encode_offers)

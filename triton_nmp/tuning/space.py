"""Search spaces: the product of tile sizes, multi-buffering depths and PU mappings.

nmp's useful knobs are tile sizes (scratchpad footprint and DMA sizes), `num_stages` (how many
buffers overlap DMA with compute) and `pu_mapping` (which PU runs which program, i.e. bank
locality), so a space is their product; `constraint` removes combinations that make no sense for a
kernel (e.g. BLOCK_K > BLOCK_M) before anything is compiled.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import triton

from triton_nmp.errors import NMPError

__all__ = ["config_space"]


def _axis(name: str, values: Any) -> tuple:
    if values is None:
        return (None,)
    if isinstance(values, (str, int)):
        values = (values,)
    out = tuple(dict.fromkeys(values))  # drop duplicates, keep order
    if not out:
        raise NMPError(f"config_space: axis '{name}' has no values")
    return out


def config_space(*, tiles: Mapping[str, Sequence[int]],
                 num_stages: Sequence[int] | int | None = (1, 2, 3),
                 pu_mapping: Sequence[str] | str | None = ("round_robin", "blocked", "locality"),
                 constraint: Callable[[dict[str, Any]], bool] | None = None,
                 num_warps: int = 4) -> list[triton.Config]:
    """Every combination of the tile sizes, `num_stages` and `pu_mapping` that `constraint` accepts.

    `tiles` maps constexpr names to candidate values, e.g. {"BLOCK_M": (32, 64), "BLOCK_K": (32, 64)}.
    `constraint` receives one dict with the tile values plus `num_stages` and `pu_mapping` and returns
    whether to keep it. `num_stages=None` / `pu_mapping=None` leave that option at the compiler's
    default. The order is deterministic (tiles vary slowest, in the order given).
    """
    if not isinstance(tiles, Mapping):
        raise NMPError("config_space: tiles must map constexpr names to sequences of values")
    names = list(tiles)
    axes = [_axis(n, tiles[n]) for n in names]
    stages = _axis("num_stages", num_stages)
    mappings = _axis("pu_mapping", pu_mapping)
    configs = []
    for values in itertools.product(*axes, stages, mappings):
        kwargs = dict(zip(names, values[:-2]))
        stage, mapping = values[-2], values[-1]
        point = {**kwargs, "num_stages": stage, "pu_mapping": mapping}
        if constraint is not None and not constraint(point):
            continue
        if mapping is not None:
            kwargs["pu_mapping"] = mapping
        configs.append(triton.Config(kwargs, num_warps=num_warps, num_stages=stage))
    if not configs:
        total = len(stages) * len(mappings)
        for axis in axes:
            total *= len(axis)
        raise NMPError(f"config_space: the constraint rejected all {total} combinations")
    return configs
